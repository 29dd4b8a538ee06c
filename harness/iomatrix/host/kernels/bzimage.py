"""The release of an x86 bzImage, read from its boot header (for path: kernels, and to check
an unpacked Debian kernel is the release it claims)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

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
