"""The --cell and --metric of the commands over the archive's series (history, trend), checked
against the archive's index before any is answered."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

from iomatrix.errors import IomatrixError
from iomatrix.store import archive

# How many names a refusal lists.
_SHOWN = 10


def check_names(
    results: Path,
    cells: Sequence[str],
    metric_patterns: Sequence[str],
    *,
    matrix: str | None = None,
) -> None:
    """Every --cell must be a cell of the archive and every --metric match one of its metrics:
    a typo would otherwise find nothing and say so as if there were nothing to find (exit 0 for
    trend). Refused (exit 2) with the closest name and the choices. An empty archive has no
    names to check against. The labels are read only to word a refusal: on a 10,000-run archive
    they cost more than the history query itself (issue 29: history in 100 ms)."""
    keys = archive.series_keys(results, matrix=matrix)
    if not keys:
        return
    cell_ids = {c for c, _ in keys}
    for cell in cells:
        if cell not in cell_ids:
            labels = {s.cell_id: s.label for s in archive.series_of(results, matrix=matrix)}
            close = _closest(cell, list(labels))
            hint = f"; did you mean {close} ({labels[close]})?" if close else ""
            shown = ", ".join(f"{c} {label}" for c, label in list(labels.items())[:_SHOWN])
            more = len(labels) - _SHOWN
            raise IomatrixError(
                f"--cell {cell}: no cell of the archive {results} has this id{hint} (its cells: "
                f"{shown}{f', and {more} more' if more > 0 else ''})"
            )
    metrics = sorted({m for c, m in keys if not cells or c in cells})
    for pattern in metric_patterns:
        if not any(fnmatch.fnmatchcase(m, pattern) for m in metrics):
            close = _closest(pattern, metrics)
            hint = f"; did you mean {close}?" if close else ""
            shown = ", ".join(metrics[: 3 * _SHOWN])
            more = len(metrics) - 3 * _SHOWN
            raise IomatrixError(
                f"--metric {pattern}: no metric of {'these cells' if cells else 'the archive'} "
                f"matches it{hint} (the metrics: {shown}{f', and {more} more' if more > 0 else ''})"
            )


def _closest(word: str, choices: list[str]) -> str | None:
    """The choice closest to a mistyped word (difflib's, at its cutoff of 0.6), if any."""
    # Imported here, to word a refusal only: `iomatrix history` pays for every import on its
    # path (issue 29).
    import difflib  # noqa: PLC0415

    close = difflib.get_close_matches(word, choices, n=1)
    return close[0] if close else None
