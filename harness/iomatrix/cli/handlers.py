"""A command's function named, not imported: each cli/*_parsers.py declares its commands with a
Handler, and only the command that runs imports its cli/*_commands.py.

The parser is built by every invocation (`iomatrix --help`, each command's --help, the shell
completion, every command before it runs). When it imported every command's code, that cost
~290 ms of imports (pydantic's models, the matrix loader, the statistics, the report, the host's
kernels) before anything happened: most of `iomatrix history` as a new process (issue 29). The
parsers and what they import stay light (an import-linter contract, cli-parser-light, and
tests/project/test_cli_imports.py hold it); a command's own imports are its own cost.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from iomatrix.plain import PlainRecord

# Where the command modules are.
PACKAGE = "iomatrix.cli"


class Handler(PlainRecord):
    """`set_defaults(func=Handler("history_commands", "cmd_history"))`: called with the parsed
    arguments as the function would be, it imports the module then and calls the function."""

    module: str  # under iomatrix.cli, e.g. "history_commands"
    function: str  # e.g. "cmd_history"

    def resolve(self) -> Callable[[argparse.Namespace], int]:
        module = importlib.import_module(f"{PACKAGE}.{self.module}")
        function: Callable[[argparse.Namespace], int] = getattr(module, self.function)
        return function

    def __call__(self, args: argparse.Namespace) -> int:
        return self.resolve()(args)
