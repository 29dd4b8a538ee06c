"""The agent's start-up bundle (guest/start.py reads it): the code of every module the agent
imports at its start, compiled by the guest root's own interpreter, in one file.

Run on the host by that interpreter (host/vm/agent_bundle.py), never in the guest:

  python3 -S -P -m iomatrix.guest.bundle OUT GUEST_HARNESS ROOT

It imports the agent and every module of iomatrix.guest, as the guest would, then compiles the
source of each module it found in the package or under ROOT (the guest's root, where this
interpreter's standard library is), named by its path in the guest (GUEST_HARNESS for the
package, / for the root), so a traceback in the guest reads as it would without a bundle.
Built-in, frozen and extension modules stay out: the interpreter has the first two, and the
guest loads the third (.so files) from its root as before.
"""

from __future__ import annotations

import importlib
import marshal
import os
import pkgutil
import sys
from _frozen_importlib_external import MAGIC_NUMBER
from pathlib import Path

from iomatrix.guest.start import BUNDLE_FORMAT, BundleModules


def guest_path(origin: str, package_parent: str, guest_harness: str, root: str) -> str | None:
    """Where the guest finds the file at `origin` (a path on the host); None: it does not.
    `package_parent` and `root` are real paths (no link in them)."""
    real = os.path.realpath(origin)
    for host, guest in ((package_parent, guest_harness), (root, "")):
        if real.startswith(host.rstrip("/") + "/"):
            return guest.rstrip("/") + real[len(host.rstrip("/")) :]
    return None


def collect(package_parent: str, guest_harness: str, root: str) -> BundleModules:
    """The bundle's modules: the agent's and iomatrix.guest's imports, compiled."""
    import iomatrix.guest  # noqa: PLC0415 - what is imported is what the bundle holds
    import iomatrix.guest.agent  # noqa: PLC0415

    for info in pkgutil.iter_modules(iomatrix.guest.__path__, "iomatrix.guest."):
        if info.name not in {"iomatrix.guest.__main__", "iomatrix.guest.bundle"}:
            importlib.import_module(info.name)
    modules: BundleModules = {}
    for name, module in sorted(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if spec is None or not spec.has_location or not str(origin).endswith(".py"):
            continue  # built-in, frozen, an extension, or not from a file
        if spec.name != name:
            continue  # this builder, run as __main__
        where = guest_path(str(origin), package_parent, guest_harness, root)
        if where is None:
            continue
        source = Path(str(origin)).read_bytes()
        code = compile(source, where, "exec", dont_inherit=True)
        modules[name] = (spec.submodule_search_locations is not None, where, marshal.dumps(code))
    return modules


def write(out: Path, modules: BundleModules) -> None:
    """The bundle written whole or not at all."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_bytes(marshal.dumps((BUNDLE_FORMAT, MAGIC_NUMBER, modules)))
    tmp.replace(out)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m iomatrix.guest.bundle OUT GUEST_HARNESS ROOT", file=sys.stderr)
        return 2
    out, guest_harness, root = argv
    package_parent = str(Path(__file__).resolve().parent.parent.parent)
    modules = collect(package_parent, guest_harness, os.path.realpath(root))
    write(Path(out), modules)
    print(f"{len(modules)} modules")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
