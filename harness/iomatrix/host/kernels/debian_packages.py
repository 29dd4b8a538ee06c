"""Debian's package metadata: apt-cache show stanzas, Depends, version order (python-debian),
and resolving a spec to the release and the .debs that hold it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from debian.deb822 import Deb822, PkgRelation
from debian.debian_support import version_compare

from iomatrix.errors import KernelError
from iomatrix.host.kernels.records import AptPackage, ResolvedKernel
from iomatrix.model.kernel_spec import DEBIAN_SUITES, KernelSpec


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
