"""A kernel tree named by a matrix may be a stranger's: the git iomatrix runs in it reads the
tree's config, and settings there that run programs must not run them (issue 25: a planted
gpg.program ran when bisect listed the commits)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from iomatrix.host.kernels import sources


def sh(*argv: str, cwd: Path, stdin: str | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run(
        argv, cwd=cwd, input=stdin, capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


def test_a_trees_own_config_runs_nothing_when_iomatrix_reads_it(tmp_path: Path) -> None:
    tree = tmp_path / "linux"
    tree.mkdir()
    sh("git", "init", "--quiet", cwd=tree)
    (tree / "Makefile").write_text("all:\n")
    sh("git", "add", "Makefile", cwd=tree)
    sh("git", "commit", "--quiet", "-m", "base", cwd=tree)
    # A signed commit (its signature need not be valid: git asks gpg.program to verify it).
    parent = sh("git", "rev-parse", "HEAD", cwd=tree)
    tree_id = sh("git", "rev-parse", "HEAD^{tree}", cwd=tree)
    body = (
        f"tree {tree_id}\nparent {parent}\n"
        "author t <t@example.invalid> 1700000000 +0000\n"
        "committer t <t@example.invalid> 1700000000 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQ==\n -----END PGP SIGNATURE-----\n"
        "\nsigned\n"
    )
    signed = sh("git", "hash-object", "-t", "commit", "-w", "--stdin", cwd=tree, stdin=body)
    sh("git", "update-ref", "HEAD", signed, cwd=tree)
    marker = tmp_path / "ran"
    payload = tmp_path / "payload.sh"
    payload.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    payload.chmod(0o755)
    for key, value in (
        ("log.showSignature", "true"),
        ("gpg.program", str(payload)),
        ("core.fsmonitor", str(payload)),
    ):
        sh("git", "config", key, value, cwd=tree)
    # What bisect runs in the tree: the commits between two ends, and a subject.
    listed = sources.git(
        "git:" + str(tree), ["-C", str(tree), "rev-list", "--format=%H %s", f"{parent}..{signed}"]
    )
    subject = sources.git("git:" + str(tree), ["-C", str(tree), "log", "-1", "--format=%s"])
    assert signed in listed.stdout
    assert subject.stdout.strip() == "signed"
    assert not marker.exists()
    # Control: git run plainly in the same tree does run the planted program.
    subprocess.run(["git", "-C", str(tree), "log", "-1"], capture_output=True, check=False)
    assert marker.exists()
