"""Files the guest (or a matrix's author) wrote are read as hostile: a link is not followed, a
FIFO does not block, a huge or deeply nested file is refused, and a bad one fails its cell with a
reason instead of crashing or hanging the host (issue 25's guest-written files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.analysis.triage import parse_triage
from iomatrix.errors import IomatrixError, ResultFormatError
from iomatrix.host.vm import cell_results, console, host_disks
from iomatrix.store import files, records_io, rundir
from iomatrix.store.records_io import finished_repetitions, load_cell_result
from iomatrix.store.results import append_canaries, read_alerts, read_canaries, read_triage
from support.builders import make_cell


def test_a_result_nested_100000_deep_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ResultFormatError, match="nested deeper than 64"):
        load_cell_result(path)


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    assert not files.json_depth_exceeds('{"a": "' + "[" * 1000 + '\\"]"}')
    assert files.json_depth_exceeds("[" * 65 + "]" * 65)
    assert not files.json_depth_exceeds("[" * 64 + "]" * 64)


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    os.mkfifo(path)
    with pytest.raises(ResultFormatError, match="not a regular file"):
        load_cell_result(path)


def test_a_link_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"format": 1, "cell_id": "x", "status": "ok"}')
    path = tmp_path / "result.json"
    path.symlink_to(secret)
    with pytest.raises(ResultFormatError, match="symbolic link"):
        load_cell_result(path)


def test_a_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2048)
    with pytest.raises(files.UntrustedFileError, match="over the 1024-byte limit"):
        files.read_untrusted(path, max_bytes=1024)
    # A log's end is what explains a dead VM: with tail, the last bytes of a larger file.
    path.write_bytes(b"a" * 2000 + b"Kernel panic")
    assert files.read_untrusted(path, max_bytes=12, tail=True) == b"Kernel panic"


def test_an_invalid_repetition_fails_its_cell_naming_the_file(tmp_path: Path) -> None:
    cell = make_cell()
    folder = rundir.cell_dir(tmp_path, cell.id)
    folder.mkdir(parents=True)
    rundir.rep_path(folder, 0).write_text('{"applied": 1}')
    with pytest.raises(ResultFormatError, match="not a repetition record"):
        finished_repetitions(folder, 1)
    result = cell_results.host_side_result(tmp_path, cell, "error", "the guest kernel panicked")
    assert result.status == "error"
    assert result.reason is not None
    assert "the guest kernel panicked; and " in result.reason
    assert "rep-0.json: not a repetition record" in result.reason


def test_a_planted_host_view_is_left_out(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "host-disks-000.json")
    (tmp_path / "host-disks-001.json").write_text("[" * 5000)
    assert host_disks._read(tmp_path, 0) == []
    assert host_disks._read(tmp_path, 1) == []


def test_a_console_log_planted_as_a_link_is_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.pth"
    outside.write_text("")
    log = tmp_path / "console-1.log"
    log.symlink_to(outside)
    with pytest.raises(proc.CommandError, match="cannot open its log"):
        proc.run(["echo", "import os; os.system('id')"], timeout_s=10, output_file=log)
    assert outside.read_text() == ""
    fifo = tmp_path / "console-2.log"
    os.mkfifo(fifo)
    with pytest.raises(proc.CommandError):
        proc.run(["echo", "x"], timeout_s=10, output_file=fifo)
    # The host's own excerpt of a planted log: nothing, no hang.
    assert console.console_excerpt(fifo) == ""
    assert not console.console_shows_panic(log)


def test_copying_a_guest_folder_out_takes_regular_files_only(tmp_path: Path) -> None:
    """The guest's cell folder copied into the run folder: regular files with the agent's names
    whole (a 3 MiB one read in pieces), links, FIFOs, folders and odd names left behind and
    said, and a folder the guest replaced by a link refused."""
    guest = tmp_path / "guest"
    cell = guest / "side" / "cells" / "c1"
    cell.mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("host secret\n")
    (cell / "rep-0.fio.json").write_bytes(b"x" * (3 << 20))
    (cell / "result.json").write_text("{}\n")
    (cell / "rep-1.json").symlink_to(secret)
    os.mkfifo(cell / "rep-2.json")
    (cell / "sub").mkdir()
    (cell / ".hidden").write_text("no\n")
    target = tmp_path / "run" / "cells" / "c1"
    problems = files.copy_untrusted_folder(guest, ["side", "cells", "c1"], target)
    assert sorted(p.name for p in target.iterdir()) == ["rep-0.fio.json", "result.json"]
    assert (target / "rep-0.fio.json").stat().st_size == 3 << 20
    assert len(problems) == 4, problems
    # A folder on the way replaced by a link to elsewhere: nothing copied, said once.
    (guest / "evil").symlink_to(secret.parent)
    assert files.copy_untrusted_folder(guest, ["evil"], tmp_path / "x") != []
    assert not (tmp_path / "x").exists()
    # A folder the guest never made: nothing to copy, nothing to say.
    assert files.copy_untrusted_folder(guest, ["none", "cells", "c9"], tmp_path / "y") == []


def test_a_ledger_in_a_results_folder_is_read_as_someone_elses_file(tmp_path: Path) -> None:
    # The triage file and the ledgers live on a results branch or come in a pull request: a
    # link to a host file, a FIFO or a huge file is refused naming it, never read or waited on.
    missing = tmp_path / "triage.yaml"
    assert read_triage(missing) is None
    missing.write_text("- run: x\n")
    assert read_triage(missing) == "- run: x\n"
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    link = tmp_path / "alerts.json"
    link.symlink_to(secret)
    with pytest.raises(IomatrixError, match=r"alerts\.json: cannot read the alert ledger: is a"):
        read_alerts(link)
    fifo = tmp_path / "canaries.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(IomatrixError, match="canary ledger: is not a regular file"):
        read_canaries(fifo)
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(IomatrixError, match="is a symbolic link"):
        read_triage(dangling)
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(IomatrixError, match="over the 1024-byte limit"):
        files.read_text_if_present(big, what="ledger", max_bytes=1024)


def test_a_canary_ledger_planted_as_a_link_or_fifo_is_never_appended_through(
    tmp_path: Path,
) -> None:
    # Issue 43: a results branch's canaries.jsonl committed as a link made the nightly append
    # to a file outside its worktree. Seen appended through before the append opened the ledger
    # without following a link.
    outside = tmp_path / "outside.txt"
    outside.write_text("the runner's file\n")
    link = tmp_path / "canaries.jsonl"
    link.symlink_to(outside)
    with pytest.raises(IomatrixError, match=r"canaries\.jsonl: cannot append .*symbolic link"):
        append_canaries(link, '{"kind": "aa"}\n')
    assert outside.read_text() == "the runner's file\n"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(IomatrixError, match="cannot append"):
        append_canaries(fifo, "{}\n")  # no reader: refused at once, never waited on
    ledger = tmp_path / "ledger" / "canaries.jsonl"
    append_canaries(ledger, "a\n")
    append_canaries(ledger, "b\n")
    assert ledger.read_text() == "a\nb\n"


def test_a_triage_file_nested_without_end_is_an_error_naming_it(tmp_path: Path) -> None:
    # PyYAML recurses once per level: [[[...]]] 5,000 deep was a RecursionError out of the
    # nightly's trend, not an error naming the file.
    where = tmp_path / "triage.yaml"
    with pytest.raises(IomatrixError, match=r"triage\.yaml: not a triage file: nested too deeply"):
        parse_triage("[" * 5000 + "]" * 5000, where)


def test_a_large_guest_json_is_refused_by_its_size_before_a_byte_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 62 MiB result.json (the bound was 64 MiB) cost about 10 s of host CPU on every read:
    show, report, an index rebuild. Guest JSON is now refused by fstat's size, before it is
    read, checked or parsed; the bound is far above what real results hold."""
    cell = make_cell()
    folder = rundir.cell_dir(tmp_path, cell.id)
    folder.mkdir(parents=True)
    numbers = b"[" + b"0," * (31 * 1024 * 1024) + b"0]"  # 62 MiB of tokens: under the old bound
    head = b'{"format": 1, "cell_id": "%s", "status": "ok", "x": ' % cell.id.encode()
    result, rep = rundir.cell_result(folder), rundir.rep_path(folder, 0)
    result.write_bytes(head + numbers + b"}")
    rep.write_bytes(b'{"repetition": ' + numbers + b"}")

    def parsed(*_args: object, **_kwargs: object) -> object:
        raise AssertionError("a file over the bound was parsed")

    monkeypatch.setattr("json.loads", parsed)
    monkeypatch.setattr(files, "json_depth_exceeds", parsed)
    with pytest.raises(ResultFormatError, match="-byte limit") as refused:
        load_cell_result(result)
    with pytest.raises(ResultFormatError, match="-byte limit"):
        finished_repetitions(folder, 1)
    limit = records_io.MAX_GUEST_JSON_BYTES
    assert f"over the {limit}-byte limit" in str(refused.value)
    # Far above the largest real ones (12 KB a repetition here; 116 KB for 4 fio jobs' json+).
    assert limit >= 4 * 1024 * 1024


def test_the_depth_check_reads_strings_and_escapes_as_json_does() -> None:
    deep = "[" * 65 + "]" * 65
    for text, exceeds in [
        (deep, True),
        ('{"a": "' + deep + '"}', False),
        ('["\\\\"' + "[" * 70, True),  # an escaped backslash ends the string before the brackets
        ('["\\"' + "[" * 70 + '"]', False),  # an escaped quote does not
        ('{"ü": ' + "[" * 64 + "]" * 64 + "}", True),
        ("", False),
    ]:
        assert files.json_depth_exceeds(text) is exceeds, text
        assert files.json_depth_exceeds(text.encode()) is exceeds, text
