"""The judging defaults the command line shows (--alpha, --equivalence, trend's --min-change),
here with the standard library only: the parser reads them without importing the statistics
(cli/handlers.py)."""

from __future__ import annotations

# compare's significance level, after Benjamini-Hochberg (--alpha).
DEFAULT_ALPHA = 0.05

# The margin of the equivalence test: a row is "unchanged" only when the (1 - 2 alpha) CI of
# median(new) / median(base) lies wholly inside 1 +- this (--equivalence).
DEFAULT_EQUIVALENCE = 0.05

# trend's floor on a change (analysis/trend_findings.py), beside its 3%: sigmas of the runs' robust
# spread, and standard errors of the difference of the two segments' medians (--min-change's help).
TREND_SIGMA_FACTOR = 1.5
TREND_STANDARD_ERRORS = 5.0

# The gate's outcomes and their exit codes (analysis/gate.py decides one for a comparison or a
# session; cli/exit_codes.py names the codes; docs/ci.md lists them): no gated regression and
# everything compared; a gated metric worse; no comparison could be made (a cell missing or
# errored on a side, a side that did not boot, every repetition invalid, nothing compared);
# no verdict could be reached (too few repetitions, too noisy, a change of unknown size).
GATE_EXIT_CODES: dict[str, int] = {
    "pass": 0,
    "regressed": 1,
    "cannot-compare": 2,
    "inconclusive": 3,
}

# Whether an inconclusive session fails the gate (--inconclusive fail|pass). It does by default:
# a gate that passes what it could not tell can be passed by making the numbers noisy.
INCONCLUSIVE_POLICIES: tuple[str, ...] = ("fail", "pass")
DEFAULT_INCONCLUSIVE = "fail"

# The one rule for repetitions, as the command line shows it: the fewest per side with which the
# rank test can reach p < alpha at all (stats.minimum_n_per_side, here at DEFAULT_ALPHA; a test
# holds the two equal). Fewer make every row, and so the gate, inconclusive.
GATE_MIN_REPETITIONS = 4
