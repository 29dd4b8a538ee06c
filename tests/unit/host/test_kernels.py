"""Kernel fetching: mirror discovery, apt output parsing, resolution, bzImage headers, the cache.

Pure tests run against real `apt-cache show` output captured in tests/data/apt. Tests marked
`network` fetch real Debian kernels into a temporary cache (about 200 MB of downloads).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.errors import KernelError
from iomatrix.host import kernels
from iomatrix.host.kernels import AptPackage, Kernel
from iomatrix.host.kernels import cache as kernel_cache
from iomatrix.host.kernels import mirror as kernel_mirror
from iomatrix.model import kernel_spec
from iomatrix.store import files
from support.builders import fake_kernel, make_bzimage, write_resolutions
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "apt"
MIRROR = "http://mirror.example/debian"

# ---------------------------------------------------------------------------------------------
# Helpers


class CapturedApt:
    """apt-cache show answered from the captured files; unknown queries find nothing, as in apt."""

    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, ...]] = []

    def __call__(self, queries: Sequence[str]) -> list[AptPackage]:
        self.asked.append(tuple(queries))
        name = self.answers.get(tuple(queries))
        return kernels.parse_packages((DATA / name).read_text()) if name else []


def parts_query(release: str, pinned: str | None) -> tuple[str, ...]:
    image = f"linux-image-{release}"
    return (
        f"{image}={pinned}" if pinned else image,
        f"linux-binary-{release}",
        f"linux-modules-{release}",
        f"linux-base-{release}",
    )


BOOKWORM = "6.1.0-50-amd64"
SID = "7.2.13+deb14-amd64"
CAPTURED = {
    ("linux-image-amd64/bookworm",): "linux-image-amd64_bookworm.txt",
    ("linux-image-amd64/sid",): "linux-image-amd64_sid.txt",
    ("linux-image-amd64",): "linux-image-amd64_all.txt",
    parts_query(BOOKWORM, "6.1.176-1"): f"image-and-parts_{BOOKWORM}.txt",
    parts_query(BOOKWORM, None): f"image-and-parts_{BOOKWORM}.txt",
    parts_query(SID, "7.2.13-1"): f"image-and-parts_{SID}.txt",
    parts_query(SID, None): f"image-and-parts_{SID}.txt",
}


@pytest.fixture
def proc_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Record every command kernels runs, while still running it for real."""
    calls: list[tuple[str, ...]] = []
    real_run = proc.run

    def recording_run(argv: Sequence[str], **kwargs: Any) -> proc.Completed:
        calls.append(tuple(str(a) for a in argv))
        return real_run(argv, **kwargs)

    monkeypatch.setattr(proc, "run", recording_run)
    return calls


# ---------------------------------------------------------------------------------------------
# Mirror discovery

HOST_DEB822 = """\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_mirror_from_deb822_skips_security() -> None:
    debian, security = HOST_DEB822.split("\n\n")
    security_first = security + "\n" + debian
    assert kernels.find_debian_mirror([("debian.sources", security_first)]) == MIRROR


def test_mirror_from_deb822_skips_disabled_source_only_and_third_party() -> None:
    text = """\
Types: deb
URIs: http://disabled.example/debian
Suites: trixie
Enabled: no

Types: deb-src
URIs: http://sources-only.example/debian
Suites: trixie

Types: deb
URIs: https://node.example/node_20.x
Suites: nodistro

Types: deb
URIs: http://snapshot.example/archive/debian/20250520T000000Z
Suites: bookworm

Types: deb deb-src
URIs: https://mirror.example/debian/
  http://second.example/debian
Suites: trixie trixie-updates
"""
    assert kernels.find_debian_mirror([("x.sources", text)]) == "https://mirror.example/debian"


def test_mirror_from_one_line_format() -> None:
    text = """\
