"""YAML safety and file handling: aliases, anchors, merge keys, duplicate keys, tags, sizes,
encodings, and every error collected at once."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path

import pytest
import yaml

from iomatrix.errors import MatrixError
from iomatrix.model.cell import VmSettings
from iomatrix.model.units import MIB
from support.matrix_files import (
    FULL_SID,
    _NoAliasDumper,
    base_doc,
    doc_errors,
    dump,
    errors_of,
    fruit_doc,
    load_doc,
    with_matrix,
)

# --- YAML safety and file handling ------------------------------------------------------------

GOOD_YAML = yaml.dump(base_doc(), Dumper=_NoAliasDumper, sort_keys=False)


NEXT_LINE = len(GOOD_YAML.splitlines()) + 1


def yaml_error(ws: Path, text: str) -> MatrixError:
    path = ws / "m.yaml"
    path.write_text(text)
    [error] = errors_of(path)
    assert error.file == str(path)
    assert error.field == ""
    return error


def test_aliases_are_refused(ws: Path) -> None:
    text = GOOD_YAML + "description: *name\n"
    assert yaml_error(ws, text).reason == (
        f"invalid YAML: yaml aliases are not allowed: *name at line {NEXT_LINE}"
    )


def test_anchors_are_refused(ws: Path) -> None:
    text = textwrap.dedent(
        """\
        format: 1
        devices:
          small: &dev {size: 1GiB}
          big: *dev
        """
    )
    assert yaml_error(ws, text).reason == (
        "invalid YAML: yaml aliases are not allowed: anchor &dev at line 3"
    )


def test_billion_laughs_is_refused(ws: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    reason = yaml_error(ws, "format: 1\n" + "\n".join(lines) + "\n").reason
    assert reason == "invalid YAML: yaml aliases are not allowed: anchor &a0 at line 2"


def test_merge_keys_are_refused(ws: Path) -> None:
    text = "format: 1\ndevices:\n  small:\n    <<: {size: 1GiB}\n"
    assert (
        yaml_error(ws, text).reason == "invalid YAML: yaml merge keys (<<) are not allowed: line 4"
    )


def test_duplicate_keys_are_refused(ws: Path) -> None:
    text = GOOD_YAML + "format: 1\n"
    assert yaml_error(ws, text).reason == (
        f"invalid YAML: duplicate key 'format' at line {NEXT_LINE} (first at line 1)"
    )


def test_python_tags_do_nothing(ws: Path) -> None:
    marker = ws / "pwned"
    text = GOOD_YAML + f'description: !!python/object/apply:os.system ["touch {marker}"]\n'
    assert yaml_error(ws, text).reason.startswith("invalid YAML: could not determine a constructor")
    assert not marker.exists()


def test_files_over_1_mib_are_refused_unread(ws: Path) -> None:
    text = GOOD_YAML + "#" * MIB + "\n"
    assert yaml_error(ws, text).reason == (
        f"cannot use the file: {len(text)} bytes is more than the limit of 1 MiB"
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the file is empty; expected a mapping with format: 1"),
        ("# only a comment\n", "the file is empty; expected a mapping with format: 1"),
        ("- format: 1\n", "expected a mapping at the top level, not list"),
        ("format: 1\nmatrix: [\n", "invalid YAML: while parsing a flow"),
        ("format: 1\n\tmatrix: {}\n", "invalid YAML: "),
        ("[" * 20000 + "]" * 20000, "invalid YAML: nested too deeply"),
        ("repeat: " + "9" * 5000 + "\n", "invalid YAML: "),
        ("format: 1\n? [a]\n: b\n", "invalid YAML: "),
    ],
)
def test_unusable_yaml(ws: Path, text: str, reason: str) -> None:
    assert yaml_error(ws, text).reason.startswith(reason)


def test_a_yaml_syntax_error_names_the_file_not_a_byte_string(ws: Path) -> None:
    """PyYAML marks its errors `in "<byte string>"` (it parsed bytes): the reason names the
    matrix file as it was given, at the line and column of the problem."""
    reason = yaml_error(ws, "format: 1\nname: x\nmatrix: [a, b\n").reason
    assert "<byte string>" not in reason
    assert f'in "{ws / "m.yaml"}", line 3, column 9' in reason


def test_non_utf8_is_refused(ws: Path) -> None:
    path = ws / "m.yaml"
    path.write_bytes(b"format: 1\nname: \xff\xfe\n")
    [error] = errors_of(path)
    assert error.reason.startswith("invalid YAML: ")


def test_missing_file_and_directory(ws: Path) -> None:
    [error] = errors_of(ws / "nope.yaml")
    assert error == MatrixError(
        str(ws / "nope.yaml"), "", "cannot read the file: No such file or directory"
    )
    [error] = errors_of(ws)
    assert error == MatrixError(str(ws), "", "cannot use the file: not a regular file")


def test_errors_are_collected_not_stopped_at_the_first(ws: Path) -> None:
    doc = base_doc()
    doc["colour"] = "red"
    doc["devices"]["small"]["bus"] = "ide"
    doc["matrix"]["scheduler"] = ["cfq"]
    doc["matrix"]["kernel"] = ["debian:potato"]
    # schema errors come in schema order, unknown fields last
    assert [e.field for e in doc_errors(ws, doc)] == [
        "devices.small.bus",
        "matrix.kernel[0]",
        "matrix.scheduler[0]",
        "colour",
    ]
    doc = with_matrix(device=["huge"], workload=["nope"], mount_options={"xfs": ["ro"]})
    assert [e.field for e in doc_errors(ws, doc)] == [
        "matrix.mount_options.xfs",
        "matrix.device[0]",
        "matrix.workload[0]",
    ]


def test_null_means_not_given(ws: Path) -> None:
    doc = base_doc()
    doc |= {"vm": None, "timeouts": None, "description": None}
    doc["matrix"]["mount_options"] = None
    m = load_doc(ws, doc)
    assert m.vm == VmSettings()
    assert len(m.cells) == 1


def test_the_document_is_not_modified_by_copying(ws: Path) -> None:
    # dump() must not share objects, or the file would contain aliases
    doc = fruit_doc()
    doc["matrix"]["include"] = [copy.deepcopy(FULL_SID)] * 2
    assert "&" not in dump(ws / "m.yaml", doc).read_text()
