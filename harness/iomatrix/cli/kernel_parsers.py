"""The parsers of kernels, accel and guest-root (they run kernel_commands.py). A declaration only:
what the commands run is imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """kernels (list, fetch, build), accel and guest-root."""
    _kernels(sub)
    _accel_and_guest_root(sub)


def _kernels(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "kernels",
        help="list or fetch cached kernels",
        description=(
            "Kernels live in ~/.cache/iomatrix/kernels/<release>/ (or $IOMATRIX_CACHE). Debian "
            "kernels are downloaded with a private apt configuration; the host's is never changed. "
            "A suite is resolved again once its resolution is a day old; when the archive cannot "
            "be reached, the newest cached kernel the spec resolved to is used, with a warning."
        ),
        epilog=help_format.examples(
            "iomatrix kernels list",
            "iomatrix kernels fetch debian:bookworm",
            "iomatrix kernels build MATRIX --kernel patched  # one of its kernels",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    # list and fetch are sub-commands, not one positional choice beside SPEC...: argparse fills a
    # "*" positional as soon as it meets its neighbour, so `kernels fetch --offline SPEC` would
    # leave SPEC unrecognized.
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    options.json_output(
        actions.add_parser(
            "list",
            help="the cached kernels",
            epilog=help_format.examples("iomatrix kernels list --json"),
            formatter_class=help_format.ExamplesHelpFormatter,
        )
    )
    _kernels_fetch(actions)
    _kernels_build(actions)
    p.set_defaults(func=Handler("kernel_commands", "cmd_kernels"))


def _kernels_fetch(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """kernels fetch: kernels into the cache, by spec or as a matrix names them."""
    fetch = actions.add_parser(
        "fetch",
        help="fetch kernels into the cache (verified if there)",
        epilog=help_format.examples(
            "iomatrix kernels fetch debian:bookworm debian:trixie",
            "iomatrix kernels fetch --matrix-file matrix/nightly.yaml --releases  # a cache key",
            "iomatrix kernels fetch path:/boot/vmlinuz-6.1.0-13-amd64",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    fetch.add_argument(
        "specs",
        nargs="*",
        metavar="SPEC",
        help="debian:<suite|abi-release|version> or path:<vmlinuz>[,modules=<dir>]",
    )
    fetch.add_argument(
        "--matrix-file",
        type=Path,
        metavar="FILE",
        help="also every kernel FILE fetches ready to boot (not those it builds from source)",
    )
    fetch.add_argument(
        "--releases",
        action="store_true",
        help="print only the kernels' releases, sorted, one per line (a CI cache key)",
    )
    fetch.add_argument(
        "--prune",
        action="store_true",
        help="with --matrix: delete the cached kernels it does not name (a CI cache saved "
        "night after night does not grow)",
    )
    network = fetch.add_mutually_exclusive_group()
    network.add_argument(
        "--refresh", action="store_true", help="re-resolve suites against the archive"
    )
    options.offline(network)


def _kernels_build(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """kernels build: the kernels a matrix builds from source, ahead of a run."""
    build = actions.add_parser(
        "build",
        help="build the kernels a matrix builds from source (git:, source:, debian-source:)",
        description=(
            "Build every kernel the matrix builds from source, out of tree, into the build cache "
            "(~/.cache/iomatrix/builds/<key>/); a build that is there already is not made again. "
            "run and ab build them too; this builds them ahead (a CI job's first step)."
        ),
        epilog=help_format.examples(
            "iomatrix kernels build MATRIX  # every kernel it builds",
            "iomatrix kernels build MATRIX --kernel patched --allow-tree ~/src/linux",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    build.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix file")
    build.add_argument(
        "--kernel", action="append", metavar="NAME", help="only this kernel (repeatable)"
    )
    options.offline(build)
    options.allow_tree(build)


def _accel_and_guest_root(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "accel",
        help="probe (or show the cached verdict of) KVM vs TCG",
        description=(
            "Decide between KVM and TCG for this host. TCG at once when the CPU lists neither "
            "vmx nor svm or /dev/kvm cannot create a VM; otherwise KVM only when a short probe "
            "boot of a trusted kernel on the guest's own root proves it works, a verdict cached "
            "per host. IOMATRIX_ACCEL=kvm|tcg overrides it."
        ),
        epilog=help_format.examples(
            "iomatrix accel  # kvm or tcg, and why",
            "iomatrix accel --offline  # no download for a probe boot",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument(
        "--kernel",
        default="debian:bookworm",
        metavar="SPEC",
        help="the kernel a probe boot runs, if one is needed (default: debian:bookworm)",
    )
    options.offline(p)
    p.set_defaults(func=Handler("kernel_commands", "cmd_accel"))

    p = sub.add_parser(
        "guest-root",
        help="build (when missing) and show the guest's own root filesystem",
        description=(
            "The guest never boots on the host's root: it gets a tree of Debian packages of its "
            "own (fio, the mkfs tools, mdadm, LVM, cryptsetup, python3), unpacked by mmdebstrap "
            "without privileges into ~/.cache/iomatrix/guest-roots/ and shared read-only. run "
            "and ab build it on first use; this builds it ahead and says which versions it holds. "
            "IOMATRIX_GUEST_SUITE picks the Debian suite (default bookworm); "
            "IOMATRIX_GUEST_ROOT names a tree of your own instead."
        ),
        epilog=help_format.examples(
            "iomatrix guest-root  # built when missing; its versions",
            "iomatrix guest-root --json",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.json_output(p)
    options.offline(p)
    p.set_defaults(func=Handler("kernel_commands", "cmd_guest_root"))
