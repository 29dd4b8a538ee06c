"""The records of a comparison of two runs (analysis/compare.py makes them; comparison.json holds
them): its rows (one cell x one metric, with its verdict), the settings that decided them, the
runs compared, the per-axis summaries, the gate's verdict (analysis/gate.py decides it), and the
error that refuses runs measured apart.

Format history of comparison.json (COMPARISON_FORMAT):
  1  first format (2026-11).
     Compatible additions since (optional fields, left out while they hold their default, so a
     file without them loads; an older iomatrix refuses a file that has them, "extra field"):
     - settings.equivalence: the equivalence margin "unchanged" was tested against.
     - invalid: the validity flags of either run's repetitions.
     - verdict: the gate's one answer (GateVerdict: outcome, exit code, reasons, the cells that
       decided it), as the command that wrote the file gave it (`ab`, `compare --output`). A
       file without one is judged again by whoever reads it (analysis/gate.py, the defaults).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from iomatrix.analysis import attestation, defaults, stats, validity
from iomatrix.analysis import metrics as metric_rules
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record, is_empty, is_none
from iomatrix.model.result import Environment, RunId

COMPARISON_FORMAT = 1

Verdict = Literal[
    "improved", "regressed", "changed", "unchanged", "noisy", "missing", "incomparable"
]

# How the reason of a "noisy" row that had too few repetitions to ever be significant starts.
INSUFFICIENT = "insufficient repetitions"
# How the reason of a "noisy" row ends when more repetitions would settle it (and only then: a
# row no number of repetitions can change never says so).
MORE_REPETITIONS = "more repetitions would tell"

DEFAULT_ALPHA = defaults.DEFAULT_ALPHA
DEFAULT_NOISY_COV = stats.DEFAULT_NOISY_COV
DEFAULT_CONFIDENCE = 0.95
DEFAULT_EQUIVALENCE = stats.DEFAULT_EQUIVALENCE


class Difference(Record):
    """One way two runs' environments differ; `where` is "environment" or a cell."""

    where: str
    field: str
    base: str
    new: str

    def describe(self) -> str:
        place = "" if self.where == "environment" else f"{self.where}: "
        return f"{place}{self.field} {self.base!r} (base) vs {self.new!r} (new)"


class Settings(Record):
    """How the verdicts were decided, so a report can be checked and reproduced."""

    alpha: float
    # A fixed minimum effect, or None: per row max(min_effect_floor, factor x baseline CoV).
    min_effect: float | None
    min_effect_floor: float
    min_effect_cov_factor: float
    noisy_cov: float
    confidence: float
    resamples: int
    # Fewest repetitions per side (equal sizes) with which p < alpha is possible at all.
    min_repetitions: int
    # The change the comparison must be able to see (0.05 = 5%); a row whose detectable effect
    # is larger is "noisy" rather than "unchanged". None: no target.
    target_effect: float | None = None
    # The equivalence margin (0.05 = 5%): "unchanged" needs the (1 - 2 alpha) CI of the ratio
    # wholly inside 1 +- this. A compatible addition: None in comparisons written before the
    # rule (their "unchanged" meant only "no significant large change"), left out of them.
    equivalence: float | None = Field(default=None, exclude_if=is_none)
    # Whether repetitions recorded without the host's attestation were left out (an A/B
    # session). A compatible addition, left out while False.
    require_attestation: bool = Field(default=False, exclude_if=is_empty)


class RunInfo(Record):
    run_id: RunId
    created_at: str
    status: str
    matrix_name: str
    environment: Environment


class Row(Record):
    """One cell x one metric of the comparison."""

    cell_id: str
    cell: str
    axes: dict[str, str]
    metric: str
    direction: metric_rules.Direction
    gated: bool
    base_n: int
    new_n: int
    base_median: float | None = None
    new_median: float | None = None
    base_cov: float | None = None
    new_cov: float | None = None
    # median(new) / median(base) and its bootstrap confidence interval.
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    min_effect: float | None = None
    # The smallest change this row would have reported (stats.detectable_effect, at
    # stats.DETECTABLE_POWER) were it the only change in its Benjamini-Hochberg family; None when
    # it could report none alone (too few repetitions for that family: the comparison's notes
    # say so once).
    detectable: float | None = None
    verdict: Verdict
    reason: str
    # For "missing" rows: the side(s) without numbers.
    missing_side: Literal["base", "new", "both"] | None = None


