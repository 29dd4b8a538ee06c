"""Options that several commands share, each declared once (as pip's cmdoptions and asv's
common_args do): a command composes the ones it takes, so `--results` or `--min-effect` cannot
mean different things, or lose their help, from one command to the next.

Every command's parser is built on every invocation, so this module and what it imports stay
light: the defaults and choices it shows come from the standard-library modules that hold them
(analysis/defaults.py, report/choices.py, plan/shard_spec.py), and what the commands make of
the options, which needs the matrix loader and the kernels, is in cli/inputs.py
(cli/handlers.py says why).

Values are checked by argparse types here (a bad `--jobs 0` is a usage error naming the option),
so the commands never turn a ValueError into "bad input": one that escapes is a bug and shows as
one.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from iomatrix.analysis import defaults
from iomatrix.errors import IomatrixError
from iomatrix.plan.shard_spec import GITHUB_MAX_MATRIX_JOBS, parse_shard
from iomatrix.report import choices
from iomatrix.store.results import default_results

DEFAULT_RESULTS = default_results()

# The gate's exit codes as compare and ab describe them (analysis/defaults.py, docs/ci.md).
_EXIT = defaults.GATE_EXIT_CODES
GATE_EXITS = (
    f"Exit {_EXIT['pass']}: pass (no gated regression, every gated cell compared; an "
    f"improvement passes); {_EXIT['regressed']}: a gated metric regressed; "
    f"{_EXIT['cannot-compare']}: cannot compare, the gate fails closed (a gated cell missing or "
    "errored on a side, a side that did not boot, every repetition of a cell invalid, nothing "
    f"compared) and bad input; {_EXIT['inconclusive']}: inconclusive (too few repetitions, too "
    "noisy; 0 with --inconclusive pass)."
)

SHARD_HELP = "only the I-th of N balanced, deterministic slices (1-based), e.g. 2/4"
QUICK_HELP = "use the smaller variant the matrix names in its `quick` field"

MATRIX_NAME_HELP = "only runs of the matrix of this name"

OFFLINE_HELP = (
    "use only cached kernels, without contacting the Debian archive (also IOMATRIX_OFFLINE=1)"
)


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return at_least(1)(text)


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `low`."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    return check


def shard_count(text: str) -> int:
    """An argparse type: how many shards a GitHub matrix can run, 1 to 256."""
    count = at_least(1)(text)
    if count > GITHUB_MAX_MATRIX_JOBS:
        raise argparse.ArgumentTypeError(
            f"invalid shard count {count}: a GitHub matrix runs 1 to {GITHUB_MAX_MATRIX_JOBS} jobs"
        )
    return count


def shard(text: str) -> str:
    """An argparse type: I/N, one of N shards (1-based), as `I/N`."""
    try:
        index, count = parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"{index}/{count}"


def fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1 (a significance level, an effect), or
    a percentage ("5%" is 0.05)."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        hint = f"; did you mean {text}%?" if 1 <= value < 100 and not text.endswith("%") else ""
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {value:g}{hint}")
    return value


def percentage(text: str) -> float:
    """An argparse type: a share above 0% and below 100%, as "5%" or as the fraction 0.05. A bare
    number of 1 or more ("5") is refused rather than guessed (5% or 500%?)."""
    body = text.strip()
    percent = body.endswith("%")
    try:
        value = float(body[:-1]) / 100 if percent else float(body)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (e.g. 5%)") from None
    if not percent and value >= 1:
        hint = f"did you mean {body}%? " if value < 100 else ""
        raise argparse.ArgumentTypeError(
            f"{text!r} is ambiguous: {hint}write a percentage (e.g. 5%) or a fraction below 1 "
            "(0.05)"
        )
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be above 0% and below 100%, not {text!r}")
    return value


RESULTS_FLAG = "--results"

# The attribute an action that takes an ID carries for shell completion (cli/completion.py):
# the kinds of result it accepts (store/handles.py), comma-separated, which the scripts pass to
# `iomatrix completion --ids KINDS` to be offered latest and the ids of that --results folder.
COMPLETER = "iomatrix_ids"
# Every kind an ID can name as a folder; what a command that takes only runs takes.
ANY_ID = ("run", "side", "session", "bisection")
RUN_IDS = ("run", "side")


def completes_ids(action: argparse.Action, kinds: Sequence[str]) -> argparse.Action:
    """Mark `action` as taking an ID of these kinds (the completion scripts offer them)."""
    setattr(action, COMPLETER, ",".join(kinds))
    return action


def results(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        RESULTS_FLAG,
        default=str(DEFAULT_RESULTS),
        metavar="DIR",
        help=f"the archive folder, where run folders are written and found (default: "
        f"{DEFAULT_RESULTS})",
    )


def results_argv(args: argparse.Namespace) -> list[str]:
    """--results as the command was given it, for a line that continues or repeats it."""
    given = str(getattr(args, "results", DEFAULT_RESULTS))
    return [] if given == str(DEFAULT_RESULTS) else [RESULTS_FLAG, given]


def matrix_name(p: argparse.ArgumentParser, *, only_for: str | None = None) -> None:
    """--matrix NAME: only the archived runs of the matrix of this name (a filter, never a file:
    a command that reads a matrix file takes it as a positional or as --matrix-file). only_for
    names the action the filter applies to, in a command with several."""
    where = f"{only_for}: " if only_for else ""
    p.add_argument("--matrix", metavar="NAME", help=f"{where}{MATRIX_NAME_HELP}")


def offline(p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup) -> None:
    p.add_argument("--offline", action="store_true", help=OFFLINE_HELP)


def no_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress line (a line per change is printed anyway when not on a terminal)",
    )


def only_cells(p: argparse.ArgumentParser, *, pairs: bool = False) -> None:
    """--cell ID: run only some cells of the matrix (`iomatrix reproduce` runs one)."""
    what = "the pairs with a cell of this id" if pairs else "the cell of this id"
    p.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="ID",
        help=f"only {what} (or an id it is a prefix of; repeatable): `iomatrix expand` lists "
        "the ids",
    )


def allow_host_device(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-host-device",
        action="append",
        default=[],
        metavar="PATH",
        help=(
            "let cells format the host block device PATH (as the matrix writes it, e.g. "
            "/dev/sdb; repeat for several); refused anyway while it is mounted or in use"
        ),
    )


def allow_tree(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-tree",
        action="append",
        default=[],
        metavar="DIR",
        help=(
            "let the matrix name kernels (path:, git:, source:) inside DIR, outside its own "
            "repository (repeat for several; IOMATRIX_ALLOW_TREES adds more), e.g. "
            "--allow-tree ~/src/linux for git:../linux@v6.1"
        ),
    )


def concurrency(p: argparse.ArgumentParser) -> None:
    """--jobs, --share-cores and --split-boots, the same on run and ab."""
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        metavar="N",
        help=(
            "run N boots side by side, each VM pinned (taskset) to host cores of its own, as "
            "many as its vCPUs; refused when N x vm.cpus exceeds the cores this process may use "
            "(default 1: one boot after another, unpinned)"
        ),
    )
    p.add_argument(
        "--share-cores",
        action="store_true",
        help="with --jobs: let VMs share host cores when they do not fit (noisier; recorded)",
    )
    p.add_argument(
        "--split-boots",
        type=positive_int,
        default=1,
        metavar="K",
        help=(
            "cut each boot into K boots of consecutive cells (A/B: of pairs), so that one "
            "(kernel, device) group can run on --jobs VMs (default 1)"
        ),
    )


def min_effect(p: argparse.ArgumentParser) -> None:
    """The smallest change that counts: the judging commands and bisect alike."""
    p.add_argument(
        "--min-effect",
        type=fraction,
        metavar="F",
        help=(
            "fixed minimum relative change, e.g. 0.05: a significant change must lie beyond it "
            "to count, and a result shown within it is unchanged (default: the smaller of "
            "--equivalence and max(0.03, 2 x baseline CoV))"
        ),
    )


def equivalence(p: argparse.ArgumentParser) -> None:
    """The margin 'unchanged' must be shown within: every command that judges (compare, ab,
    bisect)."""
    p.add_argument(
        "--equivalence",
        type=percentage,
        default=defaults.DEFAULT_EQUIVALENCE,
        metavar="PCT",
        help=(
            "the margin within which a result counts as unchanged, e.g. 5%% or 0.05: "
            "'unchanged' needs an equivalence test to pass (the ratio's 90%% CI at --alpha "
            "0.05 wholly inside +-PCT; wider where results are looked at repeatedly, as with "
            "--until-decided and in bisect); a result with no change that does not pass it is "
            "'too noisy to tell' (default: "
            + f"{defaults.DEFAULT_EQUIVALENCE:.0%}".replace("%", "%%")
            + ")"
        ),
    )


def judging(p: argparse.ArgumentParser, *, target_required: bool = False) -> None:
    """How a change is judged: compare, ab, repetitions and run's --baseline plan alike."""
    min_effect(p)
    p.add_argument(
        "--target-effect",
        type=fraction,
        required=target_required,
        metavar="F",
        help=(
            "the change to be able to see, e.g. 5%% or 0.05: a comparison row that could only "
            "have seen a larger one is 'noisy' (too noisy to tell), not 'unchanged'; with "
            "--baseline, the repetitions each cell needs for it"
        ),
    )
    p.add_argument(
        "--alpha",
        type=fraction,
        default=defaults.DEFAULT_ALPHA,
        metavar="A",
        help=f"significance level after Benjamini-Hochberg (default: {defaults.DEFAULT_ALPHA:g})",
    )
    p.add_argument(
        "--metric",
        action="append",
        metavar="PATTERN",
        help="only metrics matching this name or glob (e.g. '*_iops'); repeatable",
    )


