"""The records of the kernel cache and of apt's answers."""

from __future__ import annotations

from collections.abc import Callable

from iomatrix.model.cell import Record
from iomatrix.model.result import KernelBuildInfo

Log = Callable[[str], None]


class DebPackage(Record):
    """One .deb a kernel was unpacked from, pinned by the hash of the file we checked."""

    name: str
    version: str
    sha256: str


class Kernel(Record):
    """A kernel ready to boot: where its image and modules are, and where they came from."""

    spec: str
    release: str
    vmlinuz: str
    # The folder that plays /lib/modules/<release> in the guest; None when there is none.
    modules_dir: str | None
    source: str
    packages: tuple[DebPackage, ...] = ()
    vmlinuz_sha256: str
    # Set for a kernel iomatrix built from source: what it was built from, and how.
    build: KernelBuildInfo | None = None


class AptPackage(Record):
    """The fields of one `apt-cache show` stanza that resolution and download need."""

    name: str
    version: str
    # (name, exact version or None) for every alternative in Depends; kernel packages pin
    # their own parts with "(= version)", which is what resolution follows.
    depends: tuple[tuple[str, str | None], ...]
    sha256: str
    filename: str
    size: int


class ResolvedKernel(Record):
    """What a Debian spec stands for today: the release and the .debs that make it up."""

    release: str
    source: str
    # The linux-image-<release> package first, then the parts it depends on (sid splits the
    # kernel into linux-binary-, linux-modules- and linux-base-<release>).
    packages: tuple[AptPackage, ...]
