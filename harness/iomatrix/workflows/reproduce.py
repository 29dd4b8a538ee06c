"""`iomatrix reproduce ID`: a result turned back into the steps that measure it again, from a
bare machine: install the iomatrix that made it, fetch its matrix at the recorded commit (checked
by its sha256), fetch or build its kernels, run the cell, the run or the session; and what this
machine differs in from the recorded environment (CPU, accelerator, QEMU, virtme-ng, the guest's
root, iomatrix), said before anything runs.

`plan` reads the records (run.json, session.json, bisect.json, the nightly's alerts.json) and
prints nothing of its own; `--run` does the steps from this machine (workflows/reproduce_run.py):
it uses the iomatrix that runs it, which must be the recorded one, clones the matrix's repository
into a work folder, runs through the same workflows as `run` and `ab`, and compares what it
measured with what was recorded, metric by metric, within the recorded cell's noise band.

The records may be a stranger's (a gate's artifact, a results branch): a repository is used only
when it is an https, http, git or ssh address or an existing folder (never git's ext:: or a
leading '-'), a commit only when it is 40 hex digits, a path only when relative without '..';
every command printed is quoted (shlex); git runs with iomatrix's neutral configuration.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from iomatrix.analysis.bisect import parse_state
from iomatrix.errors import IomatrixError
from iomatrix.host import environment
from iomatrix.model.result import MEASUREMENT_ENVIRONMENT, CellEntry, MatrixOrigin, RunRecord
from iomatrix.model.session import SessionRecord
from iomatrix.report.reproduce_line import commit_or_none, install_line
from iomatrix.report.text import one_line, wrap
from iomatrix.store import handles
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.records_io import load_run, load_session
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows import alert_bisect

# The matrix's checkout, under the work folder.
CHECKOUT = "matrix"
# The environment fields `reproduce` compares, in the order it lists them.
COMPARED = (*MEASUREMENT_ENVIRONMENT, "guest_root", "iomatrix_commit")
# The longest repository address or matrix path a plan puts into a command: longer is a
# command line nobody reads before pasting it.
MAX_WORD = 1000
_REMOTE = re.compile(r"(https?|git|ssh)://[^\s]+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+")


@dataclass(frozen=True)
class Step:
    """One step of the reproduction: what it does, and the commands (argv) that do it."""

    title: str
    # An argv, or a shell line already quoted (a pipeline).
    commands: tuple[tuple[str, ...] | str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """One thing to measure again: a run's cells (all of them: `cells` empty), or a session."""

    record: RunRecord
    run_dir: Path
    cells: tuple[str, ...] = ()
    session: SessionRecord | None = None
    session_dir: Path | None = None


@dataclass(frozen=True)
class Plan:
    handle: handles.Handle
    what: str
    targets: tuple[Target, ...]
    steps: tuple[Step, ...]
    # This machine against the recorded environment: (field, recorded, here), those that differ.
    differences: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = field(default=())


def plan(text: str, results: Path, *, work: Path) -> Plan:
    """What ID `text` names, and the steps that measure it again (nothing runs)."""
    found = handles.resolve(text, results, handles.KINDS)
    targets, what, notes = _targets(found, results)
    first = targets[0]
    steps = _steps(targets, work)
    differences = _differences(first.record)
    return Plan(found, what, tuple(targets), steps, differences, tuple(notes))


def _targets(found: handles.Handle, results: Path) -> tuple[list[Target], str, list[str]]:
    """What the ID is, as the runs (or the session) to measure again."""
    if found.kind in ("run", "side") and found.session is None:
        record = load_run(found.path)
        return [Target(record, found.path)], f"run {record.run_id}", []
    if found.kind == "cell" and found.session is None:
        record = load_run(found.path)
        label = _label(record, found.cell)
        return (
            [Target(record, found.path, (found.cell or "",))],
            f"cell {label} of run {record.run_id}",
            [],
        )
    if found.session is not None or found.kind == "session":
        session_dir = found.session or found.path
        notes = []
        if found.kind == "side":
            notes.append(
                f"{found.text} was measured interleaved with the session's other side: "
                "reproducing it runs the session"
            )
        return _session_target(session_dir, found.cell), _session_what(found), notes
    if found.kind in ("bisection", "step"):
        return _step_target(found)
    return _alert_targets(found, results)