# deb http://commented.example/debian bookworm main
deb-src http://sources-only.example/debian bookworm main
deb http://security.example/debian-security bookworm-security main
deb https://apt.example/apt cloud-sdk-bookworm main
deb [ arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg ] \
"""
    # Options in brackets may hold spaces; the URI may end in a slash.
    text = text.replace("\\\n", "") + "http://mirror.example/debian/ sid main\n"
    assert kernels.find_debian_mirror([("sources.list", text)]) == MIRROR


def test_mirror_none_when_only_other_archives() -> None:
    ubuntu = "deb http://archive.example/ubuntu jammy main\n"
    security = "deb http://mirror.example/debian-security bookworm-security main\n"
    assert kernels.find_debian_mirror([("sources.list", ubuntu), ("s.list", security)]) is None
    assert kernels.find_debian_mirror([]) is None


def test_mirror_order_is_sources_list_first(tmp_path: Path) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (tmp_path / "sources.list").write_text("deb http://first.example/debian bookworm main\n")
    (parts / "debian.sources").write_text(HOST_DEB822)
    # apt ignores files with other suffixes, so must we.
    (parts / "old.list.disabled-by-farm").write_text("deb http://off.example/debian sid main\n")
    sources = kernels.host_apt_sources(tmp_path)
    assert [name for name, _ in sources] == ["sources.list", "debian.sources"]
    assert kernels.find_debian_mirror(sources) == "http://first.example/debian"
    (tmp_path / "sources.list").unlink()
    assert kernels.find_debian_mirror(kernels.host_apt_sources(tmp_path)) == MIRROR


def test_debian_mirror_env_wins_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOMATRIX_DEBIAN_MIRROR", "http://env.example/debian/")
    assert kernels.debian_mirror("debian:sid") == "http://env.example/debian"
    monkeypatch.setenv("IOMATRIX_DEBIAN_MIRROR", "env.example/debian bookworm main")
    with pytest.raises(KernelError, match="not an http"):
        kernels.debian_mirror("debian:sid")


def test_debian_mirror_missing_tells_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IOMATRIX_DEBIAN_MIRROR", raising=False)
    monkeypatch.setattr(kernel_mirror, "host_apt_sources", lambda: [("sources.list", "")])
    with pytest.raises(KernelError, match="IOMATRIX_DEBIAN_MIRROR") as caught:
        kernels.debian_mirror("debian:sid")
    assert caught.value.spec == "debian:sid"


# ---------------------------------------------------------------------------------------------
# apt-cache output and versions


def test_parse_packages_real_output() -> None:
    (meta,) = kernels.parse_packages((DATA / "linux-image-amd64_sid.txt").read_text())
    assert meta.name == "linux-image-amd64"
    assert meta.version == "7.2.13-1"
    assert meta.depends == (("linux-base-amd64", "7.2.13-1"), (f"linux-image-{SID}", "7.2.13-1"))
    assert meta.filename == "pool/main/l/linux-signed-amd64/linux-image-amd64_7.2.13-1_amd64.deb"
    assert meta.sha256 == "3ccf308fa3b1615a7bb3b98171f8c912f76c56affed19d3593f2c22fc9fefd4d"
    assert meta.size == 1692
    every = kernels.parse_packages((DATA / "linux-image-amd64_all.txt").read_text())
    assert [p.version for p in every] == [
        "7.2.13-1",
        "6.12.107-1",
        "6.12.95-1~bpo12+1",
        "6.1.176-1",
    ]


def test_parse_depends_alternatives_and_relations() -> None:
    (image, *_) = kernels.parse_packages((DATA / f"image-and-parts_{BOOKWORM}.txt").read_text())
    assert image.depends == (
        ("kmod", None),
        ("linux-base", None),  # ">= 4.3~" is not a pin
        ("initramfs-tools", None),
        ("linux-initramfs-tool", None),
    )
    assert kernels.parse_depends("libc6:any (>= 2.36), foo:amd64 (= 1:2.0-1) | bar") == (
        ("libc6", None),
        ("foo", "1:2.0-1"),
        ("bar", None),
    )
    assert kernels.parse_depends("") == ()


def test_parse_stanzas_continuation_and_skips_undownloadable() -> None:
    text = (
        "Package: a\nVersion: 1\nDescription: short\n more text\n .\n end\n\n\n"
        "Package: b\nVersion: 2\nFilename: pool/b_2.deb\nSHA256: ab\n"
    )
    first, second = kernels.parse_stanzas(text)
    # A continued field keeps its lines as deb822 has them (the reader is python-debian's).
    assert first["Description"] == "short\n more text\n .\n end"
    assert second["Filename"] == "pool/b_2.deb"
    # "a" has no Filename/SHA256 (an installed-only record): it cannot be downloaded.
    assert [p.name for p in kernels.parse_packages(text)] == ["b"]


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("6.1.176-1", "6.12.95-1~bpo12+1"),
        ("6.12.95-1~bpo12+1", "6.12.95-1"),
        ("6.12.95-1", "6.12.107-1"),
        ("6.12.107-1", "7.2.13-1"),
        ("1.0~rc1-1", "1.0-1"),
        ("1.0-1", "1.0-1+b1"),
        ("1.0-1", "1.0a-1"),
        ("1.0a", "1.0+"),
        ("9.9-9", "1:0.1-1"),
        ("1.01", "1.2"),
        ("1.0", "1.0-0.1"),
    ],
)
def test_compare_debian_versions(older: str, newer: str) -> None:
    assert kernels.compare_debian_versions(older, newer) < 0
    assert kernels.compare_debian_versions(newer, older) > 0
    assert kernels.compare_debian_versions(newer, newer) == 0


def test_compare_debian_versions_equal_forms() -> None:
    assert kernels.compare_debian_versions("0:1.0-1", "1.0-1") == 0
    assert kernels.compare_debian_versions("1.001", "1.1") == 0


# ---------------------------------------------------------------------------------------------
# Resolution against captured output


def test_resolve_suite_bookworm() -> None:
    show = CapturedApt(CAPTURED)
    resolved = kernels.resolve(kernel_spec.parse_spec("debian:bookworm"), show)
    assert resolved.release == BOOKWORM
    assert resolved.source == f"debian bookworm: linux-image-{BOOKWORM} 6.1.176-1"
    (image,) = resolved.packages
    assert (image.name, image.version, image.size) == (
        f"linux-image-{BOOKWORM}",
        "6.1.176-1",
        70305560,
    )
    assert show.asked == [("linux-image-amd64/bookworm",), parts_query(BOOKWORM, "6.1.176-1")]


def test_resolve_suite_sid_takes_the_split_packages() -> None:
    resolved = kernels.resolve(kernel_spec.parse_spec("debian:sid"), CapturedApt(CAPTURED))
    assert resolved.release == SID
    assert [(p.name, p.version) for p in resolved.packages] == [
        (f"linux-image-{SID}", "7.2.13-1"),
        (f"linux-base-{SID}", "7.2.13-1"),
        (f"linux-binary-{SID}", "7.2.13-1"),
        (f"linux-modules-{SID}", "7.2.13-1"),
    ]
    modules = resolved.packages[3]
    assert modules.filename == f"pool/main/l/linux/linux-modules-{SID}_7.2.13-1_amd64.deb"


def test_resolve_abi_release() -> None:
    show = CapturedApt(CAPTURED)
    resolved = kernels.resolve(kernel_spec.parse_spec(f"debian:{SID}"), show)
    assert resolved.release == SID
    assert resolved.source == f"debian: linux-image-{SID} 7.2.13-1"
    assert len(resolved.packages) == 4
    assert show.asked == [parts_query(SID, None)]


def test_resolve_package_version() -> None:
    resolved = kernels.resolve(kernel_spec.parse_spec("debian:6.1.176-1"), CapturedApt(CAPTURED))
    assert resolved.release == BOOKWORM
    assert (
        resolved.source == f"debian linux-image-amd64 6.1.176-1: linux-image-{BOOKWORM} 6.1.176-1"
    )


def test_resolve_unknown_version_lists_the_known_ones() -> None:
    with pytest.raises(KernelError, match=r"available: 6\.1\.176-1, 6\.12\.107-1"):
        kernels.resolve(kernel_spec.parse_spec("debian:6.1.1-1"), CapturedApt(CAPTURED))


def test_resolve_unknown_abi_and_missing_part() -> None:
    with pytest.raises(KernelError, match=r"no package linux-image-6\.1\.0-1-amd64"):
        kernels.resolve(kernel_spec.parse_spec("debian:6.1.0-1-amd64"), CapturedApt(CAPTURED))
    # The sid image without the parts it pins cannot be unpacked into a bootable kernel.
    captured = kernels.parse_packages((DATA / f"image-and-parts_{SID}.txt").read_text())
    image_only = [p for p in captured if p.name.startswith("linux-image-")]
    with pytest.raises(KernelError, match=f"needs linux-base-{re.escape(SID)} 7.2.13-1"):
        kernels.resolve(kernel_spec.parse_spec(f"debian:{SID}"), lambda _queries: image_only)


def test_resolve_newest_image_across_suites() -> None:
    every = kernels.parse_packages((DATA / "linux-image-amd64_all.txt").read_text())
    assert kernels.newest(every).version == "7.2.13-1"
    assert kernels.newest(list(reversed(every))).version == "7.2.13-1"


# ---------------------------------------------------------------------------------------------
# The private apt setup (argv checked with a fake proc.run; the network tests run it for real)


def test_apt_options_use_only_private_paths(tmp_path: Path) -> None:
    apt_dir = tmp_path / "apt"
    options = kernels.apt_options(apt_dir)
    assert options[:2] == ["-c", str(apt_dir / "etc" / "apt.conf")]
    settings = dict(o.split("=", 1) for o in options[3::2])
    assert settings == {
        "Dir::Etc::SourceList": str(apt_dir / "etc" / "sources.list"),
        "Dir::Etc::SourceParts": "/dev/null",
        "Dir::State::Lists": str(apt_dir / "lists"),
        "Dir::Cache::Archives": str(apt_dir / "archives"),
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "Acquire::Languages": "none",
        "APT::Sandbox::User": "root",
    }
    config = kernels.apt_config_text(apt_dir)
    for hook in ("Pre-Invoke", "Post-Invoke", "Post-Invoke-Success"):
        assert f"#clear APT::Update::{hook};" in config
    assert 'Dir::State::status "/dev/null";' in config
    assert "/var/" not in config
    assert "/etc/apt" not in config


def test_sources_list_names_every_suite_signed() -> None:
    lines = kernels.apt_sources_list(MIRROR).splitlines()
    keyring = "signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"
    assert lines == [
        f"deb [{keyring} target=Packages] {MIRROR} {s} main" for s in kernel_spec.DEBIAN_SUITES
    ]


class FakeRun:
    """Stands in for proc.run to check argv and result parsing only."""

    def __init__(self, stdout: str = "", stderr: str = "", returncode: int = 0) -> None:
        self.calls: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.stdout, self.stderr, self.returncode = stdout, stderr, returncode
        self.on_call: Any = None

    def __call__(self, argv: Sequence[str], **kwargs: Any) -> proc.Completed:
        self.calls.append((tuple(argv), kwargs))
        if self.on_call is not None:
            self.on_call(argv, kwargs)
        return proc.Completed(tuple(argv), self.returncode, self.stdout, self.stderr, 0.1)


def test_apt_show_argv_and_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRun(stdout=(DATA / "linux-image-amd64_bookworm.txt").read_text())
    monkeypatch.setattr(proc, "run", fake)
    apt = kernels.PrivateApt(tmp_path / "apt", MIRROR, "debian:bookworm", print)
    (meta,) = apt.show(["linux-image-amd64/bookworm"])
    assert meta.depends == ((f"linux-image-{BOOKWORM}", "6.1.176-1"),)
    ((argv, kwargs),) = fake.calls
    assert argv == (
        "apt-cache",
        *kernels.apt_options(tmp_path / "apt"),
        "show",
        "linux-image-amd64/bookworm",
    )
    assert kwargs["ok_codes"] == (0, 100)
    # apt-cache exits 100 when a single name is unknown: that is "nothing found", not a failure.
    monkeypatch.setattr(proc, "run", FakeRun(stderr="E: No packages found\n", returncode=100))
    assert apt.show(["linux-image-1.0-1-amd64"]) == []
    monkeypatch.setattr(
        proc, "run", FakeRun(stderr="E: The list of sources could not be read.", returncode=100)
    )
    with pytest.raises(KernelError, match="could not be read"):
        apt.show(["linux-image-amd64"])


def test_apt_download_runs_in_a_folder_and_checks_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (image,) = kernels.parse_packages((DATA / f"image-and-parts_{BOOKWORM}.txt").read_text())

    def write_deb(_argv: Sequence[str], kwargs: dict[str, Any]) -> None:
        (kwargs["cwd"] / Path(image.filename).name).write_bytes(b"not the archive's file")

    fake = FakeRun()
    fake.on_call = write_deb
    monkeypatch.setattr(proc, "run", fake)
    apt = kernels.PrivateApt(tmp_path / "apt", MIRROR, "debian:bookworm", print)
    with pytest.raises(KernelError, match="the archive index says 7b5597"):
        apt.download([image], tmp_path)
    ((argv, kwargs),) = fake.calls
    assert argv[0] == "apt-get"
    assert argv[-2:] == ("download", f"linux-image-{BOOKWORM}=6.1.176-1")
    assert kwargs["cwd"] == tmp_path
    assert kwargs["timeout_s"] >= 600


# ---------------------------------------------------------------------------------------------
# bzImage headers and path: kernels


def test_release_from_synthetic_bzimage() -> None:
    header = make_bzimage(b"6.18.0-rc1+ (me@box) #3 SMP PREEMPT_DYNAMIC Fri Nov 20 2026")
    assert kernels.release_from_bzimage(header) == "6.18.0-rc1+"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (b"\0" * 0x1000, "not an x86 bzImage"),
        (make_bzimage(b"6.1.0", protocol=0x0104), "no version string"),
        (make_bzimage(b"", pointer=0), "no version string"),
        (make_bzimage(b"6.1.0")[:0x44C2], "not NUL-terminated"),
        (make_bzimage(b" "), "does not start with a release"),
    ],
)
def test_release_from_bzimage_rejects(header: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        kernels.release_from_bzimage(header)


def test_path_kernel_reads_release_and_stays_out_of_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    image = tmp_path / "bzImage"
    image.write_bytes(make_bzimage(b"6.18.0-iomatrix (me@box) #1 SMP"))
    kernel = kernels.fetch(kernel_spec.parse_spec(f"path:{image}"))
    assert kernel.release == "6.18.0-iomatrix"
    assert kernel.vmlinuz == str(image)
    assert kernel.modules_dir is None
    assert kernel.vmlinuz_sha256 == files.sha256_file(image)
    assert not (tmp_path / "cache").exists()


def test_path_kernel_modules_need_modules_dep(tmp_path: Path) -> None:
    image = tmp_path / "bzImage"
    image.write_bytes(make_bzimage(b"6.18.0 (me@box) #1 SMP"))
    modules = tmp_path / "modules"
    modules.mkdir()
    with pytest.raises(KernelError, match=r"no modules\.dep: run depmod"):
        kernels.fetch(kernel_spec.parse_spec(f"path:{image},modules={modules}"))
    (modules / "modules.dep").write_text("")
    assert kernels.fetch(
        kernel_spec.parse_spec(f"path:{image},modules={modules}")
    ).modules_dir == str(modules)
    with pytest.raises(KernelError, match="does not exist"):
        kernels.fetch(kernel_spec.parse_spec(f"path:{tmp_path}/missing"))
    (tmp_path / "notakernel").write_bytes(b"\0" * 4096)
    with pytest.raises(KernelError, match="not an x86 bzImage"):
        kernels.fetch(kernel_spec.parse_spec(f"path:{tmp_path}/notakernel"))


# ---------------------------------------------------------------------------------------------
# verify, cached and the cache fast path


def test_verify_detects_a_tampered_vmlinuz(tmp_path: Path) -> None:
    kernel = fake_kernel(tmp_path)
    kernels.verify(kernel)
    image = Path(kernel.vmlinuz)
    data = bytearray(image.read_bytes())
    data[-1] ^= 0xFF
    image.write_bytes(bytes(data))
    with pytest.raises(KernelError, match=r"has sha256 [0-9a-f]{64}, expected"):
        kernels.verify(kernel)
    image.unlink()
    with pytest.raises(KernelError, match="is missing"):
        kernels.verify(kernel)


def test_verify_needs_modules_dep(tmp_path: Path) -> None:
    kernel = fake_kernel(tmp_path)
    assert kernel.modules_dir is not None
    (Path(kernel.modules_dir) / "modules.dep").unlink()
    with pytest.raises(KernelError, match=r"no modules\.dep"):
        kernels.verify(kernel)


def test_cached_lists_good_entries_and_reports_broken_ones(tmp_path: Path) -> None:
    kernels_dir = tmp_path / "kernels"
    good = fake_kernel(kernels_dir, release="6.1.0-1-amd64")
    tampered = fake_kernel(kernels_dir, release="6.1.0-2-amd64")
    Path(tampered.vmlinuz).write_bytes(b"changed")
    unfinished = fake_kernel(kernels_dir, release="6.1.0-3-amd64")
    (Path(kernels_dir) / unfinished.release / "manifest.json").unlink()
    (kernels_dir / ".partial-6.1.0-4-amd64-x").mkdir()
    messages: list[str] = []
    assert kernels.cached(tmp_path, log=messages.append) == [good]
    assert len(messages) == 2
    assert re.search(r"6\.1\.0-2-amd64.*sha256", messages[0])
    assert re.search(r"6\.1\.0-3-amd64.*unfinished", messages[1])
    assert kernels.cached(tmp_path / "empty") == []


def test_a_cache_mounted_elsewhere_serves_its_own_files(tmp_path: Path) -> None:
    """The runner image mounts the host's cache at /root/.cache/iomatrix; a host whose $HOME is
    elsewhere (a CI runner's, a cold .ci/run's) wrote manifests naming its own path. Each side
    must use the files of the entry it reads: a cold .ci/run of 2026-11-27 had the host boot
    another cache's kernel, and the container fetch the kernel again."""
    host = tmp_path / "home" / ".cache" / "iomatrix"
    kernel = fake_kernel(host / "kernels", release="6.1.0-98-amd64")
    mounted = tmp_path / "container-root" / ".cache" / "iomatrix"
    mounted.parent.mkdir(parents=True)
    host.rename(mounted)  # the same files, now seen at the container's path
    (served,) = kernels.cached(mounted)
    entry = mounted / "kernels" / "6.1.0-98-amd64"
    assert served.vmlinuz == str(entry / "boot" / "vmlinuz-6.1.0-98-amd64")
    # The release's name twice in the modules path: the entry's own part is kept whole.
    assert served.modules_dir == str(entry / "lib" / "modules" / "6.1.0-98-amd64")
    assert served.vmlinuz_sha256 == kernel.vmlinuz_sha256
    # A path outside any entry is left as written, and verify says it is missing.
    assert kernel_cache.in_entry("/elsewhere/vmlinuz", entry) == "/elsewhere/vmlinuz"
    # ... as is one whose tail climbs out of the entry.
    climbing = "/x/kernels/6.1.0-98-amd64/../../../etc/passwd"
    assert kernel_cache.in_entry(climbing, entry) == climbing


