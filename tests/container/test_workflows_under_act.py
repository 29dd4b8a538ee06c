"""The workflows themselves, run for real under nektos/act over a local podman, offline
(tools/ci-local.sh, `make ci-local`). No stand-in: act executes the real workflow files, the real
pinned actions (../shared/external/actions), the runner image built by the gate's own step, and
both sides of `iomatrix ab` in TCG VMs inside it.

The matrix repository's pull request (docs/workflows/matrix-repository/) halves its gate disk's
IOPS limit: a known regression. The gate must run both sides, fail the check with the
regression's exit code, and leave the artifact from which the comment workflow renders what it
would post, which must say so. In `.ci/run` (the VM stream); the kernel gate and the nightly run
in `make test-nightly`, as do the run with a deliberately broken script (SCENARIO_BREAK) and the
composite action's example (docs/workflows/matrix-action/, SCENARIO=matrix-action).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.container import inside_a_container
from support.nightly_repo import git
from support.paths import REPO_ROOT
from support.seeded_history import NIGHTS_AFTER, NIGHTS_BEFORE, seed_results_branch

ACTIONS = REPO_ROOT.parent / "shared" / "external" / "actions"
MATRIX_REPOSITORY = REPO_ROOT / "docs" / "workflows" / "matrix-repository"


def ci_local(scenario: str, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "tools" / "ci-local.sh"), scenario],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
        env={**os.environ, "OUT": str(out), **env},
    )


def needs_act() -> None:
    if inside_a_container():
        pytest.skip("inside a container: act starts containers itself")
    if not ACTIONS.is_dir():
        pytest.skip(f"{ACTIONS}: the pinned actions are not here (act runs offline from them)")
    if shutil.which("go") is None and not list((REPO_ROOT / ".tools").glob("act-*/act")):
        pytest.skip("act is built with Go, which is not installed")


def halved_disk_fails_the_gate(scenario: str, out: Path, job: str) -> str:
    """The matrix repository's pull request (tools/ci-local.sh SCENARIO, its throttle change) run
    under act: the gate fails on the regression, and the comment says so. Returns act's log."""
    done = ci_local(scenario, out)
    log = (out / "act.log").read_text() if (out / "act.log").exists() else ""
    tail = done.stderr[-3000:] + log[-6000:]
    outcome = json.loads((out / "outcome.json").read_text())
    # The job ran every step the gate has, up to the verdict: both sides measured.
    assert "Run Main iomatrix ab" in log, tail
    assert f"{job}] 🏁  Job failed" in log, tail
    assert outcome["exit"] != 0, tail
    session = next((out / "storage-matrix" / "iomatrix-gate" / "results").glob("*/comparison.json"))
    comparison = json.loads(session.read_text())
    assert comparison["verdict"]["outcome"] == "regressed", tail
    assert comparison["verdict"]["exit_code"] == 1
    sides = {p.name for p in session.parent.iterdir() if (p / "run.json").exists()}
    assert sides == {"base", "new"}
    # The gate's step printed that verdict, and the job failed on its exit code (podman's Docker
    # API once turned every container's exit into 0 here, and the gate passed).
    assert "regressed: " in log, tail
    assert "Failure - Main iomatrix ab" in log, tail
    # The comment, rendered from the artifact by iomatrix's own code, leads with the verdict.
    comment = (out / "comment.md").read_text()
    lead = next(line for line in comment.splitlines() if line.startswith("**"))
    assert lead.startswith("**iomatrix compare: regressed: "), comment[:2000]
    assert "write\\_iops" in comment
    return log


@pytest.mark.vm
@pytest.mark.image
def test_a_pull_request_that_halves_the_disk_fails_the_matrix_gate_under_act(
    tmp_path: Path,
) -> None:
    needs_act()
    log = halved_disk_fails_the_gate(
        "matrix-gate", tmp_path / "gate", "(reusable)/A/B performance gate"
    )
    # The reusable gate's matrix mode is the composite action (action.yml), run from its
    # checkout of iomatrix: this run is the action's test too.
    assert "Run Main The matrix gate (iomatrix's composite action" in log


@pytest.mark.vm
@pytest.mark.image
@pytest.mark.nightly
def test_a_pull_request_that_halves_the_disk_fails_the_composite_action_under_act(
    tmp_path: Path,
) -> None:
    """Nightly only (the same two sides as the matrix gate's run, which already runs the
    action's steps in .ci/run): docs/workflows/matrix-action/'s workflow as written, its
    `uses: iomatrix/iomatrix@<commit>` mapped to the clone under test; the action copies itself
    into the workspace and writes no COMMIT where its folder is a git checkout."""
    needs_act()
    out = tmp_path / "action"
    log = halved_disk_fails_the_gate(
        "matrix-action", out, "storage performance gate/A/B performance gate"
    )
    assert "Run Main iomatrix/iomatrix@" in log
    assert (out / "storage-matrix" / ".iomatrix" / "action.yml").is_file()


@pytest.mark.vm
@pytest.mark.image
@pytest.mark.nightly
def test_a_kernel_patch_that_slows_ext4_fails_the_kernel_gate_under_act(tmp_path: Path) -> None:
    """Nightly only (two kernel builds in the runner container: tens of minutes here).

    A kernel repository's own pull request (docs/workflows/kernel-pr-gate.yml): Debian's 6.1
    source with a one-file patch that makes ext4's direct writes 3 ms slower. The gate fetches
    both commits, builds each from source in the runner image (the base trusted, the head not),
    boots both and fails the check on the regression."""
    needs_act()
    out = tmp_path / "kernel"
    done = ci_local("kernel-gate", out)
    log = (out / "act.log").read_text() if (out / "act.log").exists() else ""
    tail = done.stderr[-3000:] + log[-6000:]
    assert "Success - Main Both kernel commits" in log, tail
    assert "Failure - Main iomatrix ab" in log, tail
    session = next((out / "linux" / "iomatrix-gate" / "results").glob("*/comparison.json"))
    verdict = json.loads(session.read_text())["verdict"]
    assert verdict["outcome"] == "regressed", tail
    assert any(c["metric"] == "write_iops" for c in verdict["cells"])
    comment = (out / "comment.md").read_text()
    assert "**iomatrix compare: regressed: " in comment