def _label(record: RunRecord, cell: str | None) -> str:
    entry = next((e for e in record.cells if e.cell.id == cell), None)
    return entry.cell.label if entry is not None else str(cell)


def _session_what(found: handles.Handle) -> str:
    session = (found.session or found.path).name
    if found.kind == "cell":
        return f"pair {found.cell} of A/B session {session}"
    return f"A/B session {session}"


def _session_target(session_dir: Path, cell: str | None) -> list[Target]:
    session = SessionDir(session_dir)
    base = load_run(session.base)
    record = load_session(session_dir)
    cells: tuple[str, ...] = ()
    if cell is not None:
        pairs = record.pairs if record is not None else ()
        pair = next((p for p in pairs if cell in p), (cell, cell))
        cells = (pair[0],)
    return [Target(base, session.base, cells, record, session_dir)]


def _step_target(found: handles.Handle) -> tuple[list[Target], str, list[str]]:
    """A bisection's step: the run of its rounds that measured the step's candidate. A
    bisection as a whole is reproduced by its steps (each one's ID is printed)."""
    state = parse_state(BisectDir(found.path).read_state())
    if found.kind == "bisection":
        steps = ", ".join(f"{found.text}/{handles.STEP_PREFIX}{s.index}" for s in state.steps)
        raise IomatrixError(
            f"{found.text} is a bisection: reproduce one of its steps ({steps or 'none yet'}), "
            "or the A/B session of its ends"
        )
    step = next((s for s in state.steps if s.index == found.step), None)
    if step is None:
        raise IomatrixError(f"{found.text}: the bisection has no step {found.step}")
    runs = BisectDir(found.path).runs
    for name in sorted(handles.folder_ids(runs), reverse=True):
        record = load_run(runs / name)
        for entry in record.cells:
            if step.label in (entry.cell.kernel, entry.cell.axis_values().get("kernel", "")) or (
                step.label in entry.cell.axis_values().values()
                or entry.cell.kernel == f"bisect-{step.label[:12]}"
            ):
                what = f"step {step.index} of bisection {found.path.name} ({step.label})"
                notes = []
                if entry.cell.kernel_build is not None:
                    notes.append(
                        f"the step's kernel is commit {step.label} of "
                        f"{entry.cell.kernel_build.source.value}, built as the matrix builds "
                        "its kernel: give that commit as the kernel's ref to run it elsewhere"
                    )
                return [Target(record, runs / name, (entry.cell.id,))], what, notes
    raise IomatrixError(f"{found.text}: no run of the bisection measured {step.label}")


def _alert_targets(found: handles.Handle, results: Path) -> tuple[list[Target], str, list[str]]:
    """A nightly alert: the cell in the last run before the change and in the first after."""
    alert = alert_bisect.alert_entry(found, results)
    targets = []
    for run_id in (alert.last_run_before, alert.first_run_after):
        run_dir = handles.find_run(run_id, results)
        targets.append(Target(load_run(run_dir), run_dir, (alert.cell_id,)))
    what = (
        f"the nightly's alert: {alert.metric} of {alert.label} {alert.verdict} from "
        f"{alert.first_run_after} (last run before: {alert.last_run_before})"
    )
    return targets, what, ["each run's cell is measured again; compare the two reproductions"]


# --- the steps ------------------------------------------------------------------------------


