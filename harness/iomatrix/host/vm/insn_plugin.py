"""The host's instruction counter: a QEMU TCG plugin (plugin/iomatrix_insns.c) that counts the
instructions each vCPU executes, in the guest kernel and in user space, into a file the host
reads at each workload's start and end (host/vm/qmp.py's HostDiskWatcher).

Debian's QEMU is built with plugin support but ships no plugin and no plugin API header. The
header (include/qemu/qemu-plugin.h, its only dependency besides libc) comes from the Debian
source package of the installed QEMU's own version, downloaded with a project-private apt
configuration (Debian's source indexes, verified with the archive's keys; the host's apt is
never touched), and the plugin is compiled with the host's gcc into the cache:

  <cache>/apt-src/                     the private apt over Debian's source indexes
  <cache>/qemu-plugin/<version>/       qemu-plugin.h, iomatrix_insns.so and build.json (the
                                       sha256 of the plugin's source it was built from)

`make setup` builds it (python -m iomatrix.host.vm.insn_plugin); a run uses it when it is there
and current, and says once when it is not (the instruction metrics are then missing, nothing
else changes). Building takes a 24 MB download and a compile of seconds (not timed on record),
once per QEMU version.
"""

from __future__ import annotations

import json
import os
import re
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from iomatrix import proc
from iomatrix.errors import IomatrixError, KernelError
from iomatrix.host.kernels.cache import cache_root
from iomatrix.host.kernels.mirror import debian_mirror
from iomatrix.host.kernels.private_apt import PrivateApt
from iomatrix.model.kernel_spec import DEBIAN_SUITES
from iomatrix.store import files

# IOMATRIX_INSN_COUNTER=off: boots without the instruction counter.
OFF_ENV = "IOMATRIX_INSN_COUNTER"
PLUGIN_SOURCE = Path(__file__).resolve().parent / "plugin" / "iomatrix_insns.c"
PLUGIN_NAME = "iomatrix_insns.so"
HEADER_NAME = "qemu-plugin.h"
_QEMU_PACKAGE = "qemu-system-x86"
_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
_SOURCE_TIMEOUT_S = 600.0
_TAR_TIMEOUT_S = 120.0
_CC_TIMEOUT_S = 120.0
# The counters file the plugin writes (see the C source): a magic, the vCPU count, then one
# 64-byte slot per vCPU holding the kernel and the user instructions.
MAGIC = b"IOMXINS1"
HEADER_BYTES = 16
SLOT_BYTES = 64
_MAX_VCPUS = 4096


class InsnPluginError(IomatrixError):
    """The instruction counter could not be built or read."""


@dataclass(frozen=True)
class InstalledQemu:
    """The installed QEMU's source package and version (the plugin API is per version)."""

    source: str
    version: str

    @property
    def folder_name(self) -> str:
        # An epoch's colon and any other character a path should not hold become "_".
        return re.sub(r"[^A-Za-z0-9.+~-]", "_", self.version)


def installed_qemu() -> InstalledQemu | None:
    """Which source package and version the installed qemu-system-x86 was built from, or None
    when dpkg does not know it (a QEMU not from Debian: no plugin for it)."""
    try:
        done = proc.run(
            ["dpkg-query", "-W", "-f", "${source:Package} ${source:Version}", _QEMU_PACKAGE],
            timeout_s=30.0,
        )
    except proc.CommandError:
        return None
    parts = done.stdout.split()
    if len(parts) != 2 or not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", parts[0]):
        return None
    return InstalledQemu(source=parts[0], version=parts[1])


