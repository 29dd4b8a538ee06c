"""Commands about kernels and the accelerator: kernels (list, fetch, build), accel."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iomatrix.cli import inputs
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError, KernelError
from iomatrix.host import kernels
from iomatrix.host.vm import accel, guest_root
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.filesystems import MKFS_PACKAGES
from iomatrix.model.kernel_spec import parse_spec
from iomatrix.report.text import fit_table, output_width, wrap


def _build_matrix_kernels(args: argparse.Namespace) -> int:
    """`kernels build MATRIX`: every kernel the matrix builds from source (or the named ones),
    built or found in the build cache; what a pull-request job runs before its A/B gate."""
    matrix = load_matrix(args.matrix, allowed_trees=args.allow_tree)
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
                name,
                recipe,
                offline=kernels.offline_requested(args.offline),
                log=print,
                trusted=kernels.own_builds_trusted(),
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


def _fetch(args: argparse.Namespace) -> int:
    """`kernels fetch [SPEC...] [--matrix-file FILE]`: each kernel fetched (or verified in the
    cache); --releases prints only their releases, --prune drops the cached kernels the matrix
    does not name (the nightly keys and trims its kernel cache with both)."""
    specs = [parse_spec(spec) for spec in args.specs]
    if args.matrix_file is not None:
        matrix = load_matrix(args.matrix_file)
        specs += [c.kernel_spec for c in matrix.cells if c.kernel_build is None]
    log = (lambda message: print(message, file=sys.stderr)) if args.releases else print
    fetched = {}
    for spec in dict.fromkeys(specs):
        kernel = kernels.fetch(
            spec,
            refresh=args.refresh,
            offline=kernels.offline_requested(args.offline),
            log=log,
        )
        fetched[kernel.release] = kernel
        if not args.releases:
            print(f"{spec.raw}: {kernel.release} ({kernel.source})\n  {kernel.vmlinuz}")
    if args.prune:
        for release in kernels.prune_fetched(keep=set(fetched)):
            print(f"iomatrix: pruned kernel {release} (not in {args.matrix_file})", file=sys.stderr)
    if args.releases:
        print("\n".join(sorted(fetched)))
    return ExitCode.OK


def cmd_kernels(args: argparse.Namespace) -> int:
    if args.action == "build":
        return _build_matrix_kernels(args)
    if args.action == "fetch":
        return _fetch(args)
    cached = kernels.cached() + kernels.cached_builds()
    if args.json:
        print(json.dumps([k.model_dump(mode="json") for k in cached], indent=1))
        return ExitCode.OK
    rows = [[k.release, k.spec, k.source] for k in cached]
    # Laid out for the terminal: a build's source (its tree and commit) is what is cut first;
    # --json, or a pipe, has it whole.
    width = output_width()
    table = fit_table(["release", "spec", "source"], rows, width=width, keep=(0, 1, 2))
    print(table if rows else "no kernels cached")
    root = kernels.cache_root()
    where = f"cache: {root / 'kernels'} (fetched), {root / 'builds'} (built from source)"
    print("\n" + wrap(where, width))
    return ExitCode.OK


def cmd_accel(args: argparse.Namespace) -> int:
    """The accelerator (host/vm/accel.py); a probe boot, when one is needed, runs --kernel on
    the guest's own root, both fetched or built only then."""

    def root() -> Path:
        tree, _record = _ensure_guest_root(args)
        return tree

    verdict, why = accel.choose_accelerator(
        cache_dir=kernels.cache_root(),
        probe=accel.trusted_probe(root, inputs.fetcher(args), parse_spec(args.kernel)),
    )
    print(wrap(f"{verdict}: {why}", output_width()))
    return ExitCode.OK


def _ensure_guest_root(args: argparse.Namespace) -> tuple[Path, guest_root.GuestRoot]:
    return guest_root.ensure(
        kernels.cache_root(),
        offline=kernels.offline_requested(args.offline),
        mirror=lambda: kernels.debian_mirror("the guest root"),
        log=lambda message: print(f"iomatrix: {message}", file=sys.stderr),
    )


def cmd_guest_root(args: argparse.Namespace) -> int:
    tree, record = _ensure_guest_root(args)
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