def checked_origin(origin: MatrixOrigin) -> MatrixOrigin:
    """A recorded origin fit to be used: IomatrixError saying what is wrong otherwise."""
    remote = origin.repository
    usable = len(remote) <= MAX_WORD and (
        _REMOTE.fullmatch(remote) or (remote.startswith("/") and Path(remote).is_dir())
    )
    if not usable or remote.startswith("-") or "::" in remote:
        raise IomatrixError(
            f"the recorded repository {remote[:200]!r} is not an https, http, git or ssh "
            f"address, nor a folder here, of at most {MAX_WORD} characters"
        )
    if commit_or_none(origin.commit) is None:
        raise IomatrixError(f"the recorded commit {origin.commit[:80]!r} is not a commit")
    path = PurePosixPath(origin.path)
    if path.is_absolute() or ".." in path.parts or not origin.path or len(origin.path) > MAX_WORD:
        raise IomatrixError(
            f"the recorded matrix path {origin.path[:200]!r} is not relative, without '..', "
            f"of at most {MAX_WORD} characters"
        )
    return origin


def recorded_source(record: RunRecord) -> str:
    """The matrix file a run without a repository recorded, as a command's word that is never
    an option (a stranger's run.json may say `--allow-tree=/`): `./` before a leading `-`."""
    source = record.matrix_source
    return f"./{source}" if source.startswith("-") else source


def _matrix_in(work: Path, record: RunRecord) -> str:
    """Where the reproduction's copy of the run's matrix file is, as a command's word."""
    if record.matrix_origin is None:
        return recorded_source(record)
    return str(work / CHECKOUT / checked_origin(record.matrix_origin).path)


def _steps(targets: Sequence[Target], work: Path) -> tuple[Step, ...]:
    first = targets[0].record
    steps = [_install_step(first)]
    seen: set[str] = set()
    for target in targets:
        for record in records_of(target):
            key = f"{record.matrix_sha256}{record.matrix_origin}"
            if key not in seen:
                seen.add(key)
                steps.append(_matrix_step(record, work))
    steps.append(_kernel_step(targets, work))
    steps += [_run_step(target, work) for target in targets]
    return tuple(steps)


def records_of(target: Target) -> list[RunRecord]:
    if target.session_dir is None:
        return [target.record]
    return [
        load_run(SessionDir(target.session_dir).base),
        load_run(SessionDir(target.session_dir).new),
    ]


def _install_step(record: RunRecord) -> Step:
    env = record.environment
    notes = []
    commands: list[tuple[str, ...]] = []
    if env.iomatrix_image:
        notes.append(f"or the runner image it ran in: {env.iomatrix_image}")
    commit = commit_or_none(env.iomatrix_commit)
    if commit is not None:
        commands.append(tuple(install_line(commit)))
        if env.iomatrix_changed:
            notes.append(f"the run's iomatrix had changes over {commit[:12]} that no commit holds")
    elif env.iomatrix_commit:
        # Only 40 hex digits is installed: pip fetches any ref (refs/pull/N/head is a
        # stranger's pull request), and the record may be a stranger's.
        notes.append(
            f"the run recorded iomatrix commit {env.iomatrix_commit[:80]!r}, which is not a "
            f"commit: install the one you trust, {shlex.join(install_line('COMMIT'))}"
        )
    else:
        notes.append(
            f"the run recorded iomatrix {env.iomatrix} without its commit (made before iomatrix "
            f"recorded it): install a commit of that version, "
            f"{shlex.join(install_line('COMMIT'))}"
        )
    commands.append(("iomatrix", "doctor"))
    notes.append("doctor lists the host packages a run needs that this host lacks")
    version = commit[:12] if commit is not None else env.iomatrix[:40]
    return Step(f"install iomatrix {version}, as recorded", tuple(commands), tuple(notes))


def _matrix_step(record: RunRecord, work: Path) -> Step:
    origin = record.matrix_origin
    if origin is None:
        return Step(
            "the matrix file",
            (("sha256sum", recorded_source(record)),),
            (
                f"the run recorded no repository for {record.matrix_source} (it was in none, or "
                f"the run was made before iomatrix recorded it): copy it here; its sha256 must "
                f"be {record.matrix_sha256}",
            ),
        )
    origin = checked_origin(origin)
    checkout = work / CHECKOUT
    matrix = checkout / origin.path
    notes = []
    if origin.changed:
        notes.append(
            "the file had changes over that commit when it ran: the sha256 check fails, and "
            "the run's matrix is not in any commit"
        )
    return Step(
        f"the matrix at commit {origin.commit[:12]} of {origin.repository}",
        (
            ("git", "clone", "--no-checkout", "--quiet", origin.repository, str(checkout)),
            ("git", "-C", str(checkout), "checkout", "--quiet", "--detach", origin.commit),
            f"echo {shlex.quote(f'{record.matrix_sha256}  {matrix}')} | sha256sum --check",
        ),
        tuple(notes),
    )


