"""The README's pictures: a screenshot of report pages, taken in the same headless chromium the
browser tests use (tests/support/browser.py), refusing a page that logs an error.

    PYTHONPATH=tests .venv/bin/python tools/readme_pictures.py OUT_DIR PAGE[#ID]=NAME[:HEIGHT]...

Each PAGE (an HTML file of a report) is opened at 1280 pixels wide; with #ID the element of that
id is scrolled to the top first; NAME.png in OUT_DIR is the window's picture, HEIGHT pixels high
(default 900). README.md says from which runs the pictures in docs/pictures/ were made.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path
from typing import cast

from support.browser import Browser, start


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    # start() is a generator (the test fixture's): closing it quits the browser.
    session = cast(Generator[Browser, None, None], start())
    browser = next(session)
    try:
        for spec in argv[1:]:
            page_part, _, name_part = spec.partition("=")
            page, _, anchor = page_part.partition("#")
            name, _, height = name_part.partition(":")
            errors = browser.load(Path(page))
            if errors:
                print(f"{page}: the browser logged errors: {errors}", file=sys.stderr)
                return 1
            browser.driver.set_window_size(1280, int(height or 900))
            if anchor:
                browser.run("document.getElementById(arguments[0]).scrollIntoView(true)", anchor)
            target = out / f"{name}.png"
            browser.driver.save_screenshot(str(target))
            print(target)
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
