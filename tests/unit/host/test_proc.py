"""The subprocess seam, run for real: output, exit codes, errors, timeouts, process groups."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from iomatrix import proc

PY = sys.executable


def pid_alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a zombie may wait for a lazy PID 1 to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    # The state follows the parenthesised command name, which may itself hold spaces.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return False


def read_pid(path: Path) -> int:
    return int(path.read_text().strip())


@pytest.fixture
def reap_leftovers() -> Iterator[list[int]]:
    """Pids a test started indirectly; killed afterwards if a failing test left them running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


# --- success and output ---------------------------------------------------------------------------


def test_captures_stdout_and_stderr_separately() -> None:
    done = proc.run(["sh", "-c", "echo out; echo err >&2"], timeout_s=10)
    assert done.returncode == 0
    assert done.stdout == "out\n"
    assert done.stderr == "err\n"
    assert done.argv == ("sh", "-c", "echo out; echo err >&2")


def test_true_returns_empty_output() -> None:
    done = proc.run(["true"], timeout_s=10)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_duration_is_measured() -> None:
    done = proc.run(["sleep", "0.2"], timeout_s=10)
    assert 0.2 <= done.duration_s < 5.0


def test_undecodable_output_is_replaced_not_raised() -> None:
    done = proc.run([PY, "-c", "import sys; sys.stdout.buffer.write(b'a\\xffb')"], timeout_s=10)
    assert done.stdout == "a\ufffdb"


def test_cwd_and_env_reach_the_program(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "IOMATRIX_TEST_VALUE": "forty two"}
    done = proc.run(
        ["sh", "-c", 'pwd; echo "$IOMATRIX_TEST_VALUE"'], timeout_s=10, cwd=tmp_path, env=env
    )
    assert done.stdout == f"{tmp_path}\nforty two\n"


def test_empty_argv_is_refused() -> None:
    with pytest.raises(ValueError, match="empty argv"):
        proc.run([], timeout_s=10)


# --- stdin ----------------------------------------------------------------------------------------


