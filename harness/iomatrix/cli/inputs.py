"""What the commands make of shared options: --quick's matrix file, --offline's kernel fetcher.
Apart from cli/options.py, which every parser imports, because these import the matrix loader
and the host's kernels (cli/handlers.py says why)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from iomatrix.host import kernels
from iomatrix.matrix.loader import quick_variant
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.workflows import prepare


def use_quick_variant(args: argparse.Namespace) -> None:
    """--quick: the matrix file's own `quick` variant replaces it (before anything is loaded)."""
    if args.quick:
        quick = quick_variant(args.file)
        print(f"{args.file}: quick variant {quick}", file=sys.stderr)
        args.file = quick


def fetcher(args: argparse.Namespace) -> Callable[[KernelSpec], kernels.Kernel]:
    """kernels.fetch as this command's --offline (or IOMATRIX_OFFLINE) asks for it."""
    return prepare.fetcher(args.offline)
