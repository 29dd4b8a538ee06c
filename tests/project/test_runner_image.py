"""The runner image this repository's own workflows use: the published one by digest when its
toolchain key matches, a build otherwise (tools/runner-image.sh). The script runs for real, with
`docker` and `make` replaced by stand-ins on PATH that record their argv (the registry is not
reachable from a test); the workflows are checked to hand its answer on."""

from __future__ import annotations

import hashlib
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
    (root / "harness").mkdir(exist_ok=True)
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
    # The parts only when the image was built here.
    saves = [s for s in checks["steps"] if "runner-image.sh save" in s.get("run", "")]
    uploads = [s for s in checks["steps"] if "upload-artifact" in s.get("uses", "")]
    assert saves
    assert uploads
    assert all(str(s["if"]).startswith("needs.image.outputs.image == ''") for s in saves + uploads)
    gate = wf["jobs"]["ab"]
    assert set(gate["needs"]) == {"image", "checks"}
    assert gate["with"]["image"] == found
    assert gate["with"]["image-id"] == "${{ needs.checks.outputs.image-id }}"


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


# --- the image handed from job to job: its id, and its parts --------------------------------------

ENGINE = """\
#!/usr/bin/env python3
# A docker stand-in with a store of its own: an image is its bytes, its id their sha256.
import hashlib, sys
from pathlib import Path

store = Path(sys.argv[0]).parent.parent / "store"
args = sys.argv[1:]


def tag_file(name):
    return store / "tags" / name.replace(":", "_").replace("/", "_")


def resolve(name):
    if tag_file(name).exists():
        return tag_file(name).read_text().strip().removeprefix("sha256:")
    if (store / "images" / name.removeprefix("sha256:")).exists():
        return name.removeprefix("sha256:")
    return None


if args[:2] == ["image", "inspect"]:
    found = resolve(args[-1])
    if found is None:
        sys.exit(1)
    print("sha256:" + found)
elif args[0] == "save":
    sys.stdout.buffer.write((store / "images" / resolve(args[1])).read_bytes())
elif args[0] == "load":
    data = sys.stdin.buffer.read()
    digest = hashlib.sha256(data).hexdigest()
    (store / "images" / digest).write_bytes(data)
    print("Loaded image ID: sha256:" + digest)
elif args[0] == "tag":
    source = resolve(args[1])
    if source is None:
        sys.exit("Error response from daemon: No such image: " + args[1])
    tag_file(args[2]).write_text("sha256:" + source + "\\n")
else:
    sys.exit(2)
"""


def engine(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A docker stand-in (ENGINE) with a store of its own, on PATH in the folder returned."""
    store = tmp_path / name / "store"
    (store / "images").mkdir(parents=True)
    (store / "tags").mkdir()
    bin_dir = tmp_path / name / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(ENGINE)
    (bin_dir / "docker").chmod(0o755)
    return store, bin_dir


def build_image(store: Path, content: bytes) -> str:
    digest = hashlib.sha256(content).hexdigest()
    (store / "images" / digest).write_bytes(content)
    (store / "tags" / "iomatrix-runner_latest").write_text(f"sha256:{digest}\n")
    return digest


def test_the_image_goes_to_another_runner_in_parts_and_comes_back_with_its_id(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path)
    built, builder = engine(tmp_path, "builder")
    image = os.urandom(3 * 1024 * 1024 + 5)  # incompressible: zstd keeps its size, three parts
    digest = build_image(built, image)
    saved = subprocess.run(
        ["bash", str(root / "tools/runner-image.sh"), "save", str(tmp_path / "parts")],
        env={**os.environ, "PATH": f"{builder}:{os.environ['PATH']}", "PART_MB": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert saved.returncode == 0, saved.stderr
    assert saved.stdout.strip() == digest
    parts = sorted(p.name for p in (tmp_path / "parts").iterdir())
    assert parts == ["part-00", "part-01", "part-02", "part-03"]
    # Another runner: its engine has not got the image; it loads the parts and checks the id.
    other, runner = engine(tmp_path, "runner")
    assert script(root, "has", digest, bin_dir=runner).returncode == 1
    loaded = script(root, "load", str(tmp_path / "parts"), digest, bin_dir=runner)
    assert loaded.returncode == 0, loaded.stderr
    assert (other / "images" / digest).read_bytes() == image
    assert (other / "tags" / "iomatrix-runner_latest").read_text().strip() == f"sha256:{digest}"


def test_a_runner_that_shares_the_store_uses_the_image_there(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    store, bin_dir = engine(tmp_path, "shared")
    digest = build_image(store, b"an image")
    assert script(root, "has", digest, bin_dir=bin_dir).returncode == 0
    done = script(root, "load", str(tmp_path / "no-parts-here"), digest, bin_dir=bin_dir)
    assert done.returncode == 0, done.stderr
    assert "in this engine's store already" in done.stderr


def test_a_part_that_is_not_what_was_saved_is_refused(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    built, builder = engine(tmp_path, "builder")
    digest = build_image(built, b"the image the build job made")
    saved = subprocess.run(
        ["bash", str(root / "tools/runner-image.sh"), "save", str(tmp_path / "parts")],
        env={**os.environ, "PATH": f"{builder}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert saved.returncode == 0, saved.stderr
    (tmp_path / "parts" / "part-00").write_bytes(
        subprocess.run(
            ["zstd", "-q", "-c"], input=b"another image", capture_output=True, check=True
        ).stdout
    )
    _other, runner = engine(tmp_path, "runner")
    done = script(root, "load", str(tmp_path / "parts"), digest, bin_dir=runner)
    assert done.returncode != 0
    assert f"hold another image, not the {digest}" in done.stderr
