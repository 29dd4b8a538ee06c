#!/usr/bin/env python3
"""The gate's sticky PR comment, rendered by this iomatrix (the base branch's, in
reusable-comment.yml) from the comparison's JSON a gate run uploaded; never the Markdown the run
wrote. Validation, rendering and the audit: iomatrix/report/gate_comment.py.

    tools/gate_comment.py ARTIFACT_DIR OUTPUT CONCLUSION HEAD_SHA RUN_URL

writes the comment to OUTPUT and prints the PR number it is for; exit 1 (why on stderr) when the
artifact names no PR. Run with iomatrix's virtualenv: .venv/bin/python tools/gate_comment.py.
"""

from __future__ import annotations

import sys

from iomatrix.report.gate_comment import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