def _kernel_step(targets: Sequence[Target], work: Path) -> Step:
    commands: list[tuple[str, ...] | str] = []
    notes = []
    for target in targets:
        for record in records_of(target):
            matrix = _matrix_in(work, record)
            cells = _cells(target, record)
            specs = {e.cell.kernel for e in cells}
            built = {e.cell.kernel for e in cells if e.cell.kernel_build is not None}
            if specs - built:
                command = ("iomatrix", "kernels", "fetch", "--matrix-file", matrix)
                if command not in commands:
                    commands.append(command)
            if built and ("iomatrix", "kernels", "build", matrix) not in commands:
                commands.append(("iomatrix", "kernels", "build", matrix))
            for spec in sorted(specs):
                info = record.kernels.get(spec)
                if info is None:
                    continue
                text = f"{spec} was {info.release}"
                if info.build is not None:
                    text += f", built from commit {info.build.commit} ({info.build.origin})"
                elif spec.startswith("debian:") and spec != f"debian:{info.release}":
                    text += f" (debian:{info.release} names that very kernel)"
                if text not in notes:
                    notes.append(text)
    return Step("the kernels", tuple(commands), tuple(notes))


def _cells(target: Target, record: RunRecord) -> list[CellEntry]:
    if not target.cells:
        return list(record.cells)
    wanted = set(target.cells)
    if target.session is not None and record.run_id.endswith("-new"):
        wanted = {b for a, b in target.session.pairs if a in wanted}
    return [e for e in record.cells if e.cell.id in wanted]


def _run_step(target: Target, work: Path) -> Step:
    if target.session_dir is not None:
        return Step("the A/B session", (tuple(ab_argv(target, work)),))
    argv = ["iomatrix", "run", _matrix_in(work, target.record)]
    if target.record.shard:
        argv += ["--shard", target.record.shard]
    for cell in target.cells:
        argv += ["--cell", cell]
    what = "the cell" if target.cells else "the run"
    return Step(what, (tuple(argv),))


def ab_argv(target: Target, work: Path) -> list[str]:
    """The `iomatrix ab` line that runs the session again, from its session.json (the matrices
    where the reproduction fetched them)."""
    record = target.session
    assert target.session_dir is not None
    base_run = load_run(SessionDir(target.session_dir).base)
    new_run = load_run(SessionDir(target.session_dir).new)
    argv = ["iomatrix", "ab", _matrix_in(work, base_run)]
    if record is None:
        argv.append(_matrix_in(work, new_run))
        return argv
    if record.new_matrix is not None:
        argv.append(_matrix_in(work, new_run))
    if record.split is not None:
        argv += ["--split", record.split]
    if record.repeat is not None:
        argv += ["--repeat", str(record.repeat)]
    argv += _judging_argv(record)
    if record.sides != "auto":
        argv += ["--sides", record.sides]
    if record.trusted_base:
        argv.append("--trusted-base")
    if record.jobs > 1:
        argv += ["--jobs", str(record.jobs)]
    if record.split_boots > 1:
        argv += ["--split-boots", str(record.split_boots)]
    for cell in target.cells:
        argv += ["--cell", cell]
    return argv


def _judging_argv(record: SessionRecord) -> list[str]:
    judging = record.judging
    argv = ["--until-decided"] if judging.until_decided else []
    if judging.max_repeat is not None:
        argv += ["--max-repeat", str(judging.max_repeat)]
    argv += ["--alpha", f"{judging.alpha:g}", "--equivalence", f"{judging.equivalence:g}"]
    if judging.min_effect is not None:
        argv += ["--min-effect", f"{judging.min_effect:g}"]
    if judging.target_effect is not None:
        argv += ["--target-effect", f"{judging.target_effect:g}"]
    for pattern in judging.metrics or ():
        argv += ["--metric", pattern]
    if judging.inconclusive != "fail":
        argv += ["--inconclusive", judging.inconclusive]
    if judging.fail_on_invalid:
        argv.append("--fail-on-invalid")
    return argv


