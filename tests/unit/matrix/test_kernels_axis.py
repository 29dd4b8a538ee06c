"""The kernel axis: which kernel specs are accepted and which are refused, and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.matrix_files import load_doc, only_error, with_matrix

# --- kernels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("debian:potato", "unknown Debian kernel 'potato'"),
        ("ubuntu:noble", "unknown scheme 'ubuntu'"),
        ("debian:", "expected debian:<suite|abi-release|package-version>, path:<vmlinuz>"),
        ("path:boot/vmlinuz", "must be absolute"),
        ("path:/boot/vmlinuz;reboot", "must be absolute and use only letters"),
        ("debian:6.1.176-1\n", "spaces and control characters are not allowed"),
        ("debian:sid ", "spaces and control characters are not allowed"),
    ],
)
def test_bad_kernels(ws: Path, spec: str, reason: str) -> None:
    error = only_error(ws, with_matrix(kernel=["debian:sid", spec]))
    assert error.field == "matrix.kernel[1]"
    assert error.reason.startswith(f"{spec!r} is not a kernel spec: ")
    assert reason in error.reason


def test_good_kernels(ws: Path) -> None:
    # A path: kernel is inside the matrix's folder (tests/unit/cli/test_kernel_tree_confinement.py).
    (ws / "k" / "modules" / "6.13.0").mkdir(parents=True)
    (ws / "k" / "vmlinuz-6.13").write_bytes(b"MZ")
    specs = [
        "debian:bookworm-backports",
        "debian:6.1.0-28-amd64",
        "debian:6.1.176-1",
        f"path:{ws}/k/vmlinuz-6.13,modules={ws}/k/modules/6.13.0",
    ]
    assert load_doc(ws, with_matrix(kernel=specs)).kernels == tuple(specs)
