"""The kernel spec grammar: what a matrix may name on its `kernel` axis.

parse_spec is pure, so matrix validation uses it without touching the network or apt:
  debian:<suite>            bookworm, bookworm-backports, trixie or sid: the suite's
                            linux-image-amd64
  debian:<abi-release>      e.g. debian:6.1.0-28-amd64, the package linux-image-<abi-release>
  debian:<package-version>  e.g. debian:6.1.176-1, the linux-image-amd64 of that version in
                            any suite
  path:<vmlinuz>[,modules=<dir>]  a kernel the user built; absolute paths; the modules folder is
                            the one that would be /lib/modules/<release> (optional)
"""

from __future__ import annotations

import re
from typing import Literal

from iomatrix.errors import KernelError
from iomatrix.model.cell import Record

DEBIAN_SUITES: tuple[str, ...] = ("bookworm", "bookworm-backports", "trixie", "sid")

_ABI_RELEASE = re.compile(
    r"^\d+\.\d+(\.\d+)?-\d+(\+[a-z0-9]+)?-[a-z0-9]+(-[a-z0-9]+)*$|"
    r"^\d+\.\d+\.\d+\+deb\d+-[a-z0-9]+(-[a-z0-9]+)*$"
)
_PACKAGE_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?-\d+([~+.][A-Za-z0-9.~+]+)?$")
# Paths may hold ordinary file-name characters only: nothing a shell or QEMU option parser
# would treat specially (commas separate our own sub-options; QEMU splits on them too).
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+/-]+$")

SpecKind = Literal["debian-suite", "debian-abi", "debian-version", "path"]


class KernelSpec(Record):
    raw: str
    kind: SpecKind
    value: str
    modules: str | None = None


def parse_spec(raw: str) -> KernelSpec:
    """Parse a kernel spec string; raises KernelError naming what is allowed."""
    scheme, sep, rest = raw.partition(":")
    if not sep or not rest:
        raise KernelError(
            raw, "expected debian:<suite|abi-release|package-version> or path:<vmlinuz>"
        )
    if scheme == "debian":
        if rest in DEBIAN_SUITES:
            return KernelSpec(raw=raw, kind="debian-suite", value=rest)
        if _ABI_RELEASE.fullmatch(rest):
            return KernelSpec(raw=raw, kind="debian-abi", value=rest)
        if _PACKAGE_VERSION.fullmatch(rest):
            return KernelSpec(raw=raw, kind="debian-version", value=rest)
        raise KernelError(
            raw,
            f"unknown Debian kernel {rest!r}: use a suite ({', '.join(DEBIAN_SUITES)}), "
            "an ABI release such as 6.1.0-28-amd64, or a package version such as 6.1.176-1",
        )
    if scheme == "path":
        image, _, extra = rest.partition(",")
        modules: str | None = None
        if extra:
            key, eq, value = extra.partition("=")
            if key != "modules" or not eq:
                raise KernelError(
                    raw, f"unknown path option {extra!r}: only modules=<dir> is allowed"
                )
            modules = value
        for what, p in (("vmlinuz", image), ("modules", modules)):
            if p is not None and not _SAFE_PATH.fullmatch(p):
                raise KernelError(
                    raw,
                    f"{what} path {p!r} must be absolute and use only letters, digits and ._+-/",
                )
        return KernelSpec(raw=raw, kind="path", value=image, modules=modules)
    raise KernelError(raw, f"unknown scheme {scheme!r}: use debian: or path:")
