"""A project-private apt: apt-get and apt-cache over <cache>/apt, with the host's configuration
read for its site settings (proxies) but none of its state."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from iomatrix import proc
from iomatrix.errors import ArchiveUnreachable, KernelError
from iomatrix.host.kernels.cache import MAX_AGE_S
from iomatrix.host.kernels.debian_packages import parse_packages
from iomatrix.host.kernels.records import AptPackage, Log
from iomatrix.model.kernel_spec import DEBIAN_SUITES
from iomatrix.store.files import sha256_file, write_text_atomic

_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# Timeouts are generous: a slow mirror must make a fetch slow, not fail it.
_UPDATE_TIMEOUT_S = 300.0
_SHOW_TIMEOUT_S = 120.0
_DOWNLOAD_TIMEOUT_S = 600.0


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
        sources = self.sources_list()
        for path, text in (
            (self.dir / "etc" / "sources.list", sources),
            (self.dir / "etc" / "apt.conf", apt_config_text(self.dir)),
        ):
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                write_text_atomic(path, text)
        if refresh or not self._lists_fresh(sources):
            self.update(sources)

    def sources_list(self) -> str:
        """The private sources.list (a subclass may list other indexes: Debian's sources)."""
        return apt_sources_list(self.mirror)

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
