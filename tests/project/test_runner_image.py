"""The runner image this repository's own workflows use: the published one by digest when its
toolchain key matches, a build otherwise (tools/runner-image.sh). The script runs for real, with
`docker` and `make` replaced by stand-ins on PATH that record their argv (the registry is not
reachable from a test); the workflows are checked to hand its answer on."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from support.paths import REPO_ROOT
from support.workflows import workflow

SCRIPT = REPO_ROOT / "tools" / "runner-image.sh"
DIGEST = "sha256:" + "ab" * 32


def inputs() -> list[str]:
    text = SCRIPT.read_text()
    block = re.search(r"^INPUTS=\((.*?)\)", text, re.S | re.M)
    assert block
    return block[1].split()


def checkout(tmp_path: Path) -> Path:
    """A copy of the script and of every toolchain input, laid out as in the repository."""
    root = tmp_path / "repo"
    for name in ["tools/runner-image.sh", *inputs()]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, root / name)
    return root


def stand_in(folder: Path, name: str, log: Path, body: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(
        "#!/usr/bin/env bash\n"
        f"python3 -c 'import json, sys; print(json.dumps([\"{name}\", *sys.argv[1:]]))' "
        f'"$@" >> "{log}"\n' + body
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def script(root: Path, *args: str, bin_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = f"{bin_dir}:{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
    return subprocess.run(
        ["bash", str(root / "tools" / "runner-image.sh"), *args],
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def recorded(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_key_covers_what_the_dockerfile_copies_before_the_code() -> None:
    dockerfile = (REPO_ROOT / "images" / "runner" / "Dockerfile").read_text()
    copied: list[str] = []
    for line in dockerfile.splitlines():
        if line.startswith("COPY . "):
            break  # the code: mounted over it when the workflows run the image
        if line.startswith("COPY "):
            # .build/: what tools/container.sh stages into the context (the host's CA bundle for
            # pip), not a file of the repository; it decides where pip connects, not what it gets.
            copied += [w for w in line.split()[1:-1] if not w.startswith(("--", ".build/"))]
    assert copied, "no COPY before the code's"
    assert set(copied) <= set(inputs()), set(copied) - set(inputs())
    # What the Makefile names the venv stamps after (a mismatch would rebuild the venv).
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "pyproject.toml" in inputs()
    assert "requirements/runtime.lock" in inputs()
    assert "cat $(RUNTIME_LOCK) pyproject.toml $(DEV_LOCK)" in makefile


def test_the_key_changes_with_the_toolchain_and_not_with_the_code(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    first = script(root, "key")
    assert first.returncode == 0, first.stderr
    assert re.fullmatch(r"[0-9a-f]{16}\n", first.stdout)
    (root / "harness").mkdir()
    (root / "harness" / "code.py").write_text("print('a change of code')\n")
    assert script(root, "key").stdout == first.stdout
    with (root / "requirements" / "dev.lock").open("a") as lock:
        lock.write("# a new pin\n")
    assert script(root, "key").stdout != first.stdout


def test_lookup_answers_the_published_image_by_digest(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    log = tmp_path / "calls"
    key = script(root, "key").stdout.strip()
    stand_in(tmp_path / "bin", "docker", log, f"echo '\"{DIGEST}\"'\n")
    done = script(root, "lookup", "Some-Owner/iomatrix", bin_dir=tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"ghcr.io/some-owner/iomatrix-runner@{DIGEST}\n"
    ((*argv,),) = recorded(log)
    assert argv[:4] == ["docker", "buildx", "imagetools", "inspect"]
    assert argv[4] == f"ghcr.io/some-owner/iomatrix-runner:toolchain-{key}"


@pytest.mark.parametrize(
    "answer",
    [
        "echo 'ERROR: ghcr.io/o/iomatrix-runner:toolchain-x: not found' >&2; exit 1\n",
        "echo '\"sha256:short\"'\n",
        "echo '\"latest\"; rm -rf /'\n",
    ],
    ids=["not published", "not a digest", "not a digest at all"],
)
def test_lookup_answers_nothing_when_no_image_is_published(tmp_path: Path, answer: str) -> None:
    root = checkout(tmp_path)
    stand_in(tmp_path / "bin", "docker", tmp_path / "calls", answer)
    done = script(root, "lookup", "o/iomatrix", bin_dir=tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_use_pulls_by_digest_and_tags_the_local_image(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    log = tmp_path / "calls"
    stand_in(tmp_path / "bin", "docker", log)
    stand_in(tmp_path / "bin", "make", log)
    image = f"ghcr.io/o/iomatrix-runner@{DIGEST}"
    done = script(root, "use", image, bin_dir=tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    assert recorded(log) == [
        ["docker", "pull", image],
        ["docker", "tag", image, "iomatrix-runner:latest"],
    ]


def test_use_without_an_image_builds_it(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    log = tmp_path / "calls"
    stand_in(tmp_path / "bin", "docker", log)
    stand_in(tmp_path / "bin", "make", log)
    done = script(root, "use", "", bin_dir=tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    assert recorded(log) == [["make", "-C", str(root), "image"]]


def test_use_refuses_an_image_by_tag(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    log = tmp_path / "calls"
    stand_in(tmp_path / "bin", "docker", log)
    done = script(root, "use", "ghcr.io/o/iomatrix-runner:main", bin_dir=tmp_path / "bin")
    assert done.returncode == 2
    assert "not pinned by digest" in done.stderr
    assert recorded(log) == []


def lookup_job_output(name: str) -> str:
    job = workflow(name)["jobs"]["image"]
    (step,) = [s for s in job["steps"] if s.get("id") == "lookup"]
    assert "tools/runner-image.sh lookup" in step["run"]
    assert job["outputs"]["image"] == "${{ steps.lookup.outputs.image }}"
    return "${{ needs.image.outputs.image }}"


def uses_the_script(steps: list[dict[str, object]]) -> bool:
    return any(
        s.get("run") == 'bash tools/runner-image.sh use "$IMAGE"'
        and s.get("env") == {"IMAGE": "${{ needs.image.outputs.image }}"}
        for s in steps
    )


def test_pull_requests_use_the_published_image_or_build_and_hand_it_on() -> None:
    wf = workflow("pr.yml")
    found = lookup_job_output("pr.yml")
    checks = wf["jobs"]["checks"]
    assert checks["needs"] == "image"
    assert uses_the_script(checks["steps"])
    assert not any(s.get("run") == "make image" for s in checks["steps"])
    # The artifact only when the image was built here.
    saves = [s for s in checks["steps"] if "docker save" in s.get("run", "")]
    uploads = [s for s in checks["steps"] if "upload-artifact" in s.get("uses", "")]
    assert saves
    assert uploads
    assert all(s["if"] == "needs.image.outputs.image == ''" for s in saves + uploads)
    gate = wf["jobs"]["ab"]
    assert set(gate["needs"]) == {"image", "checks"}
    assert gate["with"]["image"] == found
    assert gate["with"]["image-artifact"] == (
        "${{ needs.image.outputs.image == '' && 'runner-image' || '' }}"
    )


def test_the_nightly_uses_the_published_image_or_builds() -> None:
    wf = workflow("nightly.yml")
    found = lookup_job_output("nightly.yml")
    assert wf["jobs"]["nightly"]["with"]["image"] == found
    assert wf["jobs"]["slow-tests"]["needs"] == "image"
    assert uses_the_script(wf["jobs"]["slow-tests"]["steps"])


def test_every_published_image_carries_its_toolchain_tag() -> None:
    steps = workflow("publish-image.yml")["jobs"]["publish"]["steps"]
    (key,) = [s for s in steps if s.get("id") == "toolchain"]
    assert "tools/runner-image.sh key" in key["run"]
    (meta,) = [s for s in steps if s.get("uses", "").startswith("docker/metadata-action@")]
    assert "type=raw,value=toolchain-${{ steps.toolchain.outputs.key }}" in meta["with"]["tags"]
