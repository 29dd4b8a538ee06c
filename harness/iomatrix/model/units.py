"""Binary size units, once: every module that counts bytes in KiB, MiB, GiB or TiB imports them
from here rather than writing `1 << 20` again. Standard library only (the guest imports it too).
"""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40


def format_size(n: int) -> str:
    """Bytes in the largest binary unit that divides them exactly: 1 MiB, 1536 KiB, 100 bytes."""
    for unit, factor in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} bytes"
