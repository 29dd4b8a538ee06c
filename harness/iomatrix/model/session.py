"""An A/B session's own record (session.json in its folder, store/sessiondir.py): what `iomatrix
ab` was asked and how it pairs and judges, written before its first boot and again before each
round of a sequential session, so that an interrupted session can be resumed as it was
(`ab --resume`), its two sides compared as it compared them (`compare S/base S/new`), and
reproduced elsewhere (`iomatrix reproduce`).

Format history of session.json (SESSION_FORMAT):
  1  first format (2026-12). Sessions made before it have no session.json: their pairs are
     their runs' cells in order, their judging their comparison.json's settings.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from iomatrix.model.cell import Record
from iomatrix.model.result import RunId

SESSION_FORMAT = 1


class SessionJudging(Record):
    """How the session judges its sides (ab's comparison and gate options)."""

    alpha: float
    min_effect: float | None = None
    target_effect: float | None = None
    metrics: tuple[str, ...] | None = None
    equivalence: float
    until_decided: bool = False
    max_repeat: int | None = None
    inconclusive: Literal["fail", "pass"] = "fail"
    fail_on_invalid: bool = False


class SessionRecord(Record):
    format: int = SESSION_FORMAT
    session_id: RunId
    # The matrix files as the command line gave them (made absolute), and the split axis with
    # its two values (base first) when one matrix was split.
    base_matrix: str
    new_matrix: str | None = None
    split: str | None = None
    split_values: tuple[str, str] | None = None
    # --repeat, when it overrode the matrices' own.
    repeat: int | None = None
    # --sides as asked, and whether the sides ran apart (a VM each) as decided; side-by-side
    # sessions are judged as pairs (workflows/ab.py judge_runs), resumed or compared again.
    sides: Literal["auto", "shared", "apart", "side-by-side"] = "auto"
    apart: bool = False
    trusted_base: bool = False
    jobs: int = 1
    split_boots: int = 1
    share_cores: bool = False
    allowed_trees: tuple[str, ...] = ()
    allowed_host_devices: tuple[str, ...] = ()
    # (base cell id, new cell id) of every pair, in the order they run.
    pairs: tuple[tuple[str, str], ...]
    # Each pair's first look (its repetitions before any sequential round), and the repetitions
    # its base and new cell have now (grown by the rounds of --until-decided, written before each
    # round runs).
    first: tuple[int, ...]
    repeats: tuple[tuple[int, int], ...]
    judging: SessionJudging
    # The command that started the session, as argv (printed back by `reproduce`).
    argv: tuple[str, ...] = Field(default=())
