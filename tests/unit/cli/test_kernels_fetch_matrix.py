"""`iomatrix kernels fetch --matrix-file FILE --releases --prune`: what the nightly's image job
runs to key and trim its kernel cache (reusable-nightly.yml). The script it replaces passed the
matrix's kernels to fetch as plain strings and failed every night (issue 44); this runs the
command as the workflow does, on a cache of real files, with no download (offline)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from support.builders import fake_kernel, write_resolutions

MATRIX = """\
format: 1
name: two-kernels
extends: iomatrix:base
matrix:
  kernel: [debian:bookworm, debian:trixie]
  filesystem: [ext4]
  scheduler: [none]
  device: [virtio-file]
  workload: [randwrite-4k]
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("IOMATRIX_CACHE", str(root))
    monkeypatch.setenv("IOMATRIX_OFFLINE", "1")
    kernels_dir = root / "kernels"
    for release in ("6.1.0-50-amd64", "6.12.9-amd64", "6.1.0-41-amd64"):
        fake_kernel(kernels_dir, release=release)
    write_resolutions(kernels_dir, "debian:bookworm", ("6.1.0-50-amd64", 0))
    write_resolutions(kernels_dir, "debian:trixie", ("6.12.9-amd64", 0))
    return root


def test_the_matrix_kernels_are_fetched_and_their_releases_printed_for_the_cache_key(
    cache: Path,
    tmp_path: Path,
    no_commands: list[Sequence[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX)
    argv = ["kernels", "fetch", "--matrix-file", str(tmp_path / "m.yaml"), "--releases", "--prune"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    # stdout is the key alone: sorted releases, one per line; what was pruned goes to stderr.
    assert out == "6.1.0-50-amd64\n6.12.9-amd64\n"
    assert "pruned kernel 6.1.0-41-amd64" in err
    assert sorted(p.name for p in (cache / "kernels").iterdir() if p.is_dir()) == [
        "6.1.0-50-amd64",
        "6.12.9-amd64",
    ]
    assert no_commands == []


def test_prune_without_a_matrix_is_refused_and_deletes_nothing(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["kernels", "fetch", "--prune", "debian:bookworm"]) == 2
    assert "--prune needs --matrix-file FILE" in capsys.readouterr().err
    assert len([p for p in (cache / "kernels").iterdir() if p.is_dir()]) == 3


def test_a_link_in_the_kernel_cache_is_never_followed_by_the_prune(
    cache: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep-me").write_text("x")
    (cache / "kernels" / "5.10.0-1-amd64").symlink_to(outside)
    (tmp_path / "m.yaml").write_text(MATRIX)
    assert cli.main(["kernels", "fetch", "--matrix-file", str(tmp_path / "m.yaml"), "--prune"]) == 0
    assert (outside / "keep-me").read_text() == "x"
