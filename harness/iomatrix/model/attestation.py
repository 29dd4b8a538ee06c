"""The host's word on a repetition's numbers: what it read of the test disks itself (HostView,
kept in the cell folder as host-view-NNN.json, never written by the guest) and its verdict on
what fio reported (Attestation, kept with the repetition in run.json).

The rule that makes the verdict is adapters/attestation.py; the host applies it when it collects
a cell (host/vm/host_disks.py), the comparison keeps unconfirmed repetitions out of its
statistics (analysis/attestation.py). A repetition recorded before attestation existed has no
Attestation: "not attested", which old archives still compare with.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from iomatrix.model.cell import Record, is_empty
from iomatrix.model.units import MIB

# The columns of a HostView's samples: what had completed on the step's test drives (summed)
# since the reading at the workload's start, as QEMU counts them (query-blockstats).
SAMPLE_COUNTERS: tuple[str, ...] = (
    "rd_operations",
    "wr_operations",
    "rd_bytes",
    "wr_bytes",
    "unmap_operations",
    "unmap_bytes",
)


class HostView(Record):
    """The host's readings of one repetition's test drives, from the workload's start line to
    its end line (host/vm/qmp.py): the counters every `interval_s` and QEMU's own latency
    histograms of the requests. `at_s` is when each reading was asked for and `until_s` when
    its answer came (host monotonic clock, seconds after the start reading was asked for): the
    counters were taken somewhere in between. The first sample is the start reading (all
    zero), the last the end reading. `problem` says what went wrong (then the view may hold no
    samples at all)."""

    interval_s: float
    problem: str = ""
    at_s: tuple[float, ...] = ()
    until_s: tuple[float, ...] = ()
    rd_operations: tuple[int, ...] = ()
    wr_operations: tuple[int, ...] = ()
    rd_bytes: tuple[int, ...] = ()
    wr_bytes: tuple[int, ...] = ()
    unmap_operations: tuple[int, ...] = ()
    unmap_bytes: tuple[int, ...] = ()
    # block-latency-histogram-set's boundaries (ns) and, per direction, the requests whose
    # latency fell in each bin (len(boundaries) + 1 bins: below the first, between, above the
    # last), summed over the drives; empty when the histogram could not be set.
    boundaries_ns: tuple[int, ...] = ()
    read_bins: tuple[int, ...] = ()
    write_bins: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _columns_agree(self) -> HostView:
        lengths = {
            len(self.at_s),
            len(self.until_s),
            *(len(getattr(self, c)) for c in SAMPLE_COUNTERS),
        }
        if len(lengths) != 1:
            raise ValueError("the sample columns differ in length")
        for bins in (self.read_bins, self.write_bins):
            if bins and len(bins) != len(self.boundaries_ns) + 1:
                raise ValueError("a histogram's bins do not match its boundaries")
        return self

    def samples(self) -> int:
        return len(self.at_s)


AttestationStatus = Literal["confirmed", "unconfirmed", "not-attestable"]


class AttestedFigure(Record):
    """One figure held against the host's: what fio reported (or what its report implies, e.g.
    IOPS x runtime operations) and the host's bound, `guest` <= `host` or `guest` >= `host`
    (`relation`) within the tolerance. `where` is the phase and job ("" for a single job)."""

    what: str
    where: str = Field(default="", exclude_if=is_empty)
    unit: str
    guest: float
    host: float
    relation: Literal["<=", ">="]
    ok: bool

    def describe(self) -> str:
        place = f"{self.where}: " if self.where else ""
        if self.host == float("inf"):
            # A runtime for more operations than the host saw complete at all.
            return f"{place}{self.what}: fio {self.shown(self.guest)}, the host never saw as many"
        verb = "at most" if self.relation == "<=" else "at least"
        return (
            f"{place}{self.what}: fio {self.shown(self.guest)}, the host's {verb} "
            f"{self.shown(self.host)}"
        )

    def shown(self, value: float) -> str:
        """A figure with its unit: bytes in MiB, counts with thousands separators."""
        if self.unit == "B":
            return f"{value / MIB:,.1f} MiB"
        if value == float("inf"):
            return "never as many"
        text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
        return f"{text} {self.unit}".strip()


class Attestation(Record):
    """The host's verdict on one repetition: `confirmed` (every figure within its bound),
    `unconfirmed` (a figure beyond it, or no host view to hold it against: `reason` says which
    and shows both figures) or `not-attestable` (the workload's numbers cannot be held against
    the disk's counters at all: `reason` says why, e.g. buffered I/O). Decided by the host from
    its own readings and its own copy of the job file, never from what the guest says of
    itself."""

    status: AttestationStatus
    reason: str = Field(default="", exclude_if=is_empty)
    # The relative tolerance the figures were held to (adapters.attestation.TOLERANCE).
    tolerance: float
    figures: tuple[AttestedFigure, ...] = Field(default=(), exclude_if=is_empty)

    def failed(self) -> list[AttestedFigure]:
        return [f for f in self.figures if not f.ok]
