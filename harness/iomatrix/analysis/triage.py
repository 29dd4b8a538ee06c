"""The triage file: change points someone has looked at, kept with the archive.

`<results>/triage.yaml` (on the nightly's results branch: `runs/triage.yaml`, committed with the
runs) is a YAML list; each entry names one change by cell (its id or a glob of its label), metric
(a glob) and the first run after it, says what was decided about it and by whom:

    - cell: '*xfs*mq-deadline*'
      metric: '*_iops'
      first_run_after: 20261203T021500Z-nightly-merged-1a2b
      status: acknowledged          # or: ignored
      who: alice
      why: the writeback throttling patch, expected

`iomatrix trend` and the HTML report respect it: an acknowledged change is listed apart as known
(with who and why), an ignored one is not listed, only counted. `iomatrix triage ack|ignore`
appends an entry. The older known-changes form ({cell, metric, first_run_after, note}) still
reads, as acknowledged with the note as why.
"""

from __future__ import annotations

import datetime as dt
import difflib
import fnmatch
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ValidationError, model_validator

from iomatrix.analysis.compare import check_metric_patterns
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record
from iomatrix.model.result import RunRecord

Status = Literal["acknowledged", "ignored"]


class TriageEntry(Record):
    """One change point someone has looked at, and what they decided."""

    cell: str
    metric: str
    first_run_after: str
    status: Status = "acknowledged"
    who: str = ""
    why: str = ""
    # When the entry was added (iomatrix triage writes it); free text otherwise.
    at: str = ""
    # The older known-changes form's only explanation; read as `why`.
    note: str = ""

    @model_validator(mode="after")
    def _needs_a_reason(self) -> TriageEntry:
        if not (self.why or self.note):
            raise ValueError("why: say why the change is acknowledged or ignored")
        return self

    @property
    def reason(self) -> str:
        return self.why or self.note

    def describe(self) -> str:
        """What a report says about a change this entry matches."""
        by = f" by {self.who}" if self.who else ""
        return f"{self.status}{by}: {self.reason}"

    def matches(self, cell_id: str, label: str, metric: str, first_run_after: str) -> bool:
        return (
            (self.cell == cell_id or fnmatch.fnmatchcase(label, self.cell))
            and fnmatch.fnmatchcase(metric, self.metric)
            and self.first_run_after == first_run_after
        )


def parse_triage(text: str | None, where: Path | str) -> tuple[TriageEntry, ...]:
    """The entries of a triage file's text (store/results.py reads it; None, a missing file,
    has none). Bad content is an error naming the file (`where`), the entry, its line and the
    field."""
    if text is None:
        return ()
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise IomatrixError(f"{where}: not valid YAML: {exc}") from exc
    except RecursionError:
        # PyYAML's composer recurses once per level; a file a results branch or a pull request
        # carries may nest [[[...]]] thousands deep. No triage entry nests more than twice.
        raise IomatrixError(f"{where}: not a triage file: nested too deeply") from None
    if data is None:
        return ()
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise IomatrixError(f"{where}: expected a list of triage entries")
    out = []
    for index, item in enumerate(data):
        line = node.value[index].start_mark.line + 1
        try:
            out.append(TriageEntry.model_validate(item))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise IomatrixError(
                f"{where}: triage entry {index + 1} (line {line}): {problems}"
            ) from exc
    return tuple(out)


def matching(
    entries: Sequence[TriageEntry], cell_id: str, label: str, metric: str, first_run_after: str
) -> TriageEntry | None:
    """The last entry about this change (a later decision overrides an earlier one)."""
    found = [e for e in entries if e.matches(cell_id, label, metric, first_run_after)]
    return found[-1] if found else None


# How many cells a refusal lists.
SHOWN_CELLS = 10


def check_names(cell: str, metric: str, run: RunRecord) -> None:
    """An entry about a change whose first run after is `run` must name a cell of that run (its
    id, or a glob of its label) and a metric those cells measured: a typo would be written,
    match nothing and leave the change it meant unacknowledged. Refused with the cells there
    are (or the metrics, analysis.compare.check_metric_patterns) and the closest name."""
    found = [e for e in run.cells if e.cell.id == cell or fnmatch.fnmatchcase(e.cell.label, cell)]
    if not found:
        # A glob is often a label's start ('debian:bookworm/xfs/*'): each label is compared by
        # as much of it as the pattern is long, and named whole.
        names = {e.cell.label[: len(cell)]: e.cell.label for e in run.cells}
        names.update({e.cell.id: e.cell.id for e in run.cells})
        close = difflib.get_close_matches(cell, list(names), n=1, cutoff=0.6)
        hint = f"; did you mean {names[close[0]]!r}?" if close else ""
        shown = ", ".join(f"{e.cell.id} {e.cell.label}" for e in run.cells[:SHOWN_CELLS])
        more = len(run.cells) - SHOWN_CELLS
        raise IomatrixError(
            f"--cell {cell}: no cell of run {run.run_id} has this id or a label matching it"
            f"{hint} (its cells: {shown or 'none'}{f', and {more} more' if more > 0 else ''})"
        )
    check_metric_patterns([metric], found)


def appended(existing: Sequence[TriageEntry], entry: TriageEntry) -> str:
    """The triage file's text with an entry added to the existing ones (parsed first, so a
    damaged file is never overwritten), stamped with the time when it has none."""
    stamped = (
        entry
        if entry.at
        else entry.model_copy(update={"at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    )
    items = [e.model_dump(exclude_defaults=True) for e in (*existing, stamped)]
    header = "# Change points looked at (iomatrix triage); see iomatrix/analysis/triage.py\n"
    return header + yaml.safe_dump(items, sort_keys=False, allow_unicode=True)
