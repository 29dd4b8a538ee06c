"""The agent's entry as a module, `python -m iomatrix.guest PLAN.json`; the VM starts it from
guest/start.py instead (by path, its modules from a bundle: start.py says why).

The agent's start-up is paid at every boot, by the guest root's interpreter over the shared
root, under an emulated CPU. It imports the standard library and the stdlib-only parts of
iomatrix, never pydantic (guest/plan_view.py says why and what it saves); the host runs it
without the virtualenv's libraries on its path (host/vm.guest_agent_command), so a stray import
of one fails at once. tests/unit/guest/test_entry.py checks both.
"""

from __future__ import annotations

from iomatrix.guest.agent import main

if __name__ == "__main__":
    raise SystemExit(main())
