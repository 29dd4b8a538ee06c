"""The README's first experiment (matrix/examples/first-experiment.yaml) is a matrix that works:
`iomatrix validate` accepts it, it expands to the two cells the README describes, and the A/B
split the README runs (`iomatrix ab FILE --split mount_options`) pairs them. Every matrix under
matrix/examples/ is held to validate. No VM boots here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.analysis import stats
from iomatrix.cli import main as cli
from iomatrix.matrix.loader import load_matrix
from iomatrix.plan.ab import pair_cells, split_matrix
from support.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "matrix" / "examples"
FIRST = EXAMPLES / "first-experiment.yaml"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_matrix_validates(path: Path) -> None:
    assert cli.main(["validate", str(path)]) == 0


def test_the_first_experiment_is_two_mount_option_sets_on_one_filesystem() -> None:
    matrix = load_matrix(FIRST)
    axes = [cell.axis_values() for cell in matrix.cells]
    assert [a["mount_options"] for a in axes] == ["default", "lazytime"]
    assert {a["filesystem"] for a in axes} == {"ext4"}
    # Repetitions enough for the comparison to decide (with fewer, a rank test never can: the
    # gate's one rule, and one more for some power).
    assert all(cell.repeat > stats.minimum_n_per_side(0.05) for cell in matrix.cells)


def test_the_first_experiments_ab_split_pairs_its_two_cells() -> None:
    base, new, base_value, new_value = split_matrix(load_matrix(FIRST), "mount_options")
    assert (base_value, new_value) == ("default", "lazytime")
    assert len(pair_cells(base, new, split_axis="mount_options")) == 1


def test_the_readme_runs_the_first_experiment() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    name = FIRST.relative_to(REPO_ROOT).as_posix()
    assert f"iomatrix validate {name}" in readme
    assert f"iomatrix ab {name} --split mount_options" in readme


def test_the_readmes_copy_of_the_first_experiment_is_the_file() -> None:
    # The README shows the matrix without its header comment; the two must not drift apart.
    readme = (REPO_ROOT / "README.md").read_text()
    shown = readme.split("```yaml\n", 1)[1].split("```\n", 1)[0]
    lines = FIRST.read_text().splitlines(keepends=True)
    assert shown == "".join(line for line in lines if not line.startswith("#"))