def test_fetch_serves_a_verified_cache_entry_without_commands(
    tmp_path: Path, proc_calls: list[tuple[str, ...]]
) -> None:
    kernel = fake_kernel(tmp_path / "kernels", release="6.1.0-99-amd64")
    # An ABI spec names its cache folder directly: no resolution needed.
    assert kernels.fetch(kernel_spec.parse_spec("debian:6.1.0-99-amd64"), cache=tmp_path) == kernel
    # A suite is answered from the resolution cache while it is fresh.
    entry = {"release": "6.1.0-99-amd64", "resolved_at": time.time() - 3600}
    (tmp_path / "kernels" / "resolved.json").write_text(json.dumps({"debian:bookworm": entry}))
    served = kernels.fetch(kernel_spec.parse_spec("debian:bookworm"), cache=tmp_path)
    assert served == kernel.model_copy(update={"spec": "debian:bookworm"})
    assert proc_calls == []


def test_resolution_cache_expires_after_a_day(tmp_path: Path) -> None:
    kernels_dir = tmp_path / "kernels"
    kernels_dir.mkdir()
    spec = kernel_spec.parse_spec("debian:sid")
    assert kernel_cache.known_release(spec, kernels_dir) is None
    kernel_cache.remember_resolution(kernels_dir, "debian:sid", SID)
    assert kernel_cache.known_release(spec, kernels_dir) == SID
    stale = {"debian:sid": {"release": SID, "resolved_at": time.time() - kernels.MAX_AGE_S - 1}}
    (kernels_dir / "resolved.json").write_text(json.dumps(stale))
    assert kernel_cache.known_release(spec, kernels_dir) is None
    (kernels_dir / "resolved.json").write_text("{not json")
    assert kernel_cache.known_release(spec, kernels_dir) is None


