"""Finding a Debian mirror: $IOMATRIX_DEBIAN_MIRROR, else the first Debian archive in the host's
apt sources (read only, never changed)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

from iomatrix.errors import KernelError

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
