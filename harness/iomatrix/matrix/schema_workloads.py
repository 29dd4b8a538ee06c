"""The schema of a workload definition (`workloads: {name: ...}`): fio job files, a builtin or
bonnie++ with their parameters, and the state a workload starts from (aging, a precondition job).
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from iomatrix.matrix.rules import TIMEOUT_MAX_S, parse_size, show
from iomatrix.matrix.schema_fields import (
    JobFile,
    Seconds,
    _Schema,
    _size_in_range,
)
from iomatrix.model.cell import (
    STEADY_STATE_RE,
    Aging,
    BuiltinName,
)
from iomatrix.model.units import GIB, KIB, MIB, format_size


def _file_size_cap(value: object) -> int | str:
    if value is False:  # YAML 1.1 reads an unquoted `off` as false
        return "off"
    if isinstance(value, str) and value in ("auto", "off"):
        return value
    size = parse_size(cast(Any, value))
    if size < MIB:
        raise ValueError(f"{show(value)} is less than 1 MiB; a file size cap is at least 1 MiB")
    return size


FileSizeCap = Annotated[int | str, BeforeValidator(_file_size_cap)]


def _text_or_list(value: object) -> str | None:
    if isinstance(value, str):
        return "<text>"
    if isinstance(value, list):
        return "<list>"
    return None


JobFiles = Annotated[
    Annotated[JobFile, Tag("<text>")]
    | Annotated[list[JobFile], Field(min_length=1, max_length=32), Tag("<list>")],
    Discriminator(
        _text_or_list,
        custom_error_type="job_files",
        custom_error_message="expected a job file path or a list of them (run one after another)",
    ),
]


def _zero_or_size(value: object) -> int:
    return 0 if value == 0 and not isinstance(value, bool) else parse_size(cast(Any, value))


def _block_size(value: object) -> int:
    return _size_in_range(value, 512, 64 * MIB, "a block")


ZeroOrSize = Annotated[int, BeforeValidator(_zero_or_size)]


class _BonnieSpec(_Schema):
    """bonnie++ -s 0 -n files:max_size:min_size:dirs (files in units of 1024)."""

    files: Annotated[int, Field(ge=1, le=1024)]
    max_size: Annotated[ZeroOrSize, Field(le=GIB)] = 0
    min_size: Annotated[ZeroOrSize, Field(le=GIB)] = 0
    dirs: Annotated[int, Field(ge=0, le=100_000)] = 0

    @model_validator(mode="after")
    def _sizes_in_order(self) -> _BonnieSpec:
        if self.min_size > self.max_size:
            raise ValueError(f"min_size ({self.min_size}) is more than max_size ({self.max_size})")
        return self


# --- the state a workload starts from: precondition and aging ----------------------------------


def _percent(value: object) -> float:
    """A share written as "70%" (or a plain number of percent, 70)."""
    if isinstance(value, bool):
        raise ValueError(f"{show(value)} is not a percentage: write e.g. 70%")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text.removesuffix("%"))
        except ValueError:
            pass
    raise ValueError(f"{show(value)} is not a percentage: write e.g. 70%")


def _check_steady_state(value: str) -> str:
    if not STEADY_STATE_RE.fullmatch(value):
        raise ValueError(
            f"{show(value)} is not fio's steady-state criterion: write <metric>:<limit>, the "
            "metric one of iops, iops_slope, bw, bw_slope and the limit a number, with % for a "
            "share of the mean (e.g. iops_slope:0.3%)"
        )
    return value


class _SteadyStateSpec(_Schema):
    """fio --ss=<criterion> --ss_dur=<duration> --ss_ramp=<ramp> for a precondition job."""

    criterion: Annotated[str, AfterValidator(_check_steady_state)]
    duration: Annotated[int, Field(ge=1, le=int(TIMEOUT_MAX_S))]
    ramp: Annotated[int, Field(ge=0, le=int(TIMEOUT_MAX_S))] = 0


class _PreconditionSpec(_Schema):
    """A fio job run on the filesystem under test before the measured workload."""

    fio: JobFile
    max_runtime: Seconds  # its own time bound, required
    steady_state: _SteadyStateSpec | None = None

    @model_validator(mode="after")
    def _window_fits(self) -> _PreconditionSpec:
        if self.steady_state is not None:
            window = self.steady_state.duration + self.steady_state.ramp
            if window > self.max_runtime:
                raise ValueError(
                    f"steady_state needs at least ramp + duration = {window} s, more than "
                    f"max_runtime ({self.max_runtime:g} s): it could never be reached"
                )
        return self


MAX_AGING_FULLNESS = 95.0


def _aging_size(value: object) -> int:
    return _size_in_range(value, 4 * KIB, GIB, "an aging file")


AgingSize = Annotated[int, BeforeValidator(_aging_size, json_schema_input_type=int | str)]


def _fullness(value: object) -> float:
    share = _percent(value)
    if not 0 < share <= MAX_AGING_FULLNESS:
        raise ValueError(
            f"{show(value)} is out of range: aging fills a filesystem to more than 0% and at "
            f"most {MAX_AGING_FULLNESS:g}% (the workload needs room after it)"
        )
    return share


def _delete_share(value: object) -> float:
    share = _percent(value)
    if not 0 < share < 100:
        raise ValueError(
            f"{show(value)} is out of range: each cycle deletes more than 0% and less than 100% "
            "of the files"
        )
    return share


# "70%" or a number of percent; the JSON Schema says so, for editors.
_Fullness = BeforeValidator(_fullness, json_schema_input_type=float | str)
_DeleteShare = BeforeValidator(_delete_share, json_schema_input_type=float | str)


class _AgingSpec(_Schema):
    """Fill, fragment and delete cycles to a target fullness (iomatrix.guest.aging)."""

    fullness: Annotated[float, _Fullness]
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)]
    cycles: Annotated[int, Field(ge=1, le=100)] = 1
    delete: Annotated[float, _DeleteShare] = 50.0
    file_sizes: Annotated[list[AgingSize], Field(min_length=2, max_length=2)] = Field(
        default_factory=lambda: [4 * KIB, 4 * MIB]
    )

    @model_validator(mode="after")
    def _sizes_in_order(self) -> _AgingSpec:
        low, high = self.file_sizes
        if low > high:
            raise ValueError(
                f"file_sizes: the smallest ({format_size(low)}) is larger than the largest "
                f"({format_size(high)}); write [smallest, largest]"
            )
        return self

    def aging(self) -> Aging:
        return Aging(
            fullness_pct=self.fullness,
            cycles=self.cycles,
            seed=self.seed,
            delete_pct=self.delete,
            min_file_bytes=self.file_sizes[0],
            max_file_bytes=self.file_sizes[1],
        )


# The workload kinds a definition can name, and the options that belong to each.
_WORKLOAD_KINDS = ("fio", "builtin", "bonnie")
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "fio": ("max_runtime", "max_file_size"),
    "sync-write": ("block_size", "count"),
    "write-then-sync": ("block_size", "count"),
    "log-append": ("count", "line_length"),
    "bonnie": (),
}


class WorkloadSpec(_Schema):
    # One of fio, builtin, bonnie once presets are merged; fio: a job file, or a list of them
    # run one after another as the phases of one workload.
    fio: JobFiles | None = None
    # The longest fio may run (it is stopped there and reports what it measured until then);
    # default: the repetition's budget.
    max_runtime: Seconds | None = None
    # Cap on each file's size: auto (a quarter of the free space), off, or a size.
    max_file_size: FileSizeCap | None = None
    # A workload the agent runs itself (iomatrix.guest.builtin) and its parameters.
    builtin: BuiltinName | None = None
    block_size: Annotated[int, BeforeValidator(_block_size)] | None = None
    count: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    line_length: Annotated[int, Field(ge=2, le=65536)] | None = None
    bonnie: _BonnieSpec | None = None
    # Before the workload, on the same filesystem: aging, then a precondition job (any kind).
    precondition: _PreconditionSpec | None = None
    aging: _AgingSpec | None = None

    def kinds(self) -> list[str]:
        return [k for k in _WORKLOAD_KINDS if getattr(self, k) is not None]
