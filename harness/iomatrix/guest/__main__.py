"""The guest's entry point, as the VM runs it: `python -m iomatrix.guest PLAN.json`.

The agent's start-up is paid at every boot, by the host's interpreter over the shared root under
an emulated CPU, where importing the agent takes about 9 s (TCG, 2026-11-24; 0.15 s natively).
One second of it buys nothing: the first time a pydantic model is built, pydantic imports its
plugin loader, which imports importlib.metadata (and with it zipfile, email, csv ...) to look for
plugins through the installed distributions' entry points. PYDANTIC_DISABLE_PLUGINS (set by the
host's command) skips the look but not the imports. The guest never has plugins, so this entry
answers for the loader before pydantic is imported: the same answer, without the imports.
tests/unit/guest/test_entry.py checks that pydantic still asks this module (a pydantic that
renamed it would fail there, not silently import importlib.metadata again).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable

PLUGIN_LOADER = "pydantic.plugin._loader"


def _no_plugins() -> Iterable[object]:
    return ()


def install_plugin_loader() -> None:
    """Answer pydantic's plugin question with "none" (see the module docstring)."""
    if PLUGIN_LOADER not in sys.modules:
        loader = types.ModuleType(PLUGIN_LOADER)
        loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
        sys.modules[PLUGIN_LOADER] = loader


if __name__ == "__main__":
    install_plugin_loader()
    from iomatrix.guest.agent import main

    raise SystemExit(main())
