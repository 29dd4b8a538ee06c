"""Kernels on the host: fetching what a kernel spec names into a cache, verified.

One module a job: records, bzimage (a release from a boot header), cache (layout, verify,
resolution history), mirror, debian_packages (metadata and resolution), private_apt,
unpack, and fetcher, which puts them together. Callers use the names below.

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
Kernels built from source (build, with sources) live under builds/, sources/, kbuild/ and
ccache/ of the same cache: see builder.py (and build_estimates.py: cached or not, and how long,
before a run).
"""

from __future__ import annotations

from iomatrix.host.kernels.build_trust import own_builds_trusted
from iomatrix.host.kernels.builder import build, cached_builds
from iomatrix.host.kernels.bzimage import read_release, release_from_bzimage
from iomatrix.host.kernels.cache import MAX_AGE_S, cache_root, cached, prune_fetched, verify
from iomatrix.host.kernels.debian_packages import (
    compare_debian_versions,
    image_release,
    newest,
    parse_depends,
    parse_packages,
    parse_stanzas,
    release_parts,
    resolve,
)
from iomatrix.host.kernels.fetcher import fetch, offline_requested
from iomatrix.host.kernels.mirror import debian_mirror, find_debian_mirror, host_apt_sources
from iomatrix.host.kernels.private_apt import (
    PrivateApt,
    apt_config_text,
    apt_failure,
    apt_options,
    apt_sources_list,
)
from iomatrix.host.kernels.records import AptPackage, DebPackage, Kernel, Log, ResolvedKernel
from iomatrix.host.kernels.unpack import unpack_kernel

__all__ = [
    "MAX_AGE_S",
    "AptPackage",
    "DebPackage",
    "Kernel",
    "Log",
    "PrivateApt",
    "ResolvedKernel",
    "apt_config_text",
    "apt_failure",
    "apt_options",
    "apt_sources_list",
    "build",
    "cache_root",
    "cached",
    "cached_builds",
    "compare_debian_versions",
    "debian_mirror",
    "fetch",
    "find_debian_mirror",
    "host_apt_sources",
    "image_release",
    "newest",
    "offline_requested",
    "own_builds_trusted",
    "parse_depends",
    "parse_packages",
    "parse_stanzas",
    "prune_fetched",
    "read_release",
    "release_from_bzimage",
    "release_parts",
    "resolve",
    "unpack_kernel",
    "verify",
]
