"""The bisection folder's layout and its files (the engine, analysis/bisect.py, is pure: it
parses and serializes the state as text; reading and writing it is here).

  <results>/bisect-<time>-<name>/bisect.json   the state: candidates, every value, every step
                                   result.md    the evidence of every step, as Markdown
                                   runs/        each round's run folder (logs, consoles)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iomatrix.store.files import write_text_atomic

STATE_FILE = "bisect.json"
RESULT_FILE = "result.md"
RUNS_DIR = "runs"


@dataclass(frozen=True)
class BisectDir:
    """One bisection's folder: where its state, its result and its rounds' runs are."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_FILE

    @property
    def result(self) -> Path:
        return self.root / RESULT_FILE

    @property
    def runs(self) -> Path:
        return self.root / RUNS_DIR

    def read_state(self) -> str:
        """bisect.json's text (analysis.bisect.parse_state reads it into a BisectState)."""
        return self.state.read_text(encoding="utf-8")

    def write_state(self, text: str) -> None:
        """Replace bisect.json whole (atomically: an interrupted bisection resumes from it)."""
        write_text_atomic(self.state, text)

    def write_result(self, markdown: str) -> None:
        self.result.write_text(markdown)
