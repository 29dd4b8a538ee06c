"""The guest agent's start, as the VM runs it, by path:
`python3 -S -P .../iomatrix/guest/start.py [--bundle FILE] PLAN.json` (host/vm/vng.py).

Over the shared root every import is a chain of round trips to the host under an emulated CPU
(a stat of each folder on the path, the source's stat, the bytecode's open, read and close):
the agent's ~120 modules took 2.2-3 s to import over 9p against 0.54 s from the guest's tmpfs
(2026-11-27, the same interpreter and files). So the host hands the agent a bundle
(guest/bundle.py builds it, host/vm/agent_bundle.py keeps it current): the code of those modules
in one file, read in one go; BundleFinder serves them from memory, ahead of the path. A module
not in the bundle (one only some cells import, or a bundle that could not be built or read) is
imported from the shared root as before, so a bundle can only make the start faster.

Run by path rather than `-m iomatrix.guest`: runpy's own imports (importlib.util, contextlib,
warnings ...) would come over 9p before any bundle could serve them. `-P` keeps this script's
folder off sys.path. Standard library only, as all of the guest side.
"""

from __future__ import annotations

import marshal
import sys

# The import system's own modules, loaded with the interpreter: importlib.machinery and
# importlib.util are the same objects, but importing them reads importlib/__init__.py, warnings
# (and for util contextlib, functools, types) from the shared root before the bundle is in place.
from _frozen_importlib import ModuleSpec
from _frozen_importlib_external import MAGIC_NUMBER, PathFinder

# typing.TYPE_CHECKING without importing typing (from the shared root, before the bundle).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

# What guest/bundle.py writes: (BUNDLE_FORMAT, the interpreter's bytecode magic, modules), each
# module's name -> (is a package, its path in the guest, its code marshalled alone).
BUNDLE_FORMAT = 1
BundleModules = dict[str, "tuple[bool, str, bytes]"]


class BundleFinder:
    """Finds and loads the bundle's modules, each from its own marshalled code when imported.

    A module keeps its own path as its __file__ (the shared root's, where the same source is),
    so tracebacks, __file__ and a package's __path__ (for its submodules not in the bundle) are
    what they would be from the shared root."""

    def __init__(self, modules: BundleModules) -> None:
        self._modules = modules
        self.served = 0

    # The meta path finder's and loader's protocols: `path`, `target` and `spec` go unused.
    def find_spec(
        self,
        name: str,
        path: Sequence[str] | None = None,  # noqa: ARG002
        target: ModuleType | None = None,  # noqa: ARG002
    ) -> ModuleSpec | None:
        entry = self._modules.get(name)
        if entry is None:
            return None
        is_package, origin, _code = entry
        # A loader by its methods: importlib.abc.Loader, its nominal type, would be one more import.
        spec = ModuleSpec(name, self, origin=origin, is_package=is_package)  # type: ignore[arg-type]
        spec.has_location = True
        if is_package:
            spec.submodule_search_locations = [origin.rpartition("/")[0]]
        return spec

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:  # noqa: ARG002
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        _is_package, _origin, code = self._modules[module.__name__]
        self.served += 1
        # The host wrote the bundle from this package's own sources into the guest's read-only
        # input: it is the code the shared root holds, compiled.
        exec(marshal.loads(code), module.__dict__)  # noqa: S102, S302


def read_bundle(path: str, magic: bytes) -> BundleModules | str:
    """The bundle's modules, or why it cannot be used (unreadable, another format, or bytecode
    of another interpreter: its code objects would not load)."""
    try:
        with open(path, "rb") as handle:  # noqa: PTH123 - pathlib is itself one of the imports
            loaded: object = marshal.loads(handle.read())  # noqa: S302 - as exec_module's
    except (OSError, EOFError, ValueError, TypeError) as exc:
        return f"unreadable ({exc})"
    if not (isinstance(loaded, tuple) and len(loaded) == 3 and isinstance(loaded[2], dict)):
        return "not a bundle"
    fmt, bundle_magic, modules = loaded
    if fmt != BUNDLE_FORMAT:
        return f"format {fmt!r}, this agent reads {BUNDLE_FORMAT}"
    if bundle_magic != magic:
        return "bytecode of another Python"
    checked: BundleModules = modules
    return checked


def install(path: str) -> BundleFinder | str:
    """The bundle at `path` put ahead of the path finder; why not, when it cannot be."""
    modules = read_bundle(path, MAGIC_NUMBER)
    if isinstance(modules, str):
        return modules
    finder = BundleFinder(modules)
    sys.meta_path.insert(sys.meta_path.index(PathFinder), finder)
    return finder


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    installed: BundleFinder | str | None = None
    if len(args) >= 2 and args[0] == "--bundle":
        installed = install(args[1])
        args = args[2:]
    from iomatrix.guest.agent import main as agent_main  # noqa: PLC0415 - after the bundle

    if isinstance(installed, BundleFinder):
        print(f"iomatrix-agent: {installed.served} modules from its bundle", flush=True)
    elif installed is not None:
        print(f"iomatrix-agent: bundle not used: {installed}", flush=True)
    return agent_main(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