def test_input_text_reaches_stdin() -> None:
    done = proc.run(
        [PY, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"],
        timeout_s=10,
        input_text="hello\nworld\n",
    )
    assert done.stdout == "HELLO\nWORLD\n"


def test_without_input_text_stdin_is_empty_not_inherited() -> None:
    # cat would block forever on an inherited terminal; /dev/null ends it at once.
    done = proc.run(["cat"], timeout_s=10)
    assert done.stdout == ""


# --- exit codes and errors ------------------------------------------------------------------------


def test_disallowed_exit_code_raises_with_output() -> None:
    argv = ["sh", "-c", "echo partial; echo 'disk on fire' >&2; exit 3"]
    with pytest.raises(proc.CommandError) as info:
        proc.run(argv, timeout_s=10)
    err = info.value
    assert not isinstance(err, proc.CommandTimeout)
    assert err.returncode == 3
    assert err.stdout == "partial\n"
    assert err.stderr == "disk on fire\n"
    assert err.reason == ""
    assert str(err) == "sh -c 'echo partial; echo '\"'\"'disk on fire'\"'\"' >&2; exit 3': " + (
        "exited with status 3\ndisk on fire"
    )


def test_false_fails_with_status_one_and_no_detail() -> None:
    with pytest.raises(proc.CommandError) as info:
        proc.run(["false"], timeout_s=10)
    assert info.value.returncode == 1
    assert str(info.value) == "false: exited with status 1"


def test_error_message_falls_back_to_stdout_and_keeps_the_last_15_lines() -> None:
    script = "for i in $(seq 1 20); do echo line$i; done; exit 4"
    with pytest.raises(proc.CommandError) as info:
        proc.run(["sh", "-c", script], timeout_s=10)
    lines = str(info.value).splitlines()
    assert lines[0].endswith(": exited with status 4")
    assert lines[1:] == [f"line{i}" for i in range(6, 21)]


def test_ok_codes_allow_other_exit_codes() -> None:
    done = proc.run(["sh", "-c", "echo x; exit 3"], timeout_s=10, ok_codes=(0, 3))
    assert done.returncode == 3
    assert done.stdout == "x\n"
    with pytest.raises(proc.CommandError):
        proc.run(["true"], timeout_s=10, ok_codes=(3,))


def test_missing_program_is_a_command_error_with_reason(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    with pytest.raises(proc.CommandError) as info:
        proc.run([missing, "--flag"], timeout_s=10)
    err = info.value
    assert err.returncode is None
    assert err.reason == "cannot start: No such file or directory"
    assert str(err) == f"{missing} --flag: cannot start: No such file or directory"


def test_program_without_execute_permission_is_a_command_error(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(proc.CommandError) as info:
        proc.run([str(script)], timeout_s=10)
    assert info.value.reason == "cannot start: Permission denied"


def test_missing_cwd_is_a_command_error(tmp_path: Path) -> None:
    with pytest.raises(proc.CommandError, match="cannot start"):
        proc.run(["true"], timeout_s=10, cwd=tmp_path / "gone")


# --- output_file ----------------------------------------------------------------------------------


def test_output_file_gets_stdout_and_stderr_interleaved(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    done = proc.run(
        ["sh", "-c", "echo one; echo two >&2; echo three; echo four >&2"],
        timeout_s=10,
        output_file=log,
    )
    assert (done.stdout, done.stderr) == ("", "")
    assert log.read_text() == "one\ntwo\nthree\nfour\n"


def test_output_file_has_each_line_while_the_command_still_runs(tmp_path: Path) -> None:
    """A console log is live (a user's `tail -f`, a test waiting for a repetition to end): a
    line is in the file before the command ends, not held in an 8 KiB buffer."""
    log = tmp_path / "console.log"
    seen: list[str] = []

    def watch() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not seen:
            if log.exists() and "first line" in log.read_text():
                seen.append(log.read_text())
                (tmp_path / "seen").touch()
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    # The command waits until the watcher saw its line (or 20 s): a buffered log never shows it.
    wait = f"for i in $(seq 200); do [ -e {tmp_path}/seen ] && break; sleep 0.1; done"
    done = proc.run(["sh", "-c", f"echo first line; {wait}"], timeout_s=60, output_file=log)
    watcher.join()
    assert done.returncode == 0
    assert seen == ["first line\n"]


def test_output_file_is_appended_to(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text("earlier boot\n")
    proc.run(["echo", "first"], timeout_s=10, output_file=log)
    proc.run(["sh", "-c", "echo second >&2"], timeout_s=10, output_file=log)
    assert log.read_text() == "earlier boot\nfirst\nsecond\n"


def test_output_file_with_failure_and_input(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    with pytest.raises(proc.CommandError) as info:
        proc.run(["sh", "-c", "cat; exit 2"], timeout_s=10, output_file=log, input_text="fed\n")
    assert info.value.returncode == 2
    assert log.read_text() == "fed\n"


# --- timeouts and process groups ------------------------------------------------------------------


def test_timeout_kills_the_whole_process_group(tmp_path: Path, reap_leftovers: list[int]) -> None:
    pidfile = tmp_path / "child.pid"
    # The shell starts a child in the background and waits; both are in the command's group.
    script = 'sleep 100 & echo $! > "$1"; echo started; wait'
    started = time.monotonic()
    with pytest.raises(proc.CommandTimeout) as info:
        proc.run(["sh", "-c", script, "sh", str(pidfile)], timeout_s=0.5)
    elapsed = time.monotonic() - started
    child = read_pid(pidfile)
    reap_leftovers.append(child)
    err = info.value
    assert err.timeout_s == 0.5
    assert err.returncode is None
    assert err.reason == "timed out after 0.5 s and was killed"
    assert str(err).startswith("sh -c ")
    assert "timed out after 0.5 s and was killed" in str(err)
    # What the command printed before it was killed is kept for the error message.
    assert err.stdout == "started\n"
    assert 0.5 <= elapsed < 4.0
    assert wait_gone(child), f"background child {child} survived the timeout"


def test_timeout_escalates_to_sigkill_when_sigterm_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reap_leftovers: list[int]
) -> None:
    monkeypatch.setattr(proc, "_TERMINATE_GRACE_S", 0.3)
    pidfile = tmp_path / "child.pid"
    # An ignored signal stays ignored across fork and exec, so the child ignores SIGTERM too.
    script = "trap '' TERM; sleep 100 & echo $! > \"$1\"; wait"
    with pytest.raises(proc.CommandTimeout):
        proc.run(["sh", "-c", script, "sh", str(pidfile)], timeout_s=0.5)
    child = read_pid(pidfile)
    reap_leftovers.append(child)
    assert wait_gone(child), f"child {child} ignoring SIGTERM survived"


def test_timeout_with_output_file(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    with pytest.raises(proc.CommandTimeout) as info:
        proc.run(["sh", "-c", "echo booting; sleep 100"], timeout_s=0.5, output_file=log)
    assert info.value.stdout == ""
    assert log.read_text() == "booting\n"


def test_keyboard_interrupt_stops_the_group_and_propagates(
    tmp_path: Path, reap_leftovers: list[int]
) -> None:
    """Ctrl-C simulated as an exception raised by a signal handler in the waiting main thread."""
    pidfile = tmp_path / "child.pid"

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        # Interrupt only once the command runs (its pid file exists), else look again shortly.
        if pidfile.exists() and pidfile.read_text().strip():
            raise KeyboardInterrupt
        signal.setitimer(signal.ITIMER_REAL, 0.05)

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            proc.run(
                ["sh", "-c", 'sleep 100 & echo $! > "$1"; wait', "sh", str(pidfile)],
                timeout_s=30,
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    child = read_pid(pidfile)
    reap_leftovers.append(child)
    assert time.monotonic() - started < 10
    assert wait_gone(child), f"child {child} survived the interrupt"


def test_timeout_returns_even_if_a_process_outside_the_group_holds_the_pipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reap_leftovers: list[int]
) -> None:
    monkeypatch.setattr(proc, "_TERMINATE_GRACE_S", 0.3)
    pidfile = tmp_path / "escaped.pid"
    # setsid moves the child into a session of its own, out of reach of the group kill; it keeps
    # our stdout pipe open, so reading to end of file would never finish.
    script = 'setsid sleep 100 & echo $! > "$1"; wait'
    started = time.monotonic()
    with pytest.raises(proc.CommandTimeout):
        proc.run(["sh", "-c", script, "sh", str(pidfile)], timeout_s=0.5)
    reap_leftovers.append(read_pid(pidfile))
    assert time.monotonic() - started < 3.0


def test_death_by_signal_is_an_error_even_with_every_exit_code_allowed() -> None:
    # Python reports a signal death as a negative code, which no range(256) of ok_codes admits.
    with pytest.raises(proc.CommandError) as info:
        proc.run(["sh", "-c", "kill -KILL $$"], timeout_s=10, ok_codes=range(256))
    assert info.value.returncode == -signal.SIGKILL
    assert str(info.value) == "sh -c 'kill -KILL $$': exited with status -9"


class _Hung(Exception):
    """Raised by a watchdog alarm when proc.run blocks past its own timeout."""


@pytest.mark.parametrize("to_file", [False, True])
def test_timeout_holds_when_the_child_never_reads_a_large_input(
    to_file: bool, tmp_path: Path
) -> None:
    def hung(_signum: int, _frame: FrameType | None) -> None:
        raise _Hung

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    started = time.monotonic()
    try:
        with pytest.raises(proc.CommandTimeout):
            proc.run(
                ["sleep", "100"],
                timeout_s=0.5,
                # More than a pipe holds (64 KiB): writing it all blocks until the child reads.
                input_text="x" * (1 << 20),
                output_file=tmp_path / "console.log" if to_file else None,
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 3.0


def test_log_copy_outlived_by_an_escaped_process_closes_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reap_leftovers: list[int]
) -> None:
    monkeypatch.setattr(proc, "_TERMINATE_GRACE_S", 0.3)
    pidfile = tmp_path / "escaped.pid"
    log = tmp_path / "console.log"
    script = 'setsid sleep 100 & echo $! > "$1"; echo up; wait'
    with pytest.raises(proc.CommandTimeout):
        proc.run(["sh", "-c", script, "sh", str(pidfile)], timeout_s=0.5, output_file=log)
    escaped = read_pid(pidfile)
    reap_leftovers.append(escaped)
    os.kill(escaped, signal.SIGKILL)
    # The copier sees end of file once the last holder of the pipe is gone, and must close the
    # pipe and the log itself: run() stopped waiting for it (an unclosed file is a
    # ResourceWarning, an error here).
    deadline = time.monotonic() + 5
    while any("_copy_to_file" in t.name for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the log copier never finished"
        time.sleep(0.02)
    gc.collect()
    assert log.read_text() == "up\n"


def test_a_line_reader_that_raises_never_stops_the_console_being_drained(tmp_path: Path) -> None:
    """The A/A hang: a reader raised on the first workload line, the copy thread died, and once
    the pipe filled (64 KiB) the child blocked writing forever. Here the reader raises on every
    line of 1 MiB of output: the child still finishes, every byte reaches the log, and the log
    says once that the reader failed."""
    seen: list[str] = []

    def reader(line: str) -> None:
        seen.append(line)
        raise FileNotFoundError("no such folder")

    log = tmp_path / "console.log"
    script = (
        "import sys\nfor i in range(16384): sys.stdout.write(f'line {i:06d} ' + 'x' * 52 + '\\n')"
    )
    done = proc.run([sys.executable, "-c", script], timeout_s=60, output_file=log, on_line=reader)
    assert done.returncode == 0
    text = log.read_text()
    assert text.count("\nline ") + text.startswith("line ") == 16384
    assert text.count("a console line reader failed (FileNotFoundError: no such folder)") == 1
    # Every line was still handed to the reader.
    assert len(seen) == 16384


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent has not reaped it yet).
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False


def test_a_command_dies_with_its_parent_even_a_sigkilled_one(tmp_path: Path) -> None:
    """QEMU under vng outlived a SIGKILLed iomatrix. With die_with_parent, a grandchild of the
    command (as QEMU is vng's) is gone within seconds of its iomatrix being killed."""
    pidfile = tmp_path / "pid"
    script = (
        "from iomatrix import proc\n"
        f"proc.run(['sh', '-c', 'sleep 600 & echo $! > {pidfile}; wait'], timeout_s=600,"
        " die_with_parent=True)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    assert _alive(grandchild)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 15
    while _alive(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived its killed parent"
        time.sleep(0.1)


def test_the_reaper_keeps_the_commands_status_and_output() -> None:
    done = proc.run(
        [sys.executable, "-c", "print('hi'); raise SystemExit(3)"],
        timeout_s=30,
        ok_codes=(3,),
        die_with_parent=True,
    )
    assert (done.returncode, done.stdout) == (3, "hi\n")
    killed = proc.run(
        ["sh", "-c", "kill -9 $$"], timeout_s=30, ok_codes=range(-64, 256), die_with_parent=True
    )
    assert killed.returncode == -9


def test_a_detached_command_runs_on_in_its_own_session_without_our_pipes(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = (
        "import os, sys\n"
        f"open({str(seen)!r}, 'w').write("
        "f'{os.getsid(0)} {os.getpid()} {os.readlink(\"/proc/self/fd/1\")}')\n"
    )
    detached = proc.start_detached([PY, "-c", script])
    assert detached.argv == (PY, "-c", script)
    assert detached.wait(60) == 0
    sid, pid, stdout = seen.read_text().split(" ")
    assert sid == pid == str(detached.pid)
    assert stdout == "/dev/null"


def test_a_detached_command_still_running_is_not_waited_for_past_the_timeout() -> None:
    detached = proc.start_detached([PY, "-c", "import time; time.sleep(60)"])
    try:
        assert detached.wait(0.1) is None
        assert detached.poll() is None
    finally:
        os.kill(detached.pid, signal.SIGKILL)
        assert detached.wait(60) == -signal.SIGKILL


def test_a_detached_program_that_does_not_exist_is_a_command_error(tmp_path: Path) -> None:
    with pytest.raises(proc.CommandError, match="cannot start"):
        proc.start_detached([str(tmp_path / "no-such-program")])