def test_resolutions_keep_a_history_newest_first(tmp_path: Path) -> None:
    kernels_dir = tmp_path / "kernels"
    # A cache written before the history was kept: one entry per spec.
    old = {"debian:sid": {"release": "7.0.0-1-amd64", "resolved_at": 1.0}}
    kernels_dir.mkdir()
    (kernels_dir / "resolved.json").write_text(json.dumps(old))
    for n in (2, 3, 2, *range(4, 4 + kernel_cache.HISTORY)):
        kernel_cache.remember_resolution(kernels_dir, "debian:sid", f"7.0.0-{n}-amd64")
    candidates = kernel_cache.candidates(kernel_spec.parse_spec("debian:sid"), kernels_dir)
    releases = [release for release, _ in candidates]
    # Newest first, each release once, at most HISTORY of them: the oldest fall off.
    assert releases == [f"7.0.0-{n}-amd64" for n in range(3 + kernel_cache.HISTORY, 3, -1)]
    sid = kernel_spec.parse_spec("debian:sid")
    assert kernel_cache.known_release(sid, kernels_dir) == releases[0]


def test_apt_failure_is_one_line_of_apts_own_words() -> None:
    refused = proc.CommandError(
        ("apt-get", "update"),
        100,
        "Reading package lists...\n",
        "E: Failed to fetch http://127.0.0.1:9/debian/dists/bookworm/InRelease  Could not "
        "connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)\n"
        "E: Some index files failed to download.\n",
    )
    assert kernels.apt_failure("apt-get update", refused) == (
        "Failed to fetch http://127.0.0.1:9/debian/dists/bookworm/InRelease Could not connect "
        "to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)"
    )
    timeout = proc.CommandTimeout(
        ("apt-get",), None, reason="timed out after 300 s and was killed", timeout_s=300
    )
    assert kernels.apt_failure("apt-get update", timeout) == (
        "apt-get update timed out after 300 s and was killed"
    )
    silent = proc.CommandError(("apt-get",), 100)
    assert kernels.apt_failure("apt-get download", silent) == (
        "apt-get download exited with status 100"
    )


