"""Kernels on the host: fetching what a kernel spec names into a cache, verified.

The spec grammar is iomatrix.model.kernel_spec (pure: loading a matrix needs no apt code).

Fetching (fetch, verify, cached) keeps everything under cache_root():
  apt/                      a project-private apt setup: sources.list, package lists, state;
                            the host's apt lists, archives and dpkg status are never used
  kernels/<release>/        one unpacked kernel (boot/, lib/ or usr/lib/modules/) and its
                            manifest.json, written last: a folder without one is unfinished
  kernels/resolved.json     spec -> the releases it resolved to, newest first; the newest is
                            trusted for a day so repeated runs need no network, and when the
                            archive cannot be reached (or offline use is asked for) the
                            newest one whose kernel is cached serves, whatever its age
path: kernels are not copied anywhere; their release is read from the bzImage header.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

from debian.deb822 import Deb822, PkgRelation
from debian.debian_support import version_compare
from pydantic import ValidationError

from iomatrix import proc
from iomatrix.errors import ArchiveUnreachable, KernelError
from iomatrix.model.cell import Record
from iomatrix.model.kernel_spec import DEBIAN_SUITES, KernelSpec, parse_spec
from iomatrix.store.files import locked, sha256_file, write_text_atomic

# ---------------------------------------------------------------------------------------------
# Records

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


# ---------------------------------------------------------------------------------------------
# Cache layout and small file helpers

# How long a resolution (spec -> release) and the package lists are trusted without asking the
# archive again: long enough that a day of runs stays offline, short enough to see new uploads.
MAX_AGE_S = 24 * 3600.0

_MANIFEST = "manifest.json"
_RESOLVED = "resolved.json"
_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# Timeouts are generous: a slow mirror must make a fetch slow, not fail it.
_UPDATE_TIMEOUT_S = 300.0
_SHOW_TIMEOUT_S = 120.0
_DOWNLOAD_TIMEOUT_S = 600.0
_UNPACK_TIMEOUT_S = 600.0
_DEPMOD_TIMEOUT_S = 600.0


def cache_root() -> Path:
    """$IOMATRIX_CACHE if set, else ~/.cache/iomatrix."""
    env = os.environ.get("IOMATRIX_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "iomatrix"


def _quiet(_message: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# path: kernels and the bzImage header

# The x86 boot protocol header (Documentation/arch/x86/boot.rst): "HdrS" at 0x202, the protocol
# version at 0x206, and at 0x20E a 16-bit offset (relative to 0x200) of the version string.
_HDRS_OFFSET = 0x202
_PROTOCOL_OFFSET = 0x206
_KERNEL_VERSION_OFFSET = 0x20E
# The offset is 16 bits, so the version string starts within the first 0x10200 bytes.
_HEADER_READ_BYTES = 0x10200 + 512


def release_from_bzimage(header: bytes) -> str:
    """The release (first word of the kernel_version string) of an x86 bzImage.

    header is the start of the file (at least up to the end of the version string). Raises
    ValueError saying why the bytes are not a bzImage with a version string.
    """
    if (
        len(header) < _KERNEL_VERSION_OFFSET + 2
        or header[_HDRS_OFFSET : _HDRS_OFFSET + 4] != b"HdrS"
    ):
        raise ValueError("not an x86 bzImage (no 'HdrS' boot header at 0x202)")
    (protocol,) = struct.unpack_from("<H", header, _PROTOCOL_OFFSET)
    (pointer,) = struct.unpack_from("<H", header, _KERNEL_VERSION_OFFSET)
    # kernel_version exists since boot protocol 2.00; 0 means the kernel did not fill it in.
    if protocol < 0x200 or pointer == 0:
        raise ValueError(f"bzImage (boot protocol {protocol:#x}) carries no version string")
    start = pointer + 0x200
    end = header.find(b"\0", start)
    if end < 0:
        raise ValueError(f"bzImage version string at {start:#x} is not NUL-terminated")
    words = header[start:end].decode("ascii", errors="replace").split()
    if not words or not re.fullmatch(r"[A-Za-z0-9._+~-]+", words[0]):
        raise ValueError(f"bzImage version string at {start:#x} does not start with a release")
    return words[0]


def read_release(vmlinuz: Path) -> str:
    """The release of a bzImage file; raises ValueError (see release_from_bzimage) or OSError."""
    with vmlinuz.open("rb") as handle:
        return release_from_bzimage(handle.read(_HEADER_READ_BYTES))


def _from_path(spec: KernelSpec) -> Kernel:
    image = Path(spec.value)
    if not image.is_file():
        raise KernelError(spec.raw, f"vmlinuz {image} does not exist or is not a file")
    try:
        release = read_release(image)
    except (OSError, ValueError) as exc:
        raise KernelError(spec.raw, f"cannot read the release of {image}: {exc}") from exc
    kernel = Kernel(
        spec=spec.raw,
        release=release,
        vmlinuz=str(image),
        modules_dir=spec.modules,
        source=f"path: {image}",
        vmlinuz_sha256=sha256_file(image),
    )
    verify(kernel)
    return kernel


# ---------------------------------------------------------------------------------------------
# verify and cached


def verify(kernel: Kernel) -> None:
    """Check the kernel's files are there and unchanged; raises KernelError saying what is not."""
    image = Path(kernel.vmlinuz)
    if not image.is_file():
        raise KernelError(kernel.spec, f"vmlinuz {image} is missing")
    actual = sha256_file(image)
    if actual != kernel.vmlinuz_sha256:
        raise KernelError(
            kernel.spec,
            f"vmlinuz {image} has sha256 {actual}, expected {kernel.vmlinuz_sha256}: "
            "the file changed since it was fetched",
        )
    if kernel.modules_dir is not None:
        modules = Path(kernel.modules_dir)
        if not modules.is_dir():
            raise KernelError(kernel.spec, f"modules folder {modules} is missing")
        if not (modules / "modules.dep").is_file():
            raise KernelError(
                kernel.spec,
                f"modules folder {modules} has no modules.dep: run depmod for it "
                "(make modules_install does) so the guest can load modules",
            )


