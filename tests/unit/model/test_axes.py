"""The axis registry is the one list: every place that spells the axes out (pydantic models need
their fields written) must agree with it, in its order."""

from __future__ import annotations

from iomatrix.matrix.schema import ExcludeSpec, IncludeSpec, MatrixSpec
from iomatrix.model.axes import AXES, REGISTRY, REQUIRED_AXES, TITLES
from iomatrix.model.cell import Cell
from iomatrix.model.knob_keys import KNOB_FAMILIES
from iomatrix.model.schedulers import SCHEDULERS
from iomatrix.report.tables import HEADER
from support.builders import make_cell


def test_the_models_that_spell_the_axes_out_agree_with_the_registry() -> None:
    assert [f for f in Cell.model_fields if f in AXES] == list(AXES)
    every = [*AXES, *KNOB_FAMILIES]
    assert [f for f in MatrixSpec.model_fields if f not in ("exclude", "include")] == every
    assert [f for f in ExcludeSpec.model_fields if f != "repeat"] == every
    assert [f for f in IncludeSpec.model_fields if f != "repeat"] == every
    # The knob axes are optional fields of a cell, after the axes every cell has.
    assert [f for f in Cell.model_fields if f in KNOB_FAMILIES] == list(KNOB_FAMILIES)


def test_tables_and_labels_follow_the_registry() -> None:
    assert HEADER[: len(REGISTRY)] == [TITLES[a] for a in AXES]
    cell = make_cell(fs="xfs", scheduler="kyber")
    assert cell.label == "/".join(cell.axis_values()[a] for a in AXES)
    assert cell.axis_value("filesystem") == "xfs"
    assert cell.axis_value("scheduler") == "kyber"


def test_required_axes_and_fixed_values() -> None:
    assert REQUIRED_AXES == ("kernel", "filesystem", "scheduler", "device", "workload")
    (scheduler,) = [a for a in REGISTRY if a.name == "scheduler"]
    assert scheduler.allowed == SCHEDULERS == ("none", "mq-deadline", "bfq", "kyber")