# ---------------------------------------------------------------------------------------------
# Offline use and an unreachable archive (the real unreachable mirror: the network tests below
# and test_cli's kernels fetch against a closed loopback port)

NEWER, OLDER = "6.1.0-50-amd64", "6.1.0-49-amd64"


def test_offline_serves_the_newest_cached_resolution_whatever_its_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_commands: list[Sequence[str]]
) -> None:
    kernels_dir = tmp_path / "kernels"
    newer = fake_kernel(kernels_dir, release=NEWER)
    older = fake_kernel(kernels_dir, release=OLDER)
    write_resolutions(kernels_dir, "debian:bookworm", (NEWER, 3), (OLDER, 10))
    write_resolutions(kernels_dir, "debian:6.1.176-1", (NEWER, 40))
    notices: list[str] = []
    kernel = kernels.fetch(
        kernel_spec.parse_spec("debian:bookworm"),
        cache=tmp_path,
        offline=True,
        notice=notices.append,
    )
    assert kernel == newer.model_copy(update={"spec": "debian:bookworm"})
    assert notices == [f"debian:bookworm: offline; using the cached {NEWER}, resolved 3 days ago"]
    # IOMATRIX_OFFLINE=1 does the same; a package version and an ABI release are served too,
    # the ABI release without a notice (it names one kernel: nothing to be out of date).
    monkeypatch.setenv("IOMATRIX_OFFLINE", "1")
    notices.clear()
    assert kernels.fetch(
        kernel_spec.parse_spec("debian:6.1.176-1"), cache=tmp_path, notice=notices.append
    ) == (newer.model_copy(update={"spec": "debian:6.1.176-1"}))
    assert (
        kernels.fetch(
            kernel_spec.parse_spec(f"debian:{OLDER}"), cache=tmp_path, notice=notices.append
        )
        == older
    )
    assert notices == [f"debian:6.1.176-1: offline; using the cached {NEWER}, resolved 40 days ago"]
    image = tmp_path / "bzImage"
    image.write_bytes(make_bzimage(b"6.18.0-mine (me@box) #1 SMP"))
    assert kernels.fetch(kernel_spec.parse_spec(f"path:{image}")).release == "6.18.0-mine"
    # A newest kernel whose files fail verification is skipped, never served.
    Path(newer.vmlinuz).write_bytes(b"changed")
    notices.clear()
    messages: list[str] = []
    kernel = kernels.fetch(
        kernel_spec.parse_spec("debian:bookworm"),
        cache=tmp_path,
        log=messages.append,
        notice=notices.append,
    )
    assert kernel.release == OLDER
    assert notices == [f"debian:bookworm: offline; using the cached {OLDER}, resolved 10 days ago"]
    assert any(f"cached kernel {NEWER} is unusable, skipping it" in m for m in messages)
    assert no_commands == []


