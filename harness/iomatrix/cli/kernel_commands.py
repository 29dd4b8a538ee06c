"""Commands about kernels and the accelerator: kernels (list, fetch), accel."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable

from iomatrix.cli import options
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.host import kernels, vm
from iomatrix.report.tables import format_table


def fetcher(args: argparse.Namespace) -> Callable[[str], kernels.Kernel]:
    """kernels.fetch as this command's --offline (or IOMATRIX_OFFLINE) asks for it."""
    return functools.partial(kernels.fetch, offline=kernels.offline_requested(args.offline))


def cmd_kernels(args: argparse.Namespace) -> int:
    if args.action == "fetch":
        for spec in args.specs:
            kernel = kernels.fetch(
                spec,
                refresh=args.refresh,
                offline=kernels.offline_requested(args.offline),
                log=print,
            )
            print(f"{spec}: {kernel.release} ({kernel.source})\n  {kernel.vmlinuz}")
        return ExitCode.OK
    cached = kernels.cached()
    if args.json:
        print(json.dumps([k.model_dump(mode="json") for k in cached], indent=1))
        return ExitCode.OK
    rows = [[k.release, k.spec, k.source] for k in cached]
    print(format_table(["release", "spec", "source"], rows) if rows else "no kernels cached")
    print(f"\ncache: {kernels.cache_root() / 'kernels'}")
    return ExitCode.OK


def cmd_accel(args: argparse.Namespace) -> int:
    kernel = fetcher(args)(args.kernel)
    accel, why = vm.choose_accelerator(
        cache_dir=kernels.cache_root(),
        probe_vmlinuz=kernel.vmlinuz,
        probe_release=kernel.release,
        probe_modules=kernel.modules_dir,
    )
    print(f"{accel}: {why}")
    return ExitCode.OK


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """kernels (list, fetch) and accel."""
    p = sub.add_parser(
        "kernels",
        help="list or fetch cached kernels",
        description=(
            "Kernels live in ~/.cache/iomatrix/kernels/<release>/ (or $IOMATRIX_CACHE). Debian "
            "kernels are downloaded with a private apt configuration; the host's is never changed. "
            "A suite is resolved again once its resolution is a day old; when the archive cannot "
            "be reached, the newest cached kernel the spec resolved to is used, with a warning."
        ),
    )
    # list and fetch are sub-commands, not one positional choice beside SPEC...: argparse fills a
    # "*" positional as soon as it meets its neighbour, so `kernels fetch --offline SPEC` would
    # leave SPEC unrecognized.
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    options.json_output(actions.add_parser("list", help="the cached kernels"))
    fetch = actions.add_parser("fetch", help="fetch kernels into the cache (verified if there)")
    fetch.add_argument(
        "specs",
        nargs="*",
        metavar="SPEC",
        help="debian:<suite|abi-release|version> or path:<vmlinuz>[,modules=<dir>]",
    )
    network = fetch.add_mutually_exclusive_group()
    network.add_argument(
        "--refresh", action="store_true", help="re-resolve suites against the archive"
    )
    options.offline(network)
    p.set_defaults(func=cmd_kernels)

    p = sub.add_parser(
        "accel",
        help="probe (or show the cached verdict of) KVM vs TCG",
        description=(
            "Decide between KVM and TCG for this host: KVM only when a short probe boot proves it "
            "works; the verdict is cached per host. IOMATRIX_ACCEL=kvm|tcg overrides it."
        ),
    )
    p.add_argument(
        "--kernel",
        default="debian:bookworm",
        metavar="SPEC",
        help="the kernel the probe boots (default: debian:bookworm)",
    )
    options.offline(p)
    p.set_defaults(func=cmd_accel)
