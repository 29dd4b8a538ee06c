"""A real headless browser for the report's tests: Debian's chromium through its chromedriver
(selenium with the driver's path given, so nothing is downloaded).

`load` opens a page from file:// and returns what the browser logged as errors (a script's
exception, an SVG attribute it could not parse, a resource it could not load); `charts` reads
every chart as the browser laid it out; `screenshot` keeps a picture of the page as a test
artifact (under $IOMATRIX_ARTIFACTS, default .artifacts/ in the repository).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from support.paths import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("IOMATRIX_ARTIFACTS", REPO_ROOT / ".artifacts")) / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass(frozen=True)
class Chart:
    """A chart as the browser drew it: its kind, the points it claims, its marks and size."""

    kind: str
    points: int
    marks: int
    lines: int
    width: float
    height: float


# Every chart's kind, data-points, the marks and lines inside it, and its laid-out size.
_CHARTS_JS = """
return Array.from(document.querySelectorAll('svg.chart')).map(function(svg){
  var box = svg.getBoundingClientRect();
  return [svg.getAttribute('data-kind'), parseInt(svg.getAttribute('data-points')),
          svg.querySelectorAll('.mark').length, svg.querySelectorAll('polyline.series').length,
          box.width, box.height];
});
"""


class Browser:
    def __init__(self, driver: webdriver.Chrome) -> None:
        self.driver = driver

    def load(self, page: Path) -> list[str]:
        """Open the page; the errors the browser logged while loading it."""
        self.driver.get(page.resolve().as_uri())
        # get_log is chromium's own command (selenium leaves it untyped).
        get_log = cast(Callable[[str], list[dict[str, Any]]], self.driver.get_log)
        logs = get_log("browser")
        return [str(entry["message"]) for entry in logs if entry.get("level") == "SEVERE"]

    def run(self, script: str, *args: object) -> Any:
        return self.driver.execute_script(script, *args)

    def charts(self) -> list[Chart]:
        rows = cast(list[list[Any]], self.run(_CHARTS_JS))
        return [
            Chart(str(k), int(p), int(m), int(n), float(w), float(h)) for k, p, m, n, w, h in rows
        ]

    def visible(self, selector: str) -> int:
        """How many elements matching the selector the browser lays out (an element hidden
        itself or inside a hidden one has no boxes)."""
        return int(
            self.run(
                "return Array.from(document.querySelectorAll(arguments[0]))"
                ".filter(function(e){return e.getClientRects().length > 0}).length",
                selector,
            )
        )

    def unfold(self) -> None:
        """Open every folded section (<details>), as a reader clicking each would."""
        self.run("document.querySelectorAll('details').forEach(function(d){d.open = true})")

    def set_viewport(self, width: int, height: int) -> None:
        """The page's viewport exactly this size (the window's would include its chrome), at the
        top of the page; reset_viewport undoes it."""
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.run("window.scrollTo(0, 0)")

    def reset_viewport(self) -> None:
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    def on_first_screen(self, selector: str) -> list[str]:
        """The text of the elements matching the selector that lie wholly inside the viewport
        as the page opens (scrolled to the top), and are laid out."""
        return list(
            self.run(
                "window.scrollTo(0, 0);"
                "return Array.from(document.querySelectorAll(arguments[0])).filter(function(e){"
                "var r = e.getBoundingClientRect();"
                "return e.getClientRects().length > 0 && r.top >= 0"
                " && r.bottom <= window.innerHeight && r.right <= window.innerWidth})"
                ".map(function(e){return e.textContent})",
                selector,
            )
        )

    def scrolls_sideways(self) -> bool:
        """Whether the page itself is wider than its viewport (a box scrolling inside is fine)."""
        return bool(
            self.run("var d = document.documentElement; return d.scrollWidth > d.clientWidth")
        )

    def screenshot(self, name: str) -> Path:
        """The whole page's picture, kept as a test artifact."""
        height = int(self.run("return document.documentElement.scrollHeight"))
        self.driver.set_window_size(1280, min(max(height, 600), 8000))
        path = artifacts_dir() / f"{name}.png"
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(1280, 900)
        return path


def start() -> Iterator[Browser]:
    """A headless chromium for the test session; it fails (never skips) without chromium: `make
    test` installs it (harness/iomatrix/host/debian-packages.txt)."""
    for program in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(program), f"{program} is missing: make test installs it"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # --no-sandbox: tests run as root in CI containers, where chromium's sandbox cannot start.
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield Browser(driver)
    finally:
        driver.quit()