class AxisSummary(Record):
    """Geometric mean of median(new) / median(base) over the cells with one axis value."""

    axis: str
    value: str
    metric: str
    direction: metric_rules.Direction
    cells: int
    geomean_ratio: float
    improved: int
    regressed: int


# The gate's outcomes and what each exits with: analysis/defaults.py (GATE_EXIT_CODES) and
# analysis/gate.py (gate_verdict) say what they mean.
Outcome = Literal["pass", "regressed", "cannot-compare", "inconclusive"]
InconclusivePolicy = Literal["fail", "pass"]
Side = Literal["base", "new", "both"]


class GateFinding(Record):
    """One thing that decided the gate's outcome: a gated cell (or one metric of it) that
    regressed, could not be compared, or could not be told; `side` names the side without
    numbers when there is one."""

    outcome: Outcome
    cell_id: str
    cell: str
    # The metric, or "-" for the whole cell.
    metric: str
    side: Side | None = None
    reason: str


class GateVerdict(Record):
    """The gate's one answer for a comparison or a session: every rendering prints `summary`
    and CI reads `exit_code`."""

    outcome: Outcome
    exit_code: int
    # One sentence: "cannot-compare: 1 cell errored in new (ext4/...: ... Kernel panic ...)".
    summary: str
    # What decided it, a line each, worst first (regressions, then cells that could not be
    # compared, then rows that could not be told): every cell named, at most MAX_REASONS lines.
    reasons: tuple[str, ...]
    cells: tuple[GateFinding, ...]
    # Whether an inconclusive session fails the gate (--inconclusive).
    inconclusive: InconclusivePolicy
    # Decided by a sequential session's decisions (ab --until-decided), not the rows' verdicts.
    sequential: bool = False

    @property
    def blocks(self) -> bool:
        return self.exit_code != 0


class Comparison(Record):
    format: int = COMPARISON_FORMAT
    base: RunInfo
    new: RunInfo
    settings: Settings
    forced: bool
    differences: tuple[Difference, ...]
    # "FORCED: environments differ: ..." when forced over differences; shown by every renderer.
    marker: str | None
    notes: tuple[str, ...]
    rows: tuple[Row, ...]
    axes: tuple[AxisSummary, ...]
    # Validity flags (analysis.validity) of either run's repetitions: numbers that are not the
    # disk's. Shown beside the verdict; they fail the gate only when asked (fail_on_invalid).
    # Left out while empty, so a comparison without flags is the file it always was.
    invalid: tuple[validity.SideFlag, ...] = Field(default=(), exclude_if=is_empty)
    # The gate's verdict as the command that wrote the file gave it (its policy, a sequential
    # session's decisions); None until one is attached (analysis/gate.py judges it then).
    verdict: GateVerdict | None = Field(default=None, exclude_if=is_none)
    # Repetitions left out of the statistics because the host did not confirm their numbers
    # (analysis.attestation), with why and both figures. Left out while empty.
    unconfirmed: tuple[attestation.Unconfirmed, ...] = Field(default=(), exclude_if=is_empty)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            out[row.verdict] = out.get(row.verdict, 0) + 1
        return out

    def gated_regressions(self) -> list[Row]:
        return [r for r in self.rows if r.gated and r.verdict == "regressed"]


class EnvironmentMismatchError(IomatrixError):
    """The runs were measured in different environments; comparing them needs force=True.

    `comparison` holds every row as "incomparable", so a caller can still publish why no verdict
    was given (the CLI writes it to --output before failing).
    """

    def __init__(self, differences: Sequence[Difference], comparison: Comparison) -> None:
        super().__init__()
        self.differences = tuple(differences)
        self.comparison = comparison

    def __str__(self) -> str:
        lines = "\n".join(f"  - {d.describe()}" for d in self.differences)
        return (
            f"runs {self.comparison.base.run_id} and {self.comparison.new.run_id} were measured "
            f"in different environments; refusing to compare (force it with --force, and the "
            f"report is marked):\n{lines}"
        )
