"""Two VMs side by side, their repetitions started together (`ab --sides side-by-side`).

Each of the two VMs runs, round after round, one side of every pair: VM 0 the base side in even
rounds and the new side in odd ones, VM 1 the other (plan/boots.py side_by_side_steps plans
them, workflows/ab_session.py runs them), so that a core that happens to be slower does not
always serve the same side. For the two repetitions
of a round to meet the same host, each starts only when the other is ready: the first VM whose
agent says its workload starts (the console line host/vm/qmp.py's watcher reads) is paused over
QMP (`stop`: its vCPUs halt, its guest clock with them) until the other VM says the same of its
partner step, which resumes it (`cont`). The agent idles for a moment after that line
(guest/agent.py MARK_SETTLE_S), so a pause lands in idle time, before the workload runs.

Nothing here waits on a thread: the console reader that saw a line pauses or resumes and goes
on draining the console. A VM that finished, died or skipped its partner's step leaves the
rendezvous, which resumes whoever waits for it; a wait is also bounded (`max_wait_s`), so a
partner that never comes delays a VM, never stalls it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping

Action = Callable[[], None]


class Rendezvous:
    """Where two VMs' steps meet: `keys` names each step (by run folder, cell id and
    repetition) with the key it shares with its partner step in the other VM."""

    def __init__(
        self,
        keys: Mapping[tuple[str, str, int], Hashable],
        *,
        max_wait_s: float = 300.0,
        timer: Callable[[float, Action], threading.Timer] | None = None,
    ) -> None:
        self.keys = dict(keys)
        self.max_wait_s = max_wait_s
        self._timer = timer or threading.Timer
        self._lock = threading.Lock()
        # key -> (slot, resume, its timer) of the VM waiting there.
        self._waiting: dict[Hashable, tuple[int, Action, threading.Timer]] = {}
        self._gone: set[int] = set()
        # What happened, for the session's log: pauses, their lengths are the boots' business.
        self.events: list[str] = []

    def key(self, run_dir: str, cell_id: str, repetition: int) -> Hashable | None:
        return self.keys.get((run_dir, cell_id, repetition))

    def arrive(self, slot: int, key: Hashable, pause: Action, resume: Action) -> None:
        """VM `slot` is at the start of its step `key`: wait for the partner, or release it."""
        with self._lock:
            waiting = self._waiting.pop(key, None)
            if waiting is not None and waiting[0] != slot:
                waiting[2].cancel()
                self.events.append(f"{key}: both ready")
                waiting[1]()
                return
            if self._gone - {slot}:
                return  # the partner has left: nothing to wait for
            timer = self._timer(self.max_wait_s, lambda: self._give_up(key))
            # A wait left behind must never keep the process alive at its end.
            timer.daemon = True
            self._waiting[key] = (slot, resume, timer)
            pause()
            timer.start()

    def _give_up(self, key: Hashable) -> None:
        with self._lock:
            waiting = self._waiting.pop(key, None)
            if waiting is not None:
                self.events.append(f"{key}: partner did not come in {self.max_wait_s:.0f} s")
                waiting[1]()

    def leave(self, slot: int) -> None:
        """VM `slot` is done (or dead): nobody waits for it any more."""
        with self._lock:
            self._gone.add(slot)
            for key, (waiter, resume, timer) in list(self._waiting.items()):
                timer.cancel()
                del self._waiting[key]
                if waiter != slot:
                    self.events.append(f"{key}: partner left")
                    resume()