def comparison(p: argparse.ArgumentParser) -> None:
    """How two sets of repetitions are judged and reported: compare and ab alike."""
    judging(p)
    equivalence(p)
    p.add_argument(
        "--format",
        choices=choices.FORMATS,
        default="table",
        help="how the report is printed (default: table)",
    )
    p.add_argument(
        "--all-metrics",
        action="store_true",
        help=(
            "table: every row (telemetry and informational metrics, every gated metric) with "
            "its numbers and reason; by default only the gated headline metrics and every "
            "change. The other formats always hold every row"
        ),
    )
    p.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the report to FILE and print only the verdict line",
    )
    p.add_argument(
        "--report-url",
        metavar="URL",
        help="Markdown: link the HTML report there (e.g. the CI run's artifacts page)",
    )
    p.add_argument(
        "--fail-on-invalid",
        action="store_true",
        help=(
            "fail closed (exit 2, cannot compare) when a repetition of either run is flagged "
            "by the validity checks (above the throttle, page-cache reads, direct I/O not on "
            "the disk, a short run, a CPU-bound guest); without it the flags are only shown "
            "(a cell whose every repetition is flagged fails closed either way)"
        ),
    )
    p.add_argument(
        "--inconclusive",
        choices=defaults.INCONCLUSIVE_POLICIES,
        default=defaults.DEFAULT_INCONCLUSIVE,
        help=(
            "whether a verdict that could not be told (too few repetitions, too noisy, a "
            f"change of unknown size) fails the gate: fail exits "
            f"{defaults.GATE_EXIT_CODES['inconclusive']}, pass exits 0 (default: "
            f"{defaults.DEFAULT_INCONCLUSIVE})"
        ),
    )


