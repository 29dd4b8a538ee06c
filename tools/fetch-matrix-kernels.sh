#!/usr/bin/env bash
# Fetch every kernel a matrix names into the kernel cache, and print their releases, one per line
# (sorted): the nightly workflow keys its kernel cache by them, so a new Debian kernel makes a new
# cache entry and an unchanged one is never downloaded again.
#
#   tools/fetch-matrix-kernels.sh MATRIX [--prune]
#
# --prune deletes cached kernels the matrix no longer uses, so the cache saved under the new key
# does not grow night after night. Runs where iomatrix runs (on the host, or in the image with
# tools/container.sh run).
set -euo pipefail
BIN=${BIN:-${VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}/bin}
matrix=${1:?usage: tools/fetch-matrix-kernels.sh MATRIX [--prune]}
prune=${2:-}

"$BIN/python" - "$matrix" "$prune" <<'EOF'
import shutil
import sys
from iomatrix.host import kernels
from iomatrix.matrix.loader import load_matrix

releases = sorted({kernels.fetch(spec).release for spec in load_matrix(sys.argv[1]).kernels})
if sys.argv[2] == "--prune":
    root = kernels.cache_root() / "kernels"
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name not in releases:
            print(f"iomatrix: pruning kernel {folder.name} (not in the matrix)", file=sys.stderr)
            shutil.rmtree(folder)
print("\n".join(releases))
EOF