def test_offline_refuses_what_is_not_cached(
    tmp_path: Path, no_commands: list[Sequence[str]]
) -> None:
    kernels_dir = tmp_path / "kernels"
    with pytest.raises(KernelError) as caught:
        kernels.fetch(kernel_spec.parse_spec("debian:trixie"), cache=tmp_path, offline=True)
    assert str(caught.value) == (
        "kernel 'debian:trixie': offline (--offline or IOMATRIX_OFFLINE), and nothing is cached "
        "for this spec: it must be fetched online first (iomatrix kernels fetch debian:trixie)"
    )
    with pytest.raises(KernelError, match=r"nothing is cached.*kernels fetch debian:6\.1\.0-7-"):
        kernels.fetch(kernel_spec.parse_spec("debian:6.1.0-7-amd64"), cache=tmp_path, offline=True)
    # Resolved once, but its kernel is gone or broken: the message says which and why.
    broken = fake_kernel(kernels_dir, release=NEWER)
    Path(broken.vmlinuz).write_bytes(b"changed")
    write_resolutions(kernels_dir, "debian:bookworm", (NEWER, 3), (OLDER, 10))
    with pytest.raises(KernelError) as caught:
        kernels.fetch(kernel_spec.parse_spec("debian:bookworm"), cache=tmp_path, offline=True)
    assert re.search(
        rf"nothing usable is cached for this spec \({re.escape(NEWER)} \(resolved 3 days ago\): "
        rf"vmlinuz \S+ has sha256 [0-9a-f]{{64}}, expected .*; {re.escape(OLDER)} \(resolved 10 "
        r"days ago\): is not in the cache\): it must be fetched online first",
        str(caught.value),
    ), caught.value
    with pytest.raises(KernelError, match="refresh asks the archive again"):
        kernels.fetch(
            kernel_spec.parse_spec("debian:bookworm"), cache=tmp_path, offline=True, refresh=True
        )
    assert no_commands == []
    assert not kernels_dir.joinpath("apt").exists()
    assert not (tmp_path / "apt").exists()


def test_offline_requested_by_flag_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IOMATRIX_OFFLINE", raising=False)
    assert not kernels.offline_requested()
    assert kernels.offline_requested(True)
    monkeypatch.setenv("IOMATRIX_OFFLINE", "0")
    assert not kernels.offline_requested()
    monkeypatch.setenv("IOMATRIX_OFFLINE", "1")
    assert kernels.offline_requested()


class FakeArchive:
    """Stands in for proc.run as apt would answer: update and download fail as `fail` says,
    apt-cache show answers from the captured output. Records every argv."""

    def __init__(self, fail: dict[str, proc.CommandError]) -> None:
        self.fail = fail
        self.argvs: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], **_kwargs: Any) -> proc.Completed:
        args = tuple(argv)
        self.argvs.append(args)
        command = next(a for a in ("update", "show", "download") if a in args)
        if command in self.fail:
            raise self.fail[command]
        stdout = ""
        if command == "show":
            name = CAPTURED.get(args[args.index("show") + 1 :])
            stdout = (DATA / name).read_text() if name else ""
        return proc.Completed(args, 0, stdout, "", 0.1)

    def commands(self) -> list[str]:
        return [next(a for a in ("update", "show", "download") if a in x) for x in self.argvs]


