"""The exit codes of every `iomatrix` command, named once so a workflow and a test read the same.

An IntEnum: a command returns ExitCode.NOT_OK, and a shell sees 1.
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
    # Ctrl-C (128 + SIGINT): finished cells are kept, the run can be resumed.
    INTERRUPTED = 130
    # The reader of stdout left (`iomatrix show ... | head`), 128 + SIGPIPE as a shell says.
    BROKEN_PIPE = 141
    # SIGTERM (CI cancelling a job), 128 + SIGTERM: handled like Ctrl-C.
    TERMINATED = 143