def _differences(record: RunRecord) -> tuple[tuple[str, str, str], ...]:
    """The recorded environment's fields that this host would record otherwise."""
    now = environment.here()
    recorded = record.environment.model_dump(mode="json")
    commit = recorded.get("iomatrix_commit") or "unknown"
    recorded["iomatrix_commit"] = commit + (
        " with changes" if recorded.get("iomatrix_changed") else ""
    )
    out = []
    for name in COMPARED:
        was, here = str(recorded.get(name) or "unknown"), now.get(name, "unknown")
        if name == "accelerator" and was in here.split():
            continue
        if was != here:
            out.append((name, was, here))
    return tuple(out)


def render(found: Plan, *, width: int | None = None) -> str:
    """The plan as `iomatrix reproduce` prints it: numbered steps, each command on a line of
    its own (long ones continued with a backslash), then what differs on this machine."""
    # Every sentence holds a record's text (a stranger's run.json): one line each, and a line
    # cut for the width goes on as a comment, so none can start a command of its own in a plan
    # that is pasted whole.
    lines = [wrap(f"reproduce {one_line(found.what)}", width, indent="# "), ""]
    for note in found.notes:
        lines.append(wrap(f"note: {one_line(note)}", width, indent="# "))
    for number, step in enumerate(found.steps, start=1):
        lines.append(wrap(f"{number}. {one_line(step.title)}", width, indent="   "))
        for command in step.commands:
            lines += shell_lines(command, width, indent="   ")
        for note in step.notes:
            lines.append(wrap(f"   # {one_line(note)}", width, indent="# "))
    lines.append(f"{len(found.steps) + 1}. compare with the recorded numbers")
    lines += shell_lines(("iomatrix", "reproduce", found.handle.text, "--run"), width, "   ")
    lines.append(
        wrap(
            "   # steps 2 to the last done from this machine, then every gated headline metric "
            "compared with the recorded one",
            width,
            indent="# ",
        )
    )
    lines.append("")
    if found.differences:
        lines.append("this machine differs from the recorded environment:")
        for name, was, here in found.differences:
            said = f"  {name}: recorded {one_line(was, 200)}, here {one_line(here, 200)}"
            lines.append(wrap(said, width, indent="# "))
    else:
        lines.append(
            wrap("this machine has the recorded environment (CPU, accelerator, QEMU, ...)", width)
        )
    return "\n".join(lines)


def shell_lines(argv: Sequence[str] | str, width: int | None, indent: str = "") -> list[str]:
    """A command quoted for a shell (an argv; a string is a line quoted already), cut into
    lines of at most `width` at word boundaries, each but the last ending in a backslash (a
    shell reads them as one line)."""
    odd = next(
        (w for w in ([argv] if isinstance(argv, str) else argv) if not w.isprintable()), None
    )
    if odd is not None:
        # Quoted, such a word is still one word; but shown, a line break inside its quotes is a
        # line that reads as a command (a record's word: its shard, a cell id, a pattern).
        return [
            f"{indent}# left out: the record gives this command a word with a line break or a "
            f"control character, {one_line(odd, 120)}"
        ]
    if isinstance(argv, str):
        return [indent + argv]  # quoted already: cut nowhere, a quote may hold spaces
    words = [shlex.quote(w) for w in argv]
    if width is None:
        return [indent + " ".join(words)]
    lines: list[str] = []
    current = indent
    for word in words:
        sep = "" if current.strip() == "" else " "
        if current.strip() and len(current) + len(sep) + len(word) + 2 > width:
            lines.append(current + " \\")
            current = indent + "  " + word
        else:
            current += sep + word
    lines.append(current)
    return lines
