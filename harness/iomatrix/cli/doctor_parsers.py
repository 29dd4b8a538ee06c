"""The parser of doctor (it runs doctor_commands.py). A declaration only: what the command runs is
imported when it runs (cli/handlers.py)."""

from __future__ import annotations

import argparse

from iomatrix.cli import help_format
from iomatrix.cli.handlers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "doctor",
        help="what this host lacks of the packages iomatrix needs (it installs nothing)",
        description=(
            "Check this host against the Debian packages iomatrix needs (the list it ships, the "
            "one `make run` installs from on a clone and the runner image installs whole) and "
            "print the apt-get line for what is missing, and whether /dev/kvm is there (without "
            "it every VM runs under TCG, several times slower). It installs nothing. Exit 0 when "
            "nothing is missing, 1 when something is."
        ),
        epilog=help_format.examples(
            "iomatrix doctor  # what `iomatrix run` needs",
            "iomatrix doctor --for test  # ... and the test suite of a clone",
            "sudo apt-get install --no-install-recommends $(iomatrix doctor --missing)",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument(
        "--for",
        dest="target",
        choices=["run", "test"],
        default="run",
        help="run: what running matrices needs (default); test: also what `make test` needs",
    )
    p.add_argument(
        "--missing",
        action="store_true",
        help="print only the names of the missing packages, one a line (for apt-get), exit 0",
    )
    p.set_defaults(func=Handler("doctor_commands", "cmd_doctor"))
