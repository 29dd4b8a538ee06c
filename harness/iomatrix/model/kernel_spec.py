"""The kernel spec grammar: what a matrix may name on its `kernel` axis.

parse_spec is pure, so matrix validation uses it without touching the network or apt:
  debian:<suite>            bookworm, bookworm-backports, trixie or sid: the suite's
                            linux-image-amd64
  debian:<abi-release>      e.g. debian:6.1.0-28-amd64, the package linux-image-<abi-release>
  debian:<package-version>  e.g. debian:6.1.176-1, the linux-image-amd64 of that version in
                            any suite
  path:<vmlinuz>[,modules=<dir>]  a kernel the user built; absolute paths; the modules folder is
                            the one that would be /lib/modules/<release> (optional)
Kernels built from source by iomatrix (host/kernels/builder.py), out of tree, never writing into
the tree they are read from:
  git:<tree>@<ref>          any commit-ish of a local kernel git tree (absolute path; in a matrix
                            file also relative to that file, made absolute when it is read)
  source:<dir>              a kernel source tree without git (absolute path), e.g. an unpacked
                            release tarball
  debian-source:<X.Y>       Debian's linux-source-X.Y package (the newest in the archive), or
  debian-source:<version>   that package at a version, e.g. debian-source:6.1.176-1
A matrix gives a source kernel patches and config fragments under `kernels:` (cell.KernelBuild).

A spec is parsed once, where the matrix (or a command line) is read; records carry the parsed
KernelSpec (SpecText) and every later stage reads its fields, never the text again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BeforeValidator, PlainSerializer

from iomatrix.errors import KernelError
from iomatrix.model.record import Record

DEBIAN_SUITES: tuple[str, ...] = ("bookworm", "bookworm-backports", "trixie", "sid")

_ABI_RELEASE = re.compile(
    r"^\d+\.\d+(\.\d+)?-\d+(\+[a-z0-9]+)?-[a-z0-9]+(-[a-z0-9]+)*$|"
    r"^\d+\.\d+\.\d+\+deb\d+-[a-z0-9]+(-[a-z0-9]+)*$"
)
_PACKAGE_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?-\d+([~+.][A-Za-z0-9.~+]+)?$")
# Paths may hold ordinary file-name characters only: nothing a shell or QEMU option parser
# would treat specially (commas separate our own sub-options; QEMU splits on them too).
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+/-]+$")

SpecKind = Literal[
    "debian-suite", "debian-abi", "debian-version", "path", "git", "source", "debian-source"
]
# The kinds iomatrix builds from source rather than fetches ready to boot.
SOURCE_KINDS: tuple[SpecKind, ...] = ("git", "source", "debian-source")
# A git ref as `git rev-parse` takes it: branch and tag names, hashes, and the ~N ^N suffixes;
# never an option (no leading '-') and nothing a shell would read specially.
_GIT_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/~^+-]{0,199}$")
_SOURCE_SERIES = re.compile(r"^\d+\.\d+$")


class KernelSpec(Record):
    raw: str
    kind: SpecKind
    value: str
    modules: str | None = None
    # The commit-ish of a git: spec.
    ref: str | None = None

    @property
    def from_source(self) -> bool:
        return self.kind in SOURCE_KINDS

    def at(self, ref: str) -> KernelSpec:
        """The same git tree at another commit-ish (a bisection's candidates)."""
        if self.kind != "git":
            raise KernelError(self.raw, "only a git: kernel has other commits")
        return parse_spec(f"git:{self.value}@{ref}")

    def __str__(self) -> str:
        """The spec as the matrix wrote it: what messages and files show."""
        return self.raw


def _parsed(value: object) -> object:
    """A record field's text, as a file or a matrix gives it, parsed; a KernelSpec as it is."""
    return parse_spec(value) if isinstance(value, str) else value


def _text(spec: KernelSpec) -> str:
    return spec.raw


# A kernel spec as a field of a record: the parsed KernelSpec in memory, its text in a file, so
# plan.json, run.json and result files hold the string they held before the field was parsed.
SpecText = Annotated[
    KernelSpec,
    BeforeValidator(_parsed, json_schema_input_type=str),
    PlainSerializer(_text, return_type=str),
]


def parse_spec(raw: str) -> KernelSpec:
    """Parse a kernel spec string; raises KernelError naming what is allowed."""
    scheme, sep, rest = raw.partition(":")
    if not sep or not rest:
        raise KernelError(
            raw,
            "expected debian:<suite|abi-release|package-version>, path:<vmlinuz>, "
            "git:<tree>@<ref>, source:<dir> or debian-source:<X.Y|version>",
        )
    parser = _SCHEMES.get(scheme)
    if parser is None:
        raise KernelError(raw, f"unknown scheme {scheme!r}: use {', '.join(_SCHEMES)}")
    return parser(raw, rest)


def _debian(raw: str, rest: str) -> KernelSpec:
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


def _path(raw: str, rest: str) -> KernelSpec:
    image, _, extra = rest.partition(",")
    modules: str | None = None
    if extra:
        key, eq, value = extra.partition("=")
        if key != "modules" or not eq:
            raise KernelError(raw, f"unknown path option {extra!r}: only modules=<dir> is allowed")
        modules = value
    for what, p in (("vmlinuz", image), ("modules", modules)):
        if p is not None:
            _check_path(raw, what, p)
    return KernelSpec(raw=raw, kind="path", value=image, modules=modules)


def _git(raw: str, rest: str) -> KernelSpec:
    tree, at, ref = rest.rpartition("@")
    if not at or not tree or not ref:
        raise KernelError(raw, "expected git:<absolute path of a kernel git tree>@<ref>")
    _check_path(raw, "tree", tree)
    if not _GIT_REF.fullmatch(ref):
        raise KernelError(
            raw,
            f"ref {ref!r} is not a git commit-ish iomatrix accepts: letters, digits and "
            "._/~^+- not starting with - or .",
        )
    return KernelSpec(raw=raw, kind="git", value=tree, ref=ref)


def _source(raw: str, rest: str) -> KernelSpec:
    _check_path(raw, "source tree", rest)
    return KernelSpec(raw=raw, kind="source", value=rest)


def _debian_source(raw: str, rest: str) -> KernelSpec:
    if _SOURCE_SERIES.fullmatch(rest) or _PACKAGE_VERSION.fullmatch(rest):
        return KernelSpec(raw=raw, kind="debian-source", value=rest)
    raise KernelError(
        raw,
        f"unknown Debian source {rest!r}: use a series such as 6.1 (the package "
        "linux-source-6.1) or a package version such as 6.1.176-1",
    )


_SCHEMES: dict[str, Callable[[str, str], KernelSpec]] = {
    "debian": _debian,
    "path": _path,
    "git": _git,
    "source": _source,
    "debian-source": _debian_source,
}


def _check_path(raw: str, what: str, path: str) -> None:
    if not _SAFE_PATH.fullmatch(path):
        raise KernelError(
            raw, f"{what} path {path!r} must be absolute and use only letters, digits and ._+-/"
        )
