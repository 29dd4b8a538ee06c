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
