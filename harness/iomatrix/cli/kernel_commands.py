"""Commands about kernels and the accelerator: kernels (list, fetch, build), accel."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iomatrix.cli import options
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError, KernelError
from iomatrix.host import kernels
from iomatrix.host.vm import guest_root, vng
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.filesystems import MKFS_PACKAGES
from iomatrix.model.kernel_spec import parse_spec
from iomatrix.report.tables import format_table


def _build_matrix_kernels(args: argparse.Namespace) -> int:
    """`kernels build MATRIX`: every kernel the matrix builds from source (or the named ones),
    built or found in the build cache; what a pull-request job runs before its A/B gate."""
    matrix = load_matrix(args.matrix)
    recipes = {c.kernel: c.kernel_build for c in matrix.cells if c.kernel_build is not None}
    unknown = [name for name in args.kernel or () if name not in recipes]
    if unknown:
        raise IomatrixError(
            f"{args.matrix}: builds no kernel named {', '.join(unknown)}; it builds: "
            f"{', '.join(recipes) or 'none'}"
        )
    failed = 0
    for name, recipe in recipes.items():
        if args.kernel and name not in args.kernel:
            continue
        try:
            kernel = kernels.build(
                name, recipe, offline=kernels.offline_requested(args.offline), log=print
            )
        except KernelError as exc:
            print(f"iomatrix: {exc}")
            failed += 1
            continue
        assert kernel.build is not None
        print(f"{name}: {kernel.release} ({kernel.source})")
        took = f"{kernel.build.build_s:.0f} s" if kernel.build.build_s > 0 else "from the cache"
        print(f"  build {kernel.build.key}, {took}; log {kernel.build.log}")
        for line in kernel.build.dropped:
            print(f"  warning: the built config does not honour {line}")
    return ExitCode.NOT_OK if failed else ExitCode.OK


def cmd_kernels(args: argparse.Namespace) -> int:
    if args.action == "build":
        return _build_matrix_kernels(args)
    if args.action == "fetch":
        for spec in args.specs:
            kernel = kernels.fetch(
                parse_spec(spec),
                refresh=args.refresh,
                offline=kernels.offline_requested(args.offline),
                log=print,
            )
            print(f"{spec}: {kernel.release} ({kernel.source})\n  {kernel.vmlinuz}")
        return ExitCode.OK
    cached = kernels.cached() + kernels.cached_builds()
    if args.json:
        print(json.dumps([k.model_dump(mode="json") for k in cached], indent=1))
        return ExitCode.OK
    rows = [[k.release, k.spec, k.source] for k in cached]
    print(format_table(["release", "spec", "source"], rows) if rows else "no kernels cached")
    root = kernels.cache_root()
    print(f"\ncache: {root / 'kernels'} (fetched), {root / 'builds'} (built from source)")
    return ExitCode.OK


def cmd_accel(args: argparse.Namespace) -> int:
    kernel = options.fetcher(args)(parse_spec(args.kernel))
    accel, why = vng.choose_accelerator(
        cache_dir=kernels.cache_root(),
        probe_vmlinuz=kernel.vmlinuz,
        probe_release=kernel.release,
        probe_modules=kernel.modules_dir,
    )
    print(f"{accel}: {why}")
    return ExitCode.OK


def cmd_guest_root(args: argparse.Namespace) -> int:
    tree, record = guest_root.ensure(
        kernels.cache_root(),
        offline=kernels.offline_requested(args.offline),
        mirror=lambda: kernels.debian_mirror("the guest root"),
        log=lambda message: print(f"iomatrix: {message}", file=sys.stderr),
    )
    if args.json:
        print(json.dumps({"path": str(tree), **record.model_dump(mode="json")}, indent=1))
        return ExitCode.OK
    print(f"guest root: {tree}")
    print(f"Debian {record.suite}, recipe {record.key}, built {record.built_at or '?'}")
    for name in ("fio", *MKFS_PACKAGES, "python3.11"):
        if name in record.packages:
            print(f"  {name} {record.packages[name]}")
    print(f"  ({len(record.packages)} packages in all; --json lists them)")
    return ExitCode.OK


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """kernels (list, fetch), accel and guest-root."""
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
    build = actions.add_parser(
        "build",
        help="build the kernels a matrix builds from source (git:, source:, debian-source:)",
        description=(
            "Build every kernel the matrix builds from source, out of tree, into the build cache "
            "(~/.cache/iomatrix/builds/<key>/); a build that is there already is not made again. "
            "run and ab build them too; this builds them ahead (a CI job's first step)."
        ),
    )
    build.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix file")
    build.add_argument(
        "--kernel", action="append", metavar="NAME", help="only this kernel (repeatable)"
    )
    options.offline(build)
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
    )
    options.json_output(p)
    options.offline(p)
    p.set_defaults(func=cmd_guest_root)