REFUSED = (
    "E: Failed to fetch http://127.0.0.1:9/debian/dists/bookworm/InRelease  Could not connect "
    "to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)\n"
)


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (
            proc.CommandError(("apt-get",), 100, "", REFUSED),
            "Failed to fetch http://127.0.0.1:9/debian/dists/bookworm/InRelease Could not "
            "connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)",
        ),
        (
            proc.CommandTimeout(("apt-get",), None, reason="timed out after 300 s and was killed"),
            "apt-get update timed out after 300 s and was killed",
        ),
    ],
)
def test_failed_update_falls_back_to_the_cache_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: proc.CommandError, reason: str
) -> None:
    monkeypatch.setenv("IOMATRIX_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    cached = fake_kernel(tmp_path / "kernels", release=NEWER)
    write_resolutions(tmp_path / "kernels", "debian:bookworm", (NEWER, 3))
    archive = FakeArchive({"update": failure})
    monkeypatch.setattr(proc, "run", archive)
    notices: list[str] = []
    kernel = kernels.fetch(
        kernel_spec.parse_spec("debian:bookworm"), cache=tmp_path, notice=notices.append
    )
    assert kernel == cached.model_copy(update={"spec": "debian:bookworm"})
    assert notices == [
        f"warning: debian:bookworm: the Debian archive cannot be reached ({reason}); "
        f"using the cached {NEWER}, resolved 3 days ago"
    ]
    assert archive.commands() == ["update"]
    # A failed update does not make the lists count as fresh: the next fetch asks again.
    assert not (tmp_path / "apt" / "updated").exists()


def test_failed_download_falls_back_to_an_older_cached_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The archive has a new kernel (BOOKWORM), but its download fails: the one cached serves."""
    monkeypatch.setenv("IOMATRIX_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    kernels_dir = tmp_path / "kernels"
    cached = fake_kernel(kernels_dir, release=OLDER)
    write_resolutions(kernels_dir, "debian:bookworm", (OLDER, 2))
    lost = proc.CommandError(
        ("apt-get",), 100, "", REFUSED.replace("dists/bookworm/InRelease", "pool/x.deb")
    )
    archive = FakeArchive({"download": lost})
    monkeypatch.setattr(proc, "run", archive)
    kernel = kernels.fetch(kernel_spec.parse_spec("debian:bookworm"), cache=tmp_path)
    assert kernel == cached.model_copy(update={"spec": "debian:bookworm"})
    assert archive.commands() == ["update", "show", "show", "download"]
    # The warning goes to stderr by default: it is not a log line a caller may silence.
    assert capsys.readouterr().err == (
        "iomatrix: warning: debian:bookworm: the Debian archive cannot be reached (Failed to "
        "fetch http://127.0.0.1:9/debian/pool/x.deb Could not connect to 127.0.0.1:9 "
        f"(127.0.0.1). - connect (111: Connection refused)); using the cached {OLDER}, "
        "resolved 2 days ago\n"
    )
    # The new resolution is remembered before the older one, which stays for the next time.
    bookworm = kernel_spec.parse_spec("debian:bookworm")
    releases = [r for r, _ in kernel_cache.candidates(bookworm, kernels_dir)]
    assert releases == [BOOKWORM, OLDER]
    assert not list(kernels_dir.glob(".partial-*"))


def test_unreachable_with_nothing_usable_cached_says_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IOMATRIX_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    monkeypatch.setattr(
        proc, "run", FakeArchive({"update": proc.CommandError(("apt-get",), 100, "", REFUSED)})
    )
    broken = fake_kernel(tmp_path / "kernels", release=NEWER)
    (Path(broken.modules_dir or "") / "modules.dep").unlink()
    write_resolutions(tmp_path / "kernels", "debian:bookworm", (NEWER, 3))
    notices: list[str] = []
    with pytest.raises(KernelError) as caught:
        kernels.fetch(
            kernel_spec.parse_spec("debian:bookworm"), cache=tmp_path, notice=notices.append
        )
    message = str(caught.value)
    assert message.startswith(
        "kernel 'debian:bookworm': the Debian archive cannot be reached (Failed to fetch "
    )
    assert f"and nothing usable is cached for this spec ({NEWER} (resolved 3 days ago): " in message
    assert "has no modules.dep" in message
    assert message.endswith("(iomatrix kernels fetch debian:bookworm)")
    assert notices == []


# ---------------------------------------------------------------------------------------------
# Unpacking real .debs (built here with dpkg-deb, unpacked and indexed with the real tools)


def build_deb(tmp_path: Path, name: str, files: dict[str, bytes]) -> Path:
    root = tmp_path / f"{name}.root"
    for relative, content in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content)
    (root / "DEBIAN").mkdir(parents=True)
    control = {
        "Package": name,
        "Version": "1.0-1",
        "Architecture": "amd64",
        "Maintainer": "Test <test@example.invalid>",
        "Description": "test package",
    }
    (root / "DEBIAN" / "control").write_text("".join(f"{k}: {v}\n" for k, v in control.items()))
    deb = tmp_path / f"{name}_1.0-1_amd64.deb"
    proc.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], timeout_s=60)
    return deb


def test_unpack_bookworm_layout(tmp_path: Path) -> None:
    release = "6.1.0-99-amd64"
    image = make_bzimage(f"{release} (debian-kernel@example) #1 SMP".encode())
    deb = build_deb(
        tmp_path,
        f"linux-image-{release}",
        {
            f"boot/vmlinuz-{release}": image,
            f"lib/modules/{release}/modules.order": b"",
            f"lib/modules/{release}/kernel/fs/.keep": b"",
        },
    )
    tree, scratch = tmp_path / "tree", tmp_path / "scratch"
    scratch.mkdir()
    vmlinuz, modules = kernels.unpack_kernel("debian:x", [deb], release, tree, scratch)
    assert vmlinuz == tree / "boot" / f"vmlinuz-{release}"
    assert modules == tree / "lib" / "modules" / release
    assert (modules / "modules.dep").is_file()
    assert not deb.exists()  # .debs are deleted once unpacked
    assert list(scratch.iterdir()) == []


def test_unpack_sid_split_layout(tmp_path: Path) -> None:
    release = "7.2.99+deb14-amd64"
    image = make_bzimage(f"{release} (debian-kernel@example) #1 SMP".encode())
    base = f"usr/lib/modules/{release}"
    debs = [
        build_deb(
            tmp_path,
            f"linux-base-{release}",
            {f"{base}/modules.builtin": b"kernel/fs/ext4/ext4.ko\n", f"{base}/modules.order": b""},
        ),
        build_deb(tmp_path, f"linux-binary-{release}", {f"{base}/vmlinuz": image}),
        build_deb(tmp_path, f"linux-modules-{release}", {f"{base}/kernel/fs/.keep": b""}),
    ]
    tree, scratch = tmp_path / "tree", tmp_path / "scratch"
    scratch.mkdir()
    vmlinuz, modules = kernels.unpack_kernel("debian:sid", debs, release, tree, scratch)
    assert vmlinuz == tree / base / "vmlinuz"
    assert modules == tree / base
    assert (modules / "modules.dep").is_file()
    assert (modules / "modules.builtin.bin").is_file()  # depmod indexed the built-ins
    assert not (tree / "lib").exists()  # the tree is left as the packages made it


def test_unpack_rejects_an_image_of_another_release(tmp_path: Path) -> None:
    deb = build_deb(
        tmp_path, "linux-image-x", {"boot/vmlinuz-6.1.0-1-amd64": make_bzimage(b"6.1.0-2-amd64 #1")}
    )
    with pytest.raises(KernelError, match=r"is release 6\.1\.0-2-amd64, expected 6\.1\.0-1-amd64"):
        kernels.unpack_kernel("debian:x", [deb], "6.1.0-1-amd64", tmp_path / "t", tmp_path)


# ---------------------------------------------------------------------------------------------
# Real fetches from the Debian archive


@pytest.fixture(scope="module")
def real_cache(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, Kernel, list[str]]]:
    """debian:bookworm fetched into a fresh IOMATRIX_CACHE: (cache, kernel, log messages)."""
    cache = tmp_path_factory.mktemp("iomatrix-cache")
    messages: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IOMATRIX_CACHE", str(cache))
        started = time.monotonic()
        kernel = kernels.fetch(kernel_spec.parse_spec("debian:bookworm"), log=messages.append)
        messages.append(f"fetch took {time.monotonic() - started:.1f} s")
    yield cache, kernel, messages
    # Over 500 MB unpacked: do not leave it in pytest's kept temp folders.
    shutil.rmtree(cache)


@pytest.mark.network
def test_fetch_bookworm(real_cache: tuple[Path, Kernel, list[str]]) -> None:
    cache, kernel, messages = real_cache
    assert re.fullmatch(r"6\.1\.0-\d+-amd64", kernel.release)
    assert kernel.source.startswith(f"debian bookworm: linux-image-{kernel.release} 6.1.")
    assert kernel.vmlinuz == str(
        cache / "kernels" / kernel.release / "boot" / f"vmlinuz-{kernel.release}"
    )
    assert kernels.read_release(Path(kernel.vmlinuz)) == kernel.release
    kernels.verify(kernel)
    assert kernel.modules_dir is not None
    modules_dep = (Path(kernel.modules_dir) / "modules.dep").read_text()
    assert "kernel/fs/xfs/xfs.ko:" in modules_dep
    assert [p.name for p in kernel.packages] == [f"linux-image-{kernel.release}"]
    manifest = cache / "kernels" / kernel.release / "manifest.json"
    assert Kernel.model_validate_json(manifest.read_text()) == kernel
    # The private apt setup works without warnings (APT::Sandbox::User=root), and nothing
    # large or temporary is left behind.
    assert not [m for m in messages if "W:" in m or "E:" in m], messages
    assert not list(cache.rglob("*.deb"))
    assert not list((cache / "kernels").glob(".partial-*"))


@pytest.mark.network
def test_second_fetch_is_served_from_the_cache(
    real_cache: tuple[Path, Kernel, list[str]], proc_calls: list[tuple[str, ...]]
) -> None:
    cache, kernel, _ = real_cache
    assert kernels.fetch(kernel_spec.parse_spec("debian:bookworm"), cache=cache) == kernel
    assert (
        kernels.fetch(kernel_spec.parse_spec(f"debian:{kernel.release}"), cache=cache).vmlinuz
        == kernel.vmlinuz
    )
    assert proc_calls == []


@pytest.mark.network
def test_refresh_resolves_again_but_keeps_the_unpacked_kernel(
    real_cache: tuple[Path, Kernel, list[str]], proc_calls: list[tuple[str, ...]]
) -> None:
    cache, kernel, _ = real_cache
    assert (
        kernels.fetch(kernel_spec.parse_spec("debian:bookworm"), cache=cache, refresh=True)
        == kernel
    )
    assert any(argv[0] == "apt-get" and "update" in argv for argv in proc_calls)
    assert any(argv[0] == "apt-cache" and "show" in argv for argv in proc_calls)
    assert not [argv for argv in proc_calls if "download" in argv]


@pytest.mark.network
def test_broken_cache_entry_is_fetched_again(
    real_cache: tuple[Path, Kernel, list[str]], proc_calls: list[tuple[str, ...]]
) -> None:
    cache, kernel, _ = real_cache
    with Path(kernel.vmlinuz).open("r+b") as image:
        image.seek(4096)
        image.write(b"tampered")
    messages: list[str] = []
    again = kernels.fetch(
        kernel_spec.parse_spec("debian:bookworm"), cache=cache, log=messages.append
    )
    assert again == kernel
    kernels.verify(again)
    assert any("unusable" in m for m in messages)
    assert [argv for argv in proc_calls if "download" in argv]
    assert not [argv for argv in proc_calls if "update" in argv]  # the lists are still fresh


@pytest.mark.network
def test_fetch_sid_split_packages(real_cache: tuple[Path, Kernel, list[str]]) -> None:
    cache, bookworm, _ = real_cache
    kernel = kernels.fetch(kernel_spec.parse_spec("debian:sid"), cache=cache)
    assert re.fullmatch(r"7\.\d+\.\d+\+deb\d+-amd64", kernel.release)
    release = kernel.release
    assert {p.name for p in kernel.packages} == {
        f"linux-{part}-{release}" for part in ("image", "binary", "modules", "base")
    }
    modules = cache / "kernels" / release / "usr" / "lib" / "modules" / release
    assert kernel.vmlinuz == str(modules / "vmlinuz")
    assert kernel.modules_dir == str(modules)
    assert kernels.read_release(modules / "vmlinuz") == release
    kernels.verify(kernel)
    assert "kernel/fs/xfs/xfs.ko.xz:" in (modules / "modules.dep").read_text()
    assert (modules / "modules.builtin").is_file()
    assert [k.release for k in kernels.cached(cache)] == sorted([bookworm.release, release])
    assert os.access(cache / "kernels" / release / "manifest.json", os.R_OK)


@pytest.mark.network
def test_an_unreachable_mirror_falls_back_to_the_cached_kernel(
    real_cache: tuple[Path, Kernel, list[str]],
    proc_calls: list[tuple[str, ...]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A laptop offline since the day before yesterday: real apt against a closed loopback port."""
    cache, kernel, _ = real_cache
    resolved = cache / "kernels" / "resolved.json"
    saved = resolved.read_text()
    monkeypatch.setenv("IOMATRIX_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    try:
        write_resolutions(cache / "kernels", "debian:bookworm", (kernel.release, 2))
        served = kernels.fetch(kernel_spec.parse_spec("debian:bookworm"), cache=cache)
    finally:
        resolved.write_text(saved)
    assert served == kernel
    err = capsys.readouterr().err
    assert err.startswith(
        "iomatrix: warning: debian:bookworm: the Debian archive cannot be reached (Failed to "
        "fetch http://127.0.0.1:9/debian/dists/"
    ), err
    assert err.endswith(f"); using the cached {kernel.release}, resolved 2 days ago\n"), err
    assert err.count("\n") == 1
    assert [argv for argv in proc_calls if "update" in argv]  # it did try the archive
    assert not [argv for argv in proc_calls if "download" in argv]
    assert not list(cache.rglob("*.deb"))
    assert not list((cache / "kernels").glob(".partial-*"))


@pytest.mark.parametrize(
    "raw",
    ["path:/boot/vmlinuz\n", "debian:6.1.176-1\n", "debian:6.1.0-28-amd64\n", "debian:bookworm\n"],
)
def test_parse_spec_rejects_a_trailing_newline(raw: str) -> None:
    # `$` in a regex matches before a final newline; specs are matched whole instead.
    with pytest.raises(KernelError):
        kernel_spec.parse_spec(raw)
