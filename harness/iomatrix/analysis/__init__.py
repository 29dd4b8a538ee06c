"""Numbers -> verdicts: metrics, statistics, comparisons, change points, trends. Pure."""
