"""Modules of the package written by a tool, not by hand (paths under harness/iomatrix/).

The rules about hand-written code (a module's size, a fact written once) do not apply to them:
their facts are the host's records', and tests/project/test_guest_records.py holds each to what
tools/guest_records.py writes (and this list to that tool's targets).
"""

from __future__ import annotations

GENERATED = frozenset({"guest/plan_view.py", "guest/result_records.py"})