def plugin_dir(qemu: InstalledQemu, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "qemu-plugin" / qemu.folder_name


def _source_digest() -> str:
    return files.sha256_file(PLUGIN_SOURCE)


def current_plugin(cache: Path | None = None) -> Path | None:
    """The built plugin for the installed QEMU, if it was built from today's plugin source;
    None with IOMATRIX_INSN_COUNTER=off (what it costs is measured by turning it off)."""
    if os.environ.get(OFF_ENV, "").lower() == "off":
        return None
    qemu = installed_qemu()
    if qemu is None:
        return None
    folder = plugin_dir(qemu, cache)
    try:
        stamp = json.loads((folder / "build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    plugin = folder / PLUGIN_NAME
    if not isinstance(stamp, dict) or stamp.get("source_sha256") != _source_digest():
        return None
    return plugin if plugin.is_file() else None


class SourceApt(PrivateApt):
    """The private apt over Debian's source indexes (deb-src), for `apt-get source`."""

    def sources_list(self) -> str:
        keyring = f"signed-by={_KEYRING}"
        return "".join(f"deb-src [{keyring}] {self.mirror} {s} main\n" for s in DEBIAN_SUITES)

    def source(self, package: str, version: str, into: Path) -> None:
        """Download (not unpack) a source package's files into a folder; apt checks each
        against the archive's signed index."""
        self._run(
            ["apt-get", "-q", "source", "--download-only", f"{package}={version}"],
            _SOURCE_TIMEOUT_S,
            cwd=into,
            network="apt-get source",
        )


def fetch_header(qemu: InstalledQemu, into: Path, apt: SourceApt | None = None) -> Path:
    """qemu-plugin.h of the installed QEMU's source, copied into `into`."""
    cache = cache_root()
    if apt is None:
        apt = SourceApt(cache / "apt-src", debian_mirror("qemu"), "qemu", _log)
    apt.prepare(refresh=False)
    with tempfile.TemporaryDirectory(prefix="iomatrix-qemu-src-", dir=cache) as tmp:
        work = Path(tmp)
        apt.source(qemu.source, qemu.version, work)
        tarballs = sorted(work.glob("*.orig.tar.*"))
        if len(tarballs) != 1:
            raise InsnPluginError(f"the source of {qemu.source} {qemu.version} has no orig tarball")
        header = into / HEADER_NAME
        proc.run(
            [
                "tar",
                "-xf",
                str(tarballs[0]),
                "-O",
                "--wildcards",
                "--no-anchored",
                f"include/qemu/{HEADER_NAME}",
            ],
            timeout_s=_TAR_TIMEOUT_S,
            output_file=header,
        )
    if header.stat().st_size == 0:
        raise InsnPluginError(f"{tarballs[0].name} holds no include/qemu/{HEADER_NAME}")
    return header


def _log(message: str) -> None:
    print(f"iomatrix: qemu plugin: {message}", file=sys.stderr)


def build(cache: Path | None = None) -> Path:
    """Build the plugin for the installed QEMU if it is not built yet; its path."""
    found = current_plugin(cache)
    if found is not None:
        return found
    qemu = installed_qemu()
    if qemu is None:
        raise InsnPluginError(f"dpkg does not know {_QEMU_PACKAGE}: no plugin API to build for")
    folder = plugin_dir(qemu, cache)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / HEADER_NAME).is_file():
        try:
            fetch_header(qemu, folder)
        except KernelError as exc:  # the private apt's failures
            raise InsnPluginError(f"cannot fetch QEMU's plugin header: {exc}") from exc
    partial = folder / f"{PLUGIN_NAME}.partial"
    try:
        proc.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-O2",
                "-Wall",
                "-Werror",
                "-I",
                str(folder),
                str(PLUGIN_SOURCE),
                "-o",
                str(partial),
            ],
            timeout_s=_CC_TIMEOUT_S,
        )
    except proc.CommandError as exc:
        raise InsnPluginError(f"cannot compile the instruction counter: {exc}") from exc
    partial.replace(folder / PLUGIN_NAME)
    files.write_text_atomic(
        folder / "build.json", json.dumps({"source_sha256": _source_digest()}) + "\n"
    )
    return folder / PLUGIN_NAME


def plugin_qemu_args(plugin: Path, counters: Path) -> list[str]:
    """QEMU's options that load the plugin writing into `counters` (a new file: the plugin
    refuses an existing one)."""
    return ["-plugin", f"{plugin},out={counters}"]


@dataclass(frozen=True)
class InsnCounts:
    """Instructions all vCPUs executed so far, in the guest kernel and in user space."""

    kernel: int
    user: int


def read_counts(path: Path) -> InsnCounts:
    """The counters file as the plugin keeps it (host-made, in the boot's private folder)."""
    with path.open("rb") as handle:
        head = handle.read(HEADER_BYTES)
        if len(head) != HEADER_BYTES or head[:8] != MAGIC:
            raise InsnPluginError(f"{path} is not an instruction counters file")
        (vcpus,) = struct.unpack_from("<I", head, 8)
        if not 1 <= vcpus <= _MAX_VCPUS:
            raise InsnPluginError(f"{path} claims {vcpus} vCPUs")
        body = handle.read(vcpus * SLOT_BYTES)
    if len(body) != vcpus * SLOT_BYTES:
        raise InsnPluginError(f"{path} is short")
    kernel = user = 0
    for slot in range(vcpus):
        k, u = struct.unpack_from("<QQ", body, slot * SLOT_BYTES)
        kernel += k
        user += u
    return InsnCounts(kernel=kernel, user=user)


def main() -> int:
    """`python -m iomatrix.host.vm.insn_plugin`: build it now (make setup), say where."""
    try:
        print(build())
    except (InsnPluginError, proc.CommandError, OSError) as exc:
        print(f"iomatrix: cannot build the instruction counter: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "InsnCounts",
    "InsnPluginError",
    "InstalledQemu",
    "build",
    "current_plugin",
    "installed_qemu",
    "plugin_qemu_args",
    "read_counts",
]