def _load_manifest(release_dir: Path) -> Kernel:
    """Read and verify a cached kernel; raises KernelError if it is absent, unreadable or broken."""
    manifest = release_dir / _MANIFEST
    try:
        kernel = Kernel.model_validate_json(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise KernelError(release_dir.name, f"{manifest} is missing (unfinished fetch)") from exc
    except (OSError, ValidationError) as exc:
        raise KernelError(release_dir.name, f"{manifest} is unreadable: {exc}") from exc
    if kernel.release != release_dir.name:
        raise KernelError(kernel.spec, f"{manifest} names release {kernel.release}")
    verify(kernel)
    return kernel


def cached(cache: Path | None = None, *, log: Log | None = None) -> list[Kernel]:
    """The verified kernels in the cache, sorted by release.

    Broken entries (no manifest because a fetch was interrupted, an unreadable manifest, or
    files that fail verify) are left out, not raised: each is reported through log, and the
    next fetch of that kernel replaces it.
    """
    say = log or _quiet
    kernels_dir = (cache or cache_root()) / "kernels"
    if not kernels_dir.is_dir():
        return []
    found: list[Kernel] = []
    for release_dir in sorted(kernels_dir.iterdir()):
        # Dot-folders are fetches in progress or leftovers of interrupted ones.
        if release_dir.name.startswith(".") or not release_dir.is_dir():
            continue
        try:
            found.append(_load_manifest(release_dir))
        except KernelError as exc:
            say(f"skipping broken cached kernel {release_dir}: {exc.reason}")
    return found


# ---------------------------------------------------------------------------------------------
# Finding a Debian mirror (pure, over the texts of the host's apt sources)

# Codenames and aliases of the Debian archive; a suite such as bookworm-updates counts by its
# first part. Ubuntu and third-party suites do not match, so their mirrors are never taken.
_DEBIAN_SUITE_NAMES = frozenset(
    {
        "buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
        "oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental",
    }
)  # fmt: skip
_MIRROR_SCHEMES = ("http", "https", "file")


def _is_debian_archive(uri: str, suites: Sequence[str]) -> bool:
    parsed = urlparse(uri)
    if parsed.scheme not in _MIRROR_SCHEMES:
        return False
    # "/debian" and not "/debian-security", "/debian-debug" or a snapshot path.
    if not parsed.path.rstrip("/").endswith("/debian"):
        return False
    return any(s.split("-")[0] in _DEBIAN_SUITE_NAMES for s in suites)


def _one_line_sources(text: str) -> Iterator[tuple[str, list[str]]]:
    """(uri, [suite]) of each enabled `deb` line of a one-line-format sources.list."""
    for raw_line in text.splitlines():
        line = raw_line.split("#", 1)[0].strip()
        # Options may contain spaces ("[ arch=amd64 signed-by=... ]"): drop the bracket first.
        line = re.sub(r"\[[^\]]*\]", " ", line)
        words = line.split()
        if len(words) >= 3 and words[0] == "deb":
            yield words[1], [words[2]]


def _deb822_sources(text: str) -> Iterator[tuple[str, list[str]]]:
    """(first URI, suites) of each enabled `deb` stanza of a deb822 .sources file."""
    stanzas: list[dict[str, str]] = [{}]
    key = ""
    for raw_line in text.splitlines():
        if raw_line.startswith("#"):
            continue
        if not raw_line.strip():
            if stanzas[-1]:
                stanzas.append({})
            key = ""
            continue
        if raw_line[0] in " \t" and key:
            stanzas[-1][key] += " " + raw_line.strip()
            continue
        key, sep, value = raw_line.partition(":")
        key = key.strip().lower() if sep else ""
        if key:
            stanzas[-1][key] = value.strip()
    for stanza in stanzas:
        if stanza.get("enabled", "yes").lower() == "no":
            continue
        uris = stanza.get("uris", "").split()
        if "deb" in stanza.get("types", "").split() and uris:
            yield uris[0], stanza.get("suites", "").split()


def find_debian_mirror(sources: Sequence[tuple[str, str]]) -> str | None:
    """The first Debian archive URI in apt source files, given as (file name, text) in order.

    Files named *.sources are read as deb822 stanzas, anything else as one-line format.
    Commented-out lines, `Enabled: no` stanzas, deb-src entries, security/debug archives and
    non-Debian suites are skipped. Returns None when there is no such URI.
    """
    for name, text in sources:
        entries = _deb822_sources(text) if name.endswith(".sources") else _one_line_sources(text)
        for uri, suites in entries:
            if _is_debian_archive(uri, suites):
                return uri.rstrip("/")
    return None


def host_apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[tuple[str, str]]:
    """The host's apt source files in apt's own order, read only; unreadable files are skipped.

    Files apt itself ignores (e.g. *.list.disabled) are not read either.
    """
    files = [etc_apt / "sources.list"]
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    texts: list[tuple[str, str]] = []
    for file in files:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            texts.append((file.name, file.read_text(encoding="utf-8")))
    return texts


def debian_mirror(spec: str) -> str:
    """$IOMATRIX_DEBIAN_MIRROR, else the host's Debian mirror; raises KernelError if neither."""
    env = os.environ.get("IOMATRIX_DEBIAN_MIRROR")
    if env:
        # It is written into a sources.list line: one word, a scheme apt can fetch from.
        if not re.fullmatch(r"(https?://|file:/)[^\s\[\]#]+", env):
            raise KernelError(
                spec, f"IOMATRIX_DEBIAN_MIRROR={env!r} is not an http(s):// or file:/ URI"
            )
        return env.rstrip("/")
    mirror = find_debian_mirror(host_apt_sources())
    if mirror is None:
        raise KernelError(
            spec,
            "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d: "
            "set IOMATRIX_DEBIAN_MIRROR to the URI of a Debian mirror (ending in /debian)",
        )
    return mirror


# ---------------------------------------------------------------------------------------------
# apt-cache output and Debian versions (pure)


def parse_stanzas(text: str) -> list[dict[str, str]]:
    """RFC 822-style stanzas (as apt-cache show prints them) as field -> value dicts
    (python-debian's deb822 reader; a continued field keeps its lines)."""
    paragraphs = Deb822.iter_paragraphs(text.splitlines(keepends=True), use_apt_pkg=False)
    return [dict(paragraph) for paragraph in paragraphs]


def parse_depends(value: str) -> tuple[tuple[str, str | None], ...]:
    """Every alternative of a Depends field as (name, exact version or None), by python-debian's
    relation parser; only "=" pins matter here.

    "linux-image-6.1.0-50-amd64 (= 6.1.176-1), kmod | foo (>= 2)" gives
    (("linux-image-6.1.0-50-amd64", "6.1.176-1"), ("kmod", None), ("foo", None)).
    """
    result: list[tuple[str, str | None]] = []
    for alternatives in PkgRelation.parse_relations(value):
        for relation in alternatives:
            if not relation["name"]:
                continue  # an empty field parses as one relation without a name
            version = relation.get("version")
            exact = version[1] if version is not None and version[0] == "=" else None
            result.append((str(relation["name"]), exact))
    return tuple(result)


def parse_packages(text: str) -> list[AptPackage]:
    """The downloadable packages in `apt-cache show` output.

    Stanzas without Filename/SHA256 (a package only known as installed) cannot be downloaded
    and are left out; with our private, empty dpkg status there are none.
    """
    packages: list[AptPackage] = []
    for fields in parse_stanzas(text):
        if not all(k in fields for k in ("Package", "Version", "Filename", "SHA256")):
            continue
        packages.append(
            AptPackage(
                name=fields["Package"],
                version=fields["Version"],
                depends=parse_depends(fields.get("Depends", "")),
                sha256=fields["SHA256"],
                filename=fields["Filename"],
                size=int(fields.get("Size", "0") or 0),
            )
        )
    return packages


def compare_debian_versions(a: str, b: str) -> int:
    """Negative, zero or positive as Debian version a sorts before, equal to or after b (dpkg's
    order, by python-debian)."""
    return version_compare(a, b)


def newest(packages: Sequence[AptPackage]) -> AptPackage:
    """The package with the highest Debian version (packages must not be empty)."""
    best = packages[0]
    for candidate in packages[1:]:
        if compare_debian_versions(candidate.version, best.version) > 0:
            best = candidate
    return best


# ---------------------------------------------------------------------------------------------
# Resolution: spec -> release and the packages to download

# Given apt-cache show queries ("name", "name/suite", "name=version"), the packages apt knows.
ShowPackages = Callable[[Sequence[str]], list[AptPackage]]

_META_PACKAGE = "linux-image-amd64"
# The packages of one release that together hold the kernel in the split layout of sid (7.x):
# linux-binary has vmlinuz, linux-modules the modules, and linux-base modules.builtin and
# modules.order (without which modprobe reports built-in drivers as missing) plus the config.
_RELEASE_PART_PREFIXES = ("linux-binary-", "linux-modules-", "linux-base-")


def image_release(meta: AptPackage) -> tuple[str, str | None]:
    """The (release, exact version) the linux-image-amd64 meta package depends on.

    bookworm: "linux-image-6.1.0-50-amd64 (= 6.1.176-1)"; sid also depends on
    linux-base-amd64, which is not the image.
    """
    for name, version in meta.depends:
        if name.startswith("linux-image-") and name != _META_PACKAGE:
            return name.removeprefix("linux-image-"), version
    raise ValueError(f"{meta.name} {meta.version} depends on no linux-image-<release> package")


def release_parts(image: AptPackage, release: str) -> list[tuple[str, str | None]]:
    """The packages besides linux-image-<release> that hold parts of this kernel."""
    wanted = {prefix + release for prefix in _RELEASE_PART_PREFIXES}
    parts: list[tuple[str, str | None]] = []
    for name, version in image.depends:
        if name in wanted and name not in (p[0] for p in parts):
            parts.append((name, version))
    return parts


def _image_and_parts(
    show: ShowPackages, spec: str, release: str, pinned: str | None
) -> tuple[AptPackage, list[AptPackage]]:
    """linux-image-<release> (the pinned version, else the newest) and the parts it depends on.

    One apt-cache call asks for the image and every possible part at once: each call re-reads
    all package lists (about 2 s), and missing names in a multi-name query are simply absent.
    """
    image_name = f"linux-image-{release}"
    found = show(
        [
            f"{image_name}={pinned}" if pinned else image_name,
            *(prefix + release for prefix in _RELEASE_PART_PREFIXES),
        ]
    )
    images = [p for p in found if p.name == image_name and pinned in (None, p.version)]
    if not images:
        wanted = f"{image_name} {pinned}" if pinned else image_name
        raise KernelError(spec, f"no package {wanted} in {', '.join(DEBIAN_SUITES)}")
    image = newest(images)
    parts: list[AptPackage] = []
    for name, version in release_parts(image, release):
        matches = [p for p in found if p.name == name and version in (None, p.version)]
        if not matches:
            raise KernelError(
                spec,
                f"{image.name} {image.version} needs {name} {version or ''}, "
                "which is not in the package lists",
            )
        parts.append(newest(matches))
    return image, parts


def resolve(spec: KernelSpec, show: ShowPackages) -> ResolvedKernel:
    """Which release a Debian spec names today and which .debs hold it, asking apt via show."""
    if spec.kind == "path":
        raise ValueError("path: kernels are not resolved through apt")
    pinned: str | None
    if spec.kind == "debian-abi":
        release, pinned = spec.value, None
        where = "debian"
    else:
        if spec.kind == "debian-suite":
            metas = show([f"{_META_PACKAGE}/{spec.value}"])
            if not metas:
                raise KernelError(spec.raw, f"no {_META_PACKAGE} in suite {spec.value}")
            meta = newest(metas)
            where = f"debian {spec.value}"
        else:
            metas = show([_META_PACKAGE])
            matching = [m for m in metas if m.version == spec.value]
            if not matching:
                known = ", ".join(sorted({m.version for m in metas})) or "none"
                raise KernelError(
                    spec.raw,
                    f"no {_META_PACKAGE} version {spec.value} in {', '.join(DEBIAN_SUITES)} "
                    f"(available: {known})",
                )
            meta = matching[0]
            where = f"debian {_META_PACKAGE} {spec.value}"
        try:
            release, pinned = image_release(meta)
        except ValueError as exc:
            raise KernelError(spec.raw, str(exc)) from exc
    image, parts = _image_and_parts(show, spec.raw, release, pinned)
    return ResolvedKernel(
        release=release,
        source=f"{where}: {image.name} {image.version}",
        packages=(image, *parts),
    )


# ---------------------------------------------------------------------------------------------
# The project-private apt configuration


def apt_sources_list(mirror: str) -> str:
    # target=Packages: only the package indexes; the host may enable extra index targets
    # (DEP-11 metadata, Contents) that would more than double every update.
    keyring = f"signed-by={_KEYRING}"
    return "".join(f"deb [{keyring} target=Packages] {mirror} {s} main\n" for s in DEBIAN_SUITES)


def apt_config_text(apt_dir: Path) -> str:
    """The private apt.conf, read after the host's configuration (apt-get -c).

    The host's configuration is still read, on purpose: it carries site settings such as
    proxies and, on machines with a frozen mirror, Acquire::Check-Valid-Until. What it must not
    do is act on host state: its update hooks (Docker's cache cleaning, AppStream and
    PackageKit refreshes) are cleared, and the dpkg status, apt state and cache are private.
    """
    return (
        "#clear APT::Update::Pre-Invoke;\n"
        "#clear APT::Update::Post-Invoke;\n"
        "#clear APT::Update::Post-Invoke-Success;\n"
        f'Dir::State "{apt_dir / "state"}";\n'
        # Packages installed on the host must not show up as extra apt-cache stanzas.
        'Dir::State::status "/dev/null";\n'
        f'Dir::Cache "{apt_dir / "cache"}";\n'
    )


def apt_options(apt_dir: Path) -> list[str]:
    """The options every apt-get/apt-cache call gets, so it only sees the private setup."""
    settings = {
        "Dir::Etc::SourceList": str(apt_dir / "etc" / "sources.list"),
        "Dir::Etc::SourceParts": "/dev/null",
        "Dir::State::Lists": str(apt_dir / "lists"),
        "Dir::Cache::Archives": str(apt_dir / "archives"),
        # No binary caches: each call rebuilds apt's view from the private lists (about 2 s),
        # so nothing stale or host-wide is ever written.
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "Acquire::Languages": "none",
        # apt running as root drops to the _apt user for downloads, which cannot write into
        # our root-owned private folders and warns; staying root avoids that. (Run as a normal
        # user, apt never switches users, so this changes nothing.)
        "APT::Sandbox::User": "root",
    }
    options = ["-c", str(apt_dir / "etc" / "apt.conf")]
    for key, value in settings.items():
        options += ["-o", f"{key}={value}"]
    return options


def apt_failure(command: str, exc: proc.CommandError) -> str:
    """Why an apt command failed, on one line: its first E: or W: line (apt's own words), else
    the timeout or exit status."""
    if isinstance(exc, proc.CommandTimeout):
        return f"{command} {exc.reason}"
    for line in (exc.stderr + "\n" + exc.stdout).splitlines():
        if line.startswith(("E: ", "W: ")):
            return " ".join(line[3:].split())
    return f"{command} exited with status {exc.returncode}"


class PrivateApt:
    """apt-get and apt-cache over the private state in <cache>/apt, never the host's."""

    def __init__(self, apt_dir: Path, mirror: str, spec: str, log: Log) -> None:
        self.dir = apt_dir
        self.mirror = mirror
        self.spec = spec
        self.log = log
        # The stamp of the last successful update holds the sources.list it was made with,
        # so a changed mirror forces an update. (apt keeps the server's modification times on
        # the list files, so their mtimes cannot tell when we last updated.)
        self.stamp = apt_dir / "updated"

    def _run(
        self,
        args: Sequence[str],
        timeout_s: float,
        *,
        ok_codes: Sequence[int] = (0,),
        cwd: Path | None = None,
        network: str | None = None,
    ) -> proc.Completed:
        """Run apt with the private options. network names a command that talks to the archive
        ("apt-get update"): its failure raises ArchiveUnreachable, which fetch may answer from
        the cache, rather than a plain KernelError."""
        argv = [args[0], *apt_options(self.dir), *args[1:]]
        try:
            return proc.run(argv, timeout_s=timeout_s, ok_codes=ok_codes, cwd=cwd)
        except proc.CommandError as exc:
            # A missing apt-get is a broken host, not a missing network.
            started = exc.returncode is not None or isinstance(exc, proc.CommandTimeout)
            if network is not None and started:
                self.log(f"{network} failed: {exc}")
                raise ArchiveUnreachable(self.spec, apt_failure(network, exc)) from exc
            raise KernelError(self.spec, str(exc)) from exc

    def prepare(self, *, refresh: bool) -> None:
        """Write the private configuration and update the package lists if they are stale."""
        if not _KEYRING.is_file():
            raise KernelError(
                self.spec, f"{_KEYRING} is missing: install the debian-archive-keyring package"
            )
        for sub in ("etc", "lists/partial", "archives/partial", "state", "cache"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        sources = apt_sources_list(self.mirror)
        for path, text in (
            (self.dir / "etc" / "sources.list", sources),
            (self.dir / "etc" / "apt.conf", apt_config_text(self.dir)),
        ):
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                write_text_atomic(path, text)
        if refresh or not self._lists_fresh(sources):
            self.update(sources)

    def _lists_fresh(self, sources: str) -> bool:
        try:
            return (
                self.stamp.read_text(encoding="utf-8") == sources
                and time.time() - self.stamp.stat().st_mtime < MAX_AGE_S
            )
        except OSError:
            return False

    def update(self, sources: str) -> None:
        self.log(f"updating the Debian package lists ({', '.join(DEBIAN_SUITES)})")
        # --error-on=any: without it apt-get update exits 0 when no index could be fetched
        # (the mirror unreachable), keeping the old lists; that must not count as fresh lists.
        done = self._run(
            ["apt-get", "-q", "--error-on=any", "update"],
            _UPDATE_TIMEOUT_S,
            network="apt-get update",
        )
        for line in done.stderr.splitlines():
            if line.startswith(("W:", "E:")):
                self.log(f"apt-get update: {line}")
        self.log(f"package lists updated in {done.duration_s:.1f} s")
        write_text_atomic(self.stamp, sources)

    def show(self, queries: Sequence[str]) -> list[AptPackage]:
        done = self._run(["apt-cache", "show", *queries], _SHOW_TIMEOUT_S, ok_codes=(0, 100))
        if done.returncode != 0:
            # 100 with "No packages found" is an answer (none); anything else is a failure.
            if "No packages found" not in done.stderr:
                raise KernelError(self.spec, f"apt-cache show {' '.join(queries)}: {done.stderr}")
            return []
        return parse_packages(done.stdout)

    def download(self, packages: Sequence[AptPackage], into: Path) -> list[Path]:
        """Download the exact versions into a folder (apt-get download writes into its cwd)."""
        pins = [f"{p.name}={p.version}" for p in packages]
        self._run(
            ["apt-get", "-q", "download", *pins],
            _DOWNLOAD_TIMEOUT_S,
            cwd=into,
            network="apt-get download",
        )
        debs: list[Path] = []
        for package in packages:
            # apt-get download names the file after the archive's Filename.
            deb = into / Path(package.filename).name
            if not deb.is_file():
                raise KernelError(self.spec, f"apt-get download did not produce {deb.name}")
            actual = sha256_file(deb)
            if actual != package.sha256:
                raise KernelError(
                    self.spec,
                    f"{deb.name} has sha256 {actual}, the archive index says {package.sha256}",
                )
            debs.append(deb)
        return debs


# ---------------------------------------------------------------------------------------------
# Unpacking


def _run_tool(spec: str, argv: Sequence[str], timeout_s: float) -> None:
    try:
        proc.run(argv, timeout_s=timeout_s)
    except proc.CommandError as exc:
        hint = ""
        if exc.returncode is None and "cannot start" in exc.reason:
            hint = f" (is {argv[0]} installed? it comes with the dpkg or kmod package)"
        raise KernelError(spec, f"{exc}{hint}") from exc


def _find_vmlinuz(tree: Path, release: str) -> Path | None:
    # bookworm/trixie: /boot/vmlinuz-<release>; sid's linux-binary package:
    # /usr/lib/modules/<release>/vmlinuz.
    for relative in (
        f"boot/vmlinuz-{release}",
        f"usr/lib/modules/{release}/vmlinuz",
        f"lib/modules/{release}/vmlinuz",
    ):
        if (tree / relative).is_file():
            return tree / relative
    return None


def _find_modules(tree: Path, release: str) -> Path | None:
    for relative in (f"lib/modules/{release}", f"usr/lib/modules/{release}"):
        candidate = tree / relative
        if (candidate / "kernel").is_dir() or (candidate / "modules.order").is_file():
            return candidate
    return None


def _depmod(spec: str, modules: Path, release: str, scratch: Path) -> None:
    """Generate modules.dep and friends: Debian packages leave that to their postinst.

    depmod -b wants <base>/lib/modules/<release> (newer kmod may want usr/lib/modules), so a
    scratch base with both links to the real folder works for either layout and any kmod.
    -C /dev/null keeps the host's depmod.d from changing the result.
    """
    base = scratch / "depmod-base"
    for relative in ("lib/modules", "usr/lib/modules"):
        (base / relative).mkdir(parents=True, exist_ok=True)
        (base / relative / release).symlink_to(modules.absolute(), target_is_directory=True)
    try:
        _run_tool(spec, ["depmod", "-C", "/dev/null", "-b", str(base), release], _DEPMOD_TIMEOUT_S)
    finally:
        shutil.rmtree(base)


def unpack_kernel(
    spec: str, debs: Sequence[Path], release: str, tree: Path, scratch: Path
) -> tuple[Path, Path | None]:
    """Unpack .debs into tree (deleting each after it is unpacked: they are large), check the
    image is the expected release, and index the modules. Returns (vmlinuz, modules folder)."""
    tree.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        _run_tool(spec, ["dpkg-deb", "-x", str(deb), str(tree)], _UNPACK_TIMEOUT_S)
        deb.unlink()
    image = _find_vmlinuz(tree, release)
    if image is None:
        raise KernelError(spec, f"the packages contain no vmlinuz for {release}")
    try:
        found = read_release(image)
    except (OSError, ValueError) as exc:
        raise KernelError(spec, f"cannot read the release of {image}: {exc}") from exc
    if found != release:
        raise KernelError(spec, f"{image} is release {found}, expected {release}")
    modules = _find_modules(tree, release)
    if modules is not None:
        _depmod(spec, modules, release, scratch)
    return image, modules


# ---------------------------------------------------------------------------------------------
# The resolution cache


class _Resolution(Record):
    release: str
    resolved_at: float


# Earlier resolutions are kept so that, when the newest one's kernel is not in the cache (its
# download failed) and the archive cannot be reached, an older cached kernel can still serve.
_HISTORY = 8


def _read_resolutions(kernels_dir: Path) -> dict[str, list[_Resolution]]:
    """spec -> its resolutions, newest first. An unreadable file means "resolve again" (or, with
    the archive out of reach, "nothing cached"), never an error."""
    try:
        raw = json.loads((kernels_dir / _RESOLVED).read_text(encoding="utf-8"))
        return {
            spec: [
                _Resolution.model_validate(e)
                # Caches written before the history was kept hold one entry per spec.
                for e in (entries if isinstance(entries, list) else [entries])
            ]
            for spec, entries in raw.items()
        }
    except (OSError, ValueError, AttributeError):
        return {}


def _remember_resolution(kernels_dir: Path, spec: str, release: str) -> None:
    everything = _read_resolutions(kernels_dir)
    earlier = [e for e in everything.get(spec, []) if e.release != release]
    everything[spec] = [_Resolution(release=release, resolved_at=time.time()), *earlier][:_HISTORY]
    text = json.dumps(
        {s: [e.model_dump() for e in entries] for s, entries in sorted(everything.items())},
        indent=2,
    )
    write_text_atomic(kernels_dir / _RESOLVED, text + "\n")


def _known_release(spec: KernelSpec, kernels_dir: Path) -> str | None:
    """The release a spec stood for recently, without asking apt."""
    if spec.kind == "debian-abi":
        return spec.value
    entries = _read_resolutions(kernels_dir).get(spec.raw)
    if not entries or time.time() - entries[0].resolved_at >= MAX_AGE_S:
        return None
    return entries[0].release


def _candidates(spec: KernelSpec, kernels_dir: Path) -> list[tuple[str, float | None]]:
    """(release, resolved at) a spec has stood for, newest first, whatever their age; an ABI
    release names its kernel without any resolution (None)."""
    if spec.kind == "debian-abi":
        return [(spec.value, None)]
    return [(e.release, e.resolved_at) for e in _read_resolutions(kernels_dir).get(spec.raw, [])]


def _age(resolved_at: float) -> str:
    seconds = max(0.0, time.time() - resolved_at)
    for unit, size, at_least in (("day", 86400, 2), ("hour", 3600, 2), ("minute", 60, 1)):
        if seconds >= size * at_least:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "less than a minute ago"


# ---------------------------------------------------------------------------------------------
# fetch


def _fetch_lock(kernels_dir: Path, log: Log) -> contextlib.AbstractContextManager[None]:
    """One fetching process per cache: apt's private lists and the temp folders are shared."""
    return locked(
        kernels_dir / ".lock",
        held="the kernel cache",
        on_wait=lambda: log(f"waiting for another iomatrix fetching into {kernels_dir}"),
    )


def _cached_kernel(
    kernels_dir: Path, release: str, spec: str, log: Log, *, instead: str = "fetching it again"
) -> Kernel | None:
    release_dir = kernels_dir / release
    if not release_dir.is_dir():
        return None
    try:
        kernel = _load_manifest(release_dir)
    except KernelError as exc:
        log(f"cached kernel {release} is unusable, {instead}: {exc.reason}")
        return None
    # The manifest names the spec it was first fetched for; answer with the one asked for.
    return kernel.model_copy(update={"spec": spec})


def _remove_leftovers(kernels_dir: Path) -> None:
    # Called with the fetch lock held: any temp folder now belongs to an interrupted fetch.
    for leftover in kernels_dir.glob(".partial-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in kernels_dir.glob(".old-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _same_packages(kernel: Kernel, resolved: ResolvedKernel) -> bool:
    wanted = {(p.name, p.version, p.sha256) for p in resolved.packages}
    return {(p.name, p.version, p.sha256) for p in kernel.packages} == wanted


def _install(
    spec: str, resolved: ResolvedKernel, apt: PrivateApt, kernels_dir: Path, log: Log
) -> Kernel:
    """Download and unpack into a temp folder beside the cache entry, move it into place, and
    only then write the manifest that makes it a cache entry."""
    release = resolved.release
    work = Path(tempfile.mkdtemp(prefix=f".partial-{release}-", dir=kernels_dir))
    try:
        downloads = work / "debs"
        downloads.mkdir()
        megabytes = sum(p.size for p in resolved.packages) / 1e6
        names = ", ".join(f"{p.name} {p.version}" for p in resolved.packages)
        log(f"downloading {names} ({megabytes:.0f} MB)")
        started = time.monotonic()
        debs = apt.download(resolved.packages, downloads)
        log(f"downloaded in {time.monotonic() - started:.1f} s; unpacking")
        started = time.monotonic()
        tree = work / "tree"
        image, modules = unpack_kernel(spec, debs, release, tree, work)
        log(f"unpacked and indexed modules in {time.monotonic() - started:.1f} s")
        image_sha256 = sha256_file(image)
        final = kernels_dir / release
        old: Path | None = None
        if final.exists():
            # Move a broken or outdated entry aside rather than delete it first, so the
            # window without any entry is a single rename.
            old = Path(tempfile.mkdtemp(prefix=f".old-{release}-", dir=kernels_dir))
            final.rename(old / release)
        tree.rename(final)
        kernel = Kernel(
            spec=spec,
            release=release,
            vmlinuz=str(final / image.relative_to(tree)),
            modules_dir=str(final / modules.relative_to(tree)) if modules else None,
            source=resolved.source,
            packages=tuple(
                DebPackage(name=p.name, version=p.version, sha256=p.sha256)
                for p in resolved.packages
            ),
            vmlinuz_sha256=image_sha256,
        )
        write_text_atomic(final / _MANIFEST, kernel.model_dump_json(indent=2) + "\n")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return kernel
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _once(log: Log) -> Log:
    # The cache is checked up to three times per fetch (before the lock, after it, after
    # resolving); a broken entry should be reported once.
    seen: set[str] = set()

    def log_once(message: str) -> None:
        if message not in seen:
            seen.add(message)
            log(message)

    return log_once


class _NothingCached(Exception):
    """Internal: no usable cached kernel for a spec; the message says why, for a KernelError."""


def _from_cache(spec: KernelSpec, kernels_dir: Path, log: Log) -> tuple[Kernel, float | None]:
    """The newest kernel the spec has stood for that is in the cache, and when that resolution
    was made (None for an ABI release), whatever its age. Entries whose files fail verification
    are reported through log and skipped, never served. Raises _NothingCached saying why none."""
    for release, resolved_at in _candidates(spec, kernels_dir):
        kernel = _cached_kernel(kernels_dir, release, spec.raw, log, instead="skipping it")
        if kernel is not None:
            return kernel, resolved_at
    raise _NothingCached(_why_nothing_cached(spec, kernels_dir))


def _why_nothing_cached(spec: KernelSpec, kernels_dir: Path) -> str:
    details: list[str] = []
    for release, resolved_at in _candidates(spec, kernels_dir):
        when = f" (resolved {_age(resolved_at)})" if resolved_at is not None else ""
        release_dir = kernels_dir / release
        if not release_dir.is_dir():
            # An ABI release that is not there is simply not cached; a resolution whose kernel
            # is not there (its download failed, or it was deleted) is worth naming.
            if resolved_at is not None:
                details.append(f"{release}{when}: is not in the cache")
            continue
        try:
            _load_manifest(release_dir)
        except KernelError as exc:
            details.append(f"{release}{when}: {exc.reason}")
    if not details:
        return "nothing is cached for this spec"
    return f"nothing usable is cached for this spec ({'; '.join(details)})"


def _using(kernel: Kernel, resolved_at: float | None) -> str:
    when = f", resolved {_age(resolved_at)}" if resolved_at is not None else ""
    return f"using the cached {kernel.release}{when}"


def offline_requested(flag: bool = False) -> bool:
    """--offline given, or IOMATRIX_OFFLINE set to anything but empty or 0."""
    return flag or os.environ.get("IOMATRIX_OFFLINE", "").strip() not in ("", "0")


def _to_stderr(message: str) -> None:
    print(f"iomatrix: {message}", file=sys.stderr)


def _offline(spec: KernelSpec, kernels_dir: Path, log: Log, notice: Log) -> Kernel:
    try:
        kernel, resolved_at = _from_cache(spec, kernels_dir, log)
    except _NothingCached as why:
        raise KernelError(
            spec.raw,
            f"offline (--offline or IOMATRIX_OFFLINE), and {why}: it must be fetched online "
            f"first (iomatrix kernels fetch {spec.raw})",
        ) from None
    # An ABI release names one kernel: there is no resolution that could be out of date.
    if resolved_at is not None:
        notice(f"{spec.raw}: offline; {_using(kernel, resolved_at)}")
    return kernel


def _resolve_and_install(
    parsed: KernelSpec, root: Path, kernels_dir: Path, refresh: bool, log: Log
) -> Kernel:
    """Ask the archive what the spec stands for now, and download it unless it is cached.
    Raises ArchiveUnreachable when apt-get update or download cannot reach the archive."""
    spec = parsed.raw
    apt = PrivateApt(root / "apt", debian_mirror(spec), spec, log)
    apt.prepare(refresh=refresh)
    resolved = resolve(parsed, apt.show)
    log(f"{spec} is {resolved.release} ({resolved.source})")
    _remember_resolution(kernels_dir, spec, resolved.release)
    kernel = _cached_kernel(kernels_dir, resolved.release, spec, log)
    if kernel is not None and _same_packages(kernel, resolved):
        return kernel
    return _install(spec, resolved, apt, kernels_dir, log)


def fetch(
    spec: str,
    *,
    cache: Path | None = None,
    refresh: bool = False,
    offline: bool | None = None,
    log: Log | None = None,
    notice: Log | None = None,
) -> Kernel:
    """The kernel a spec names, downloaded and unpacked into the cache unless it is there.

    A cached kernel is verified before it is returned, and fetched again if it is broken.
    Without refresh, a spec resolved within the last 24 h is answered from the cache without
    running apt at all; refresh updates the package lists and resolves again (an unchanged
    kernel is still not downloaded again). path: specs are never copied into the cache.

    When the archive cannot be reached (apt-get update or download fails or times out), the
    newest kernel the spec has stood for that is cached and verifies is returned, with a
    warning through notice naming it and the age of that resolution; with none, the KernelError
    says both. offline (None: IOMATRIX_OFFLINE decides) never runs apt at all and answers from
    the cache whatever its age, saying so through notice. notice goes to stderr by default:
    unlike log, these messages are never silenced, since the kernel may be days old.
    """
    parsed = parse_spec(spec)
    say = _once(log or _quiet)
    tell = notice or _to_stderr
    if parsed.kind == "path":
        return _from_path(parsed)
    root = (cache or cache_root()).absolute()
    kernels_dir = root / "kernels"
    if offline is None:
        offline = offline_requested()
    if offline:
        if refresh:
            raise KernelError(
                spec,
                "refresh asks the archive again, which offline use (--offline or "
                "IOMATRIX_OFFLINE) rules out",
            )
        return _offline(parsed, kernels_dir, say, tell)
    if not refresh:
        release = _known_release(parsed, kernels_dir)
        kernel = _cached_kernel(kernels_dir, release, spec, say) if release else None
        if kernel is not None:
            return kernel
    kernels_dir.mkdir(parents=True, exist_ok=True)
    with _fetch_lock(kernels_dir, say):
        _remove_leftovers(kernels_dir)
        if not refresh:
            # Another process may have fetched it while we waited for the lock.
            release = _known_release(parsed, kernels_dir)
            kernel = _cached_kernel(kernels_dir, release, spec, say) if release else None
            if kernel is not None:
                return kernel
        try:
            return _resolve_and_install(parsed, root, kernels_dir, refresh, say)
        except ArchiveUnreachable as unreachable:
            try:
                kernel, resolved_at = _from_cache(parsed, kernels_dir, say)
            except _NothingCached as why:
                raise KernelError(
                    spec,
                    f"the Debian archive cannot be reached ({unreachable.reason}), and {why}: "
                    f"fetch it once the archive can be reached (iomatrix kernels fetch {spec})",
                ) from unreachable
            tell(
                f"warning: {spec}: the Debian archive cannot be reached ({unreachable.reason}); "
                f"{_using(kernel, resolved_at)}"
            )
            return kernel
