"""The limits and character rules of a matrix file, and the small helpers every part of the
reader shares (sizes, names, how values are shown in messages).
"""

from __future__ import annotations

import difflib
import hashlib
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from iomatrix.model.units import GIB, KIB, MIB, TIB, format_size

FORMAT_VERSION = 1

MAX_FILE_BYTES = MIB  # matrix files, presets and fio job files alike
DEVICE_SIZE_MIN = 64 * MIB
LOOP_FILE_MIN = 16 * MIB
DEVICE_SIZE_MAX = 256 * GIB
VM_MEMORY_MIN = 256 * MIB
VM_MEMORY_MAX = 256 * GIB
VM_CPUS_MAX = 64
TIMEOUT_MAX_S = 86400.0
MAX_REPEAT = 100
DEFAULT_MAX_CELLS = 2000
MAX_CELLS_LIMIT = 100_000  # the most a file may ask for; the caller's argument is not capped
# Excludes are applied to the materialised product, so the product itself is bounded too: at most
# this many times the cell limit (an exclude list rarely removes more than 90%).
PRODUCT_FACTOR = 10
DEFAULT_JOB_SECONDS = 30.0
DEFAULT_OPTIONS = "default"

# Whitelists, always used with fullmatch (re.match with `$` would let a trailing newline through).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
MOUNT_OPTION_RE = re.compile(r"[A-Za-z0-9_.:+=@%-]+")
MKFS_ARG_RE = re.compile(r"[A-Za-z0-9_.:+=@%,^-]+")
REL_PATH_RE = re.compile(r"[A-Za-z0-9._+-][A-Za-z0-9._+/-]{0,1023}")

NAME_RULE = "1 to 64 letters, digits or ._+- starting with a letter or digit"
OPTION_RULE = (
    "comma-separated tokens of letters, digits and _.:+=@%- "
    "(no spaces, quotes, slashes or shell characters)"
)
PATH_RULE = "a relative path of letters, digits and ._+-/"


# --- small helpers ----------------------------------------------------------------------------


def show(value: object) -> str:
    """repr of a user value, shortened so a 1 MiB string does not become a 1 MiB message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def listing(values: Sequence[str]) -> str:
    return ", ".join(values) if values else "(none)"


def did_you_mean(value: object, candidates: Sequence[str]) -> str:
    """ "; did you mean 'mq-deadline'?" when a name is one slip away from an allowed one, else "".
    Appended after the list of allowed names, which stays whole: the hint is a guess."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, candidates, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


_SIZE_RE = re.compile(r"(\d{1,20})\s*(KiB|MiB|GiB|TiB|K|M|G|T)?")
_SIZE_UNITS = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": TIB}


def parse_size(text: str | int) -> int:
    """Bytes from an integer (bytes) or a string such as "512MiB", "1G", "1 GiB" (powers of 1024).

    Decimal units (KB, GB) are refused rather than guessed; the result must be more than 0.
    """
    rule = (
        "write bytes as an integer, or a whole number with a unit K, M, G, T, KiB, MiB, GiB "
        "or TiB (powers of 1024), e.g. 512MiB"
    )
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"{show(text)} is not a size: {rule}")
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.fullmatch(text.strip())
        if m is None:
            raise ValueError(f"{show(text)} is not a size: {rule}")
        value = int(m[1]) * _SIZE_UNITS[(m[2] or "")[:1]]
    if value <= 0:
        raise ValueError(f"{show(text)} is not a size: it must be more than 0 bytes")
    return value


def slug(text: str) -> str:
    """A safe name derived from free text: runs of other characters become '-'.

    Long results keep a hash suffix so that two long strings do not collapse to one name.
    """
    out = re.sub(r"[^A-Za-z0-9._+-]+", "-", text)
    out = re.sub(r"^[^A-Za-z0-9]+", "", out).rstrip("-")
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    if not out:
        return f"x-{digest}"
    if len(out) > 64:
        return f"{out[:55]}-{digest}"
    return out


def read_limited(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES; OSError or ValueError otherwise."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(
            f"{st.st_size} bytes is more than the limit of {format_size(MAX_FILE_BYTES)}"
        )
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # grew after the stat
        raise ValueError(f"more than the limit of {format_size(MAX_FILE_BYTES)}")
    return data


def os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def confinement_root(matrix: Path) -> Path:
    """The folder every file a matrix names must resolve into, links resolved: the git
    repository holding the matrix (its presets, workloads and kernel patches live beside it),
    else the matrix's own folder. A matrix may come from a stranger's pull request: `..` or a
    link must not make iomatrix read (and echo in its errors) a file elsewhere on the host."""
    folder = matrix.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def outside_message(rel: str, what: str, root: Path) -> str:
    # Names the rule and the root, never the file's contents or whether it exists.
    return (
        f"{rel!r}: the {what} resolves outside {root} (the matrix's repository or folder); "
        "files a matrix names must be inside it"
    )
