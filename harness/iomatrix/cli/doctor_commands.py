"""`iomatrix doctor`: which of the host packages iomatrix needs this host lacks
(host/host_packages.py), the verdict first, then the apt-get line."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from iomatrix.cli.exit_codes import ExitCode
from iomatrix.host import host_packages

KVM = Path("/dev/kvm")


def cmd_doctor(args: argparse.Namespace) -> int:
    needed = host_packages.needed(host_packages.packaged(), args.target)
    lacking = host_packages.missing(args.target, needed)
    if args.missing:
        print("\n".join(p.package for p in lacking), end="\n" if lacking else "")
        return ExitCode.OK
    what = "`iomatrix run`" if args.target == "run" else "`iomatrix run` and `make test`"
    if lacking:
        print(f"missing: {len(lacking)} of the {len(needed)} host packages for {what}")
        for package in lacking:
            print(f"  {package.package:<24} (no {package.probe})")
        print(f"install them with: {shlex.join(host_packages.install_command(lacking))}")
    else:
        print(f"ok: this host has all {len(needed)} host packages for {what}")
    if KVM.exists():
        print(f"{KVM}: present (VMs use KVM where it works; `iomatrix run` checks it)")
    else:
        print(f"{KVM}: absent: VMs run under TCG, several times slower (results say so)")
    return ExitCode.NOT_OK if lacking else ExitCode.OK