@pytest.mark.vm
@pytest.mark.image
@pytest.mark.nightly
def test_a_deliberately_broken_script_turns_the_gate_red_under_act(tmp_path: Path) -> None:
    """The kind of bug act found in the first run, put back into the iomatrix under test
    (SCENARIO_BREAK=kernel-spec-string: workflows/prepare.py hands kernels.fetch() a plain
    string). The gate must fail before any VM, with the traceback in the log: a run that passes
    around broken code proves nothing."""
    needs_act()
    out = tmp_path / "broken"
    done = ci_local("matrix-gate", out, SCENARIO_BREAK="kernel-spec-string")
    log = (out / "act.log").read_text() if (out / "act.log").exists() else ""
    tail = done.stderr[-3000:] + log[-6000:]
    outcome = json.loads((out / "outcome.json").read_text())
    assert outcome["break"] == "kernel-spec-string"
    assert done.returncode != 0, tail
    assert outcome["exit"] != 0, tail
    assert "AttributeError: 'str' object has no attribute" in log, tail
    assert "Failure - Main iomatrix ab" in log, tail
    assert "(reusable)/A/B performance gate] 🏁  Job failed" in log, tail
    # Stopped before measuring: no session, so no verdict a comment could claim.
    assert not list((out / "storage-matrix").glob("iomatrix-gate/results/*/comparison.json"))


@pytest.mark.vm
@pytest.mark.image
@pytest.mark.nightly
def test_the_matrix_repositorys_nightly_archives_a_night_on_its_results_branch_under_act(
    tmp_path: Path,
) -> None:
    """Nightly only (two shards' VMs and the runner image: tens of minutes here).

    docs/workflows/matrix-repository's storage-nightly.yml, dispatched: the plan's two shards
    each measure one cell of gate/storage.yaml in a TCG VM, the merge job archives the night on
    the `results` branch and pushes it to the (local) git server with the job's token, and
    writes the report.

    The results branch starts from a SEEDED history (tests/support/seeded_history.py: 19 nights
    that never ran, scaled from a real night of this matrix, the first 14 a quarter faster), so
    tonight's real night is the 20th, six runs after a step: the alert step must report it as
    new, and the regression-issue step must send GitHub (the gh stand-in) one issue per
    regressed series, naming the step's first night."""
    needs_act()
    history = seed_results_branch(tmp_path / "history", MATRIX_REPOSITORY / "gate" / "storage.yaml")
    out = tmp_path / "nightly"
    done = ci_local("nightly", out, NIGHTLY_HISTORY=str(history))
    log = (out / "act.log").read_text() if (out / "act.log").exists() else ""
    tail = done.stderr[-3000:] + log[-6000:]
    outcome = json.loads((out / "outcome.json").read_text())
    assert outcome["exit"] == 0, tail
    for job in ("plan", "image", "merge"):
        assert f"/{job}] 🏁  Job succeeded" in log, job + "\n" + tail
    assert log.count("/shard ") >= 2, tail
    # The night is on the results branch the merge job pushed: tonight's run folder beside the
    # seeded ones, both cells in it.
    assert outcome["results"], tail
    files = (out / "results-branch.txt").read_text().splitlines()
    runs = {f.split("/")[-2] for f in files if f.endswith("/run.json")}
    assert len(runs) == NIGHTS_BEFORE + NIGHTS_AFTER + 1, files[:50]
    # ... and the report the merge job left as its artifact, with tonight's alert in it.
    reports = list((out / "artifacts").glob("*/nightly-report/*"))
    assert reports, tail
    # The regression-issue step: what `gh issue create` would have sent, one per new regression:
    # each a step located at the seeded one (its first night after, give or take a night of
    # jitter), write_iops of both cells among them, about the seeded 20% (1 - 1/1.25) lower.
    calls = [json.loads(line) for line in (out / "github" / "calls.jsonl").read_text().splitlines()]
    created = [c for c in calls if c["argv"][:2] == ["issue", "create"]]
    assert created, calls
    seeded = git("log", "--reverse", "--format=%s", "results", cwd=history).splitlines()
    near_step = {
        line.split()[2].rstrip(":") for line in seeded[NIGHTS_BEFORE - 1 : NIGHTS_BEFORE + 2]
    }
    titles = [c["argv"][c["argv"].index("--title") + 1] for c in created]
    for title in titles:
        assert " regressed " in title, titles
        assert title.rsplit(" from ", 1)[1] in near_step, (title, near_step)
    iops = [t for t in titles if t.startswith("iomatrix nightly: write_iops of ")]
    assert len(iops) == 2, titles
    for title in iops:
        change = float(title.split(" regressed ", 1)[1].split("%", 1)[0])
        assert -25.0 < change < -15.0, title
    for call in created:
        assert call["repository"] == "example/storage-matrix"
        assert "performance-regression" in call["argv"]
        (body,) = call["bodies"].values()
        assert "iomatrix triage ack|ignore --cell" in body, body
        assert "/example/storage-matrix/actions/runs/" in body, body
    # ... and the night's report names the same changes as new tonight.
    report = next(p for p in reports if p.name == "nightly.md").read_text()
    assert "## New change points tonight" in report
    assert "write_iops`: regressed -" in report, report[:3000]
