"""Errors that reach the user: each says what, where and why; printed without a traceback."""

from __future__ import annotations

from iomatrix.plain import PlainRecord


class IomatrixError(Exception):
    """Base of every error iomatrix reports to the user as a message, not a traceback."""


# The errors are records (iomatrix.plain: no dataclass compile where the guest imports them),
# not frozen: Python sets an exception's __traceback__ and notes. PlainRecord comes first, so
# its __init__ (fields by name) is the one that runs, not BaseException's.


class MatrixError(PlainRecord, IomatrixError, frozen=False):
    """A matrix file is invalid: names the file, the path of the field, and the reason; and
    where the field is in the file, when the YAML says (file:line:column, as compilers print
    it, so editors and terminals can jump there)."""

    file: str
    field: str
    reason: str
    line: int | None = None
    column: int | None = None
    # The field's YAML path, for errors found after loading (the host's preflight), so that
    # matrix.loader.place_errors can find its line in whichever file supplied the value.
    loc: tuple[str | int, ...] = ()

    def __str__(self) -> str:
        place = self.file
        if self.line is not None:
            place += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        where = f"{place}: {self.field}" if self.field else place
        return f"{where}: {self.reason}"


class MatrixErrors(PlainRecord, IomatrixError, frozen=False):
    """Several validation errors of one file, reported together so the user fixes them at once."""

    errors: tuple[MatrixError, ...]

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


class KernelError(PlainRecord, IomatrixError, frozen=False):
    """A kernel spec cannot be resolved, downloaded, unpacked or verified."""

    spec: str
    reason: str

    def __str__(self) -> str:
        return f"kernel {self.spec!r}: {self.reason}"


class ArchiveUnreachable(KernelError, frozen=False):
    """The Debian archive did not answer (apt-get update or download failed or timed out).

    reason is apt's own words, on one line. kernels.fetch catches it to fall back to the cache,
    so it reaches the user only from lower-level calls.
    """

    def __str__(self) -> str:
        return f"kernel {self.spec!r}: the Debian archive cannot be reached ({self.reason})"


class ResultFormatError(PlainRecord, IomatrixError, frozen=False):
    """A result file is unreadable, truncated, or of a format version we cannot load."""

    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"
