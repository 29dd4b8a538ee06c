"""The exit codes of every `iomatrix` command, named once so a workflow and a test read the same.

An IntEnum: a command returns ExitCode.NOT_OK, and a shell sees 1. The gate's outcomes
(`compare`, `ab`: analysis/gate.py, their codes in analysis/defaults.py GATE_EXIT_CODES, which a
test holds equal to these) are named here too: REGRESSED is NOT_OK's 1, CANNOT_COMPARE is
BAD_INPUT's 2 (no comparison could be made), INCONCLUSIVE is 3 of its own.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    # The command worked and found something wrong: a cell not ok, a gated regression, cells no
    # shard reported, an archive file that does not load, no history for a metric.
    NOT_OK = 1
    # Bad input or a failure before anything ran; the message names the file, field and reason.
    # Also argparse's usage errors.
    BAD_INPUT = 2
    # The gate: a gated metric regressed (NOT_OK's code).
    REGRESSED = 1
    # The gate failed closed: a gated cell missing or errored on a side, a side that did not
    # boot, every repetition of a cell invalid, nothing compared (BAD_INPUT's code: no
    # comparison could be made, as refused environments and bad input).
    CANNOT_COMPARE = 2
    # The gate could not tell (too few repetitions, too noisy); 0 with --inconclusive pass.
    INCONCLUSIVE = 3
    # Ctrl-C (128 + SIGINT): finished cells are kept, the run can be resumed.
    INTERRUPTED = 130
    # The reader of stdout left (`iomatrix show ... | head`), 128 + SIGPIPE as a shell says.
    BROKEN_PIPE = 141
    # SIGTERM (CI cancelling a job), 128 + SIGTERM: handled like Ctrl-C.
    TERMINATED = 143
