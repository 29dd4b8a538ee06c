"""Sample outputs in the docs are what the tool printed in a real run (issue 27): each block marked
`<!-- sample: NAME -->` holds docs/samples/NAME.txt exactly, and that file was written by
tools/doc_samples.py (its header names the command, the date and the machine)."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

from support.paths import REPO_ROOT


def doc_samples() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "doc_samples", REPO_ROOT / "tools" / "doc_samples.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_samples"] = module
    spec.loader.exec_module(module)
    return module


def test_every_sample_in_the_docs_is_the_stored_output_of_a_real_run() -> None:
    samples = doc_samples()
    used = set()
    for page in samples.pages():
        text = page.read_text()
        used |= {m["name"] for m in samples.BLOCK.finditer(text)}
        # Filling the page from the stored samples changes nothing: no block was edited by hand.
        assert samples.fill(text) == text, f"{page}: run tools/doc_samples.py (make samples)"
    assert used == set(samples.COMMANDS), used
    for name, argv in samples.COMMANDS.items():
        first = (samples.SAMPLES / f"{name}.txt").read_text().splitlines()[0]
        assert first.startswith(f"$ iomatrix {argv[0]} "), first
        assert re.search(r"# 20\d\d-\d\d-\d\d, .+, \d+ cores, COLUMNS=", first), first


def test_a_block_edited_by_hand_is_found() -> None:
    samples = doc_samples()
    name = next(iter(samples.COMMANDS))
    page = f"<!-- sample: {name} -->\n```\nlaid out by hand\n```\n"
    assert samples.fill(page) != page
    assert samples.fill(samples.fill(page)) == samples.fill(page)


def test_a_samples_folder_is_shown_as_results_and_its_link_as_an_absolute_placeholder() -> None:
    samples = doc_samples()
    for name in samples.COMMANDS:
        text = (samples.SAMPLES / f"{name}.txt").read_text()
        assert "iomatrix-sample-" not in text, name  # the temporary folder never shows
        for link in re.findall(r"file://\S+", text):
            assert link.startswith(samples.SHOWN_URI + "/"), (name, link)