def baseline(p: argparse.ArgumentParser) -> None:
    """--baseline RUN: the repetitions each cell needs to see --target-effect, printed before
    anything runs."""
    baseline_run = p.add_argument(
        "--baseline",
        metavar="RUN",
        help=(
            "before running, print from RUN's noise the repetitions each cell needs to see "
            "--target-effect (as `iomatrix repetitions` does), and warn about cells with fewer"
        ),
    )
    completes_ids(baseline_run, RUN_IDS)


def fdr(p: argparse.ArgumentParser) -> None:
    """--fdr: trends judged across every series at once (trend, report)."""
    p.add_argument(
        "--fdr",
        action="store_true",
        help=(
            "control the false discovery rate across every series examined (Benjamini-Hochberg "
            "at --alpha): each candidate's p comes from 999 shuffles, with a fitted tail where "
            "fewer than 10 reach it, so it works at any number of series"
        ),
    )


def json_output(p: argparse.ArgumentParser) -> None:
    """--json on every command that lists or shows something: one JSON document on stdout."""
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON on stdout)")


def verbosity(p: argparse.ArgumentParser) -> None:
    """-v and -q, on the top level and on the commands that run cells."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show every command iomatrix runs (argv, exit code, seconds); no progress line",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="only results, warnings and errors: no progress line, no informational messages",
    )


def refuse_given(args: argparse.Namespace, dests: Sequence[str], why: str) -> None:
    """Refuse (exit 2, IomatrixError) the options of `dests` the command line gave, which the
    command would ignore in the mode it runs in: `show --json --metrics X` must not drop
    --metrics without a word. cli/main.py records what was given (args.given)."""
    given = [d for d in dests if d in getattr(args, "given", ())]
    if given:
        flags = " and ".join("--" + d.replace("_", "-") for d in given)
        raise IomatrixError(f"{flags}: {why}")


# The judging options and the field of a session's judging each sets (workflows/ab.py Judging).
_JUDGING = {
    "alpha": "alpha",
    "min_effect": "min_effect",
    "target_effect": "target_effect",
    "metric": "metrics",
    "equivalence": "equivalence",
    "inconclusive": "inconclusive",
    "fail_on_invalid": "fail_on_invalid",
}


def judging_given(args: argparse.Namespace) -> dict[str, object]:
    """The judging options the command line gave, by the session field each overrides: `compare
    S` judges a session with its own options unless told otherwise."""
    given: frozenset[str] = getattr(args, "given", frozenset())
    out: dict[str, object] = {}
    for dest, field in _JUDGING.items():
        if dest in given:
            value = getattr(args, dest)
            out[field] = tuple(value) if isinstance(value, list) else value
    return out
