"""What a run, an A/B session and a bisection do alike before anything boots: the one preflight
(`check`: every refusal of host/preflight.py, before anything is fetched, built or written);
check that their VMs fit on the host's cores; fetch or build each kernel once (a kernel that
cannot be had fails its cells, not the run; a kernel is built trusted only when its caller
vouches for it: host/kernels/build_trust.py); refuse the cells a built kernel cannot serve;
choose the accelerator and the shared filesystem; have the guest's root; pin what the boots
will lend the guest (host/vm/boot_inputs.py: each boot checks it again); start the run record
(or check that a run can resume).
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from iomatrix.adapters import kconfig
from iomatrix.errors import IomatrixError
from iomatrix.host import environment, kernels, preflight, provenance
from iomatrix.host.vm import accel, agent_bundle, boot_inputs, cores, guest_root, vng
from iomatrix.host.vm.cell_results import now_iso
from iomatrix.host.vm.execute import Execution, ProgressFactory, RunClock
from iomatrix.host.vm.guest_root import GuestRoot
from iomatrix.model.cell import Cell, KernelBuild, Matrix, VmSettings
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.model.result import MEASUREMENT_ENVIRONMENT, KernelInfo, RunRecord
from iomatrix.store import remembered
from iomatrix.store.files import sha256_file


def check(
    cells: Sequence[Cell],
    *,
    source: str,
    matrix: Matrix,
    allowed_host_devices: Sequence[str],
    concurrency: preflight.Concurrency,
) -> str | None:
    """The preflight of every command that runs cells, called by each workflow before it fetches,
    builds, boots or writes anything: so that no command can skip a refusal another one makes.
    Returns the notice to print when VMs will share host cores, else None."""
    return preflight.preflight(
        cells,
        source=source,
        allowed_host_devices=allowed_host_devices,
        concurrency=concurrency,
        vm_cpus=matrix.vm.cpus,
        vm_memory_mib=matrix.vm.memory_mib,
    )


def fetcher(offline: bool) -> Callable[[KernelSpec], kernels.Kernel]:
    """kernels.fetch as --offline (or IOMATRIX_OFFLINE) asks for it."""
    return functools.partial(kernels.fetch, offline=kernels.offline_requested(offline))


@dataclass(frozen=True)
class RunOptions:
    results_dir: Path
    scratch_dir: Path
    shard: str | None = None
    # None: no progress display.
    progress: ProgressFactory | None = None
    run_id: str | None = None
    # Boots run side by side, each VM pinned to cores of its own; 1 runs them one after another
    # unpinned. share_cores lets jobs x vm.cpus exceed the host's cores (refused otherwise).
    jobs: int = 1
    share_cores: bool = False
    # Each boot cut into this many boots of consecutive cells (or A/B pairs), so that one
    # (kernel, device) group can use --jobs too.
    split_boots: int = 1


def host_cores(options: RunOptions, vm_settings: VmSettings, out: TextIO) -> tuple[int, ...]:
    """Check, before anything runs, that options.jobs VMs fit on this host's cores (or may share
    them) and that taskset is there; returns the cores concurrent boots are pinned to."""
    if options.split_boots < 1:
        raise IomatrixError(f"--split-boots must be at least 1, not {options.split_boots}")
    available = cores.available_cpus()
    note = cores.check_fit(options.jobs, vm_settings.cpus, available, share=options.share_cores)
    if options.jobs == 1:
        return ()
    if shutil.which("taskset") is None:
        raise IomatrixError(
            f"--jobs {options.jobs} pins each VM with taskset, which is not installed (util-linux)"
        )
    if note is not None:
        print(note, file=out)
    return available


def cores_shared(options: RunOptions, vm_settings: VmSettings, available: Sequence[int]) -> bool:
    return options.jobs > 1 and options.jobs * vm_settings.cpus > len(available)


# Builds a kernel from source: the kernel axis value and its recipe.
Build = Callable[[str, KernelBuild], kernels.Kernel]


def _fetch_kernels(
    wanted: Mapping[str, KernelBuild | KernelSpec],
    fetch: Callable[[KernelSpec], kernels.Kernel],
    build: Build,
    out: TextIO,
) -> tuple[dict[str, kernels.Kernel], dict[str, str]]:
    """Fetch or build each kernel once; a kernel that cannot be had (a failed download, a
    failed build) fails its cells, not the run."""
    fetched: dict[str, kernels.Kernel] = {}
    errors: dict[str, str] = {}
    for spec, source in wanted.items():
        print(f"iomatrix: kernel {spec} ...", file=out)
        try:
            fetched[spec] = fetch(source) if isinstance(source, KernelSpec) else build(spec, source)
            print(f"iomatrix: kernel {spec} -> {fetched[spec].release}", file=out)
        except IomatrixError as exc:
            errors[spec] = str(exc)
            print(f"iomatrix: {exc}", file=out)
    return fetched, errors


def _kernels_wanted(cells: Sequence[Cell]) -> dict[str, KernelBuild | KernelSpec]:
    """Each kernel axis value once, with its recipe when it is built from source. One name must
    mean one kernel: an A/B session of two matrices that build a name differently would boot
    both sides on one of them."""
    wanted: dict[str, KernelBuild | KernelSpec] = {}
    for cell in cells:
        source = cell.kernel_build or cell.kernel_spec
        if cell.kernel in wanted and wanted[cell.kernel] != source:
            raise IomatrixError(
                f"kernel {cell.kernel!r} is built differently by the cells of this session; "
                "give each build a name of its own (and compare them with ab --split kernel)"
            )
        wanted[cell.kernel] = source
    return wanted


def refusals(cells: Sequence[Cell], fetched: Mapping[str, kernels.Kernel]) -> dict[str, str]:
    """Cells whose kernel was built without an option they need (a matrix fragment turned it
    off, or the source is too old to have it): cell id -> why, decided before any VM boots."""
    configs: dict[str, dict[str, str]] = {}
    refused: dict[str, str] = {}
    for cell in cells:
        kernel = fetched.get(cell.kernel)
        if kernel is None or kernel.build is None:
            continue
        if cell.kernel not in configs:
            text = Path(kernel.build.config).read_text(encoding="utf-8", errors="replace")
            configs[cell.kernel] = kconfig.parse_config(text)
        missing = kconfig.missing_options(cell, configs[cell.kernel])
        if missing:
            refused[cell.id] = kconfig.describe_missing(cell.kernel, missing)
    return refused


def _shared_fs(out: TextIO) -> vng.SharedFs:
    shared_fs, why = vng.shared_fs_for_host()
    print(f"iomatrix: the guest's root is shared over {shared_fs} ({why})", file=out)
    return shared_fs


def _accelerator(
    fetched: Sequence[kernels.Kernel], root: Path | None, out: TextIO
) -> vng.Accelerator:
    """KVM or TCG (host/vm/accel.py). A probe boot, when one is needed, runs the default Debian
    kernel on the guest's root, never one of `fetched`: a matrix's kernel may be a stranger's."""
    if not fetched:
        return "tcg"
    accelerator, why = accel.choose_accelerator(
        cache_dir=kernels.cache_root(),
        probe=accel.trusted_probe(lambda: root, fetcher(False)),
    )
    if accelerator == "tcg":
        print(
            f"iomatrix: WARNING: using TCG software emulation ({why}); "
            "absolute numbers are far below real hardware, compare only like with like",
            file=out,
        )
    else:
        print(f"iomatrix: using KVM ({why})", file=out)
    return accelerator


@dataclass(frozen=True)
class Prepared:
    """What a run and an A/B session learn alike before anything boots: the kernels (or why
    not), the accelerator, the shared filesystem."""

    fetched: dict[str, kernels.Kernel]
    fetch_errors: dict[str, str]
    accelerator: vng.Accelerator
    shared_fs: vng.SharedFs
    # Cells refused before boot, by id: their kernel lacks an option they need.
    refused: dict[str, str]
    guest_root: Path | None = None
    guest_root_error: str = ""
    guest_root_record: GuestRoot | None = None
    # What the boots lend the guest, pinned here and checked before each boot.
    inputs: boot_inputs.BootInputs | None = None


def prepare(
    cells: Sequence[Cell],
    fetch: Callable[[KernelSpec], kernels.Kernel] | None,
    build: Build | None,
    clock: RunClock,
    out: TextIO,
    *,
    trusted: Collection[str] = (),
) -> Prepared:
    """trusted: the kernel axis values whose builds the caller vouches for (the base side of an
    A/B session); every other kernel built from source is built untrusted."""
    wanted = _kernels_wanted(cells)
    with clock.span("kernels"):
        fetched, fetch_errors = _fetch_kernels(
            wanted, fetch or kernels.fetch, build or _build_logged(out, trusted), out
        )
    refused = refusals(cells, fetched)
    for cell_id_, why in refused.items():
        print(f"iomatrix: cell {cell_id_} refused: {why}", file=out)
    with clock.span("guest root"):
        root, root_error, record = _guest_root(out)
    with clock.span("accelerator"):
        accelerator = _accelerator(list(fetched.values()), root, out)
        shared_fs = _shared_fs(out)
    with clock.span("pinning"):
        inputs = _pin(fetched, fetch_errors, root, out)
    return Prepared(
        fetched, fetch_errors, accelerator, shared_fs, refused, root, root_error, record, inputs
    )


def _pin(
    fetched: dict[str, kernels.Kernel],
    fetch_errors: dict[str, str],
    root: Path | None,
    out: TextIO,
) -> boot_inputs.BootInputs:
    """What every boot lends the guest, hashed now (boot_inputs.py): a kernel whose image is
    not what its fetch or build recorded fails its cells here, as one that could not be had."""
    pinned: dict[str, tuple[boot_inputs.Pin, ...]] = {}
    for name, kernel in list(fetched.items()):
        try:
            pinned[name] = boot_inputs.pin_kernel(kernel)
        except (OSError, ValueError) as exc:
            fetch_errors[name] = f"kernel {name}: {exc}"
            print(f"iomatrix: {fetch_errors[name]}", file=out)
            del fetched[name]
    package = Path(vng.package_dir())
    agent = [boot_inputs.pin_package("the agent's package", package)]
    bundle = None
    if root is not None:
        bundle, why_not = agent_bundle.ensure(root, package, kernels.cache_root())
        if why_not is not None:
            print(f"iomatrix: {why_not}; the agent starts without its bundle", file=out)
        if bundle is not None:
            agent.append(boot_inputs.pin_file("the agent's bundle", bundle))
    return boot_inputs.BootInputs(kernels=pinned, agent=tuple(agent), bundle=bundle)


def _guest_root(out: TextIO) -> tuple[Path | None, str, GuestRoot | None]:
    """The guest's root filesystem, built on first use; when it cannot be had, every cell
    fails saying why (the run still ends with its run.json)."""
    try:
        root, record = guest_root.ensure(
            kernels.cache_root(),
            offline=kernels.offline_requested(),
            mirror=lambda: kernels.debian_mirror("the guest root"),
            log=lambda message: print(f"iomatrix: {message}", file=out),
        )
    except IomatrixError as exc:
        print(f"iomatrix: {exc}", file=out)
        return None, str(exc), None
    print(
        f"iomatrix: the guest runs on its own root, Debian {record.suite} "
        f"(fio {record.packages.get('fio', '?')}): {root}",
        file=out,
    )
    # Without bytecode the guest compiles the agent at every boot, under an emulated CPU.
    problem = guest_root.compile_package(
        root, Path(vng.package_dir()), cache_dir=kernels.cache_root() / remembered.FOLDER
    )
    if problem is not None:
        print(f"iomatrix: the agent's bytecode was not compiled ({problem})", file=out)
    return root, "", record


def _build_logged(out: TextIO, trusted: Collection[str] = ()) -> Build:
    def build(name: str, recipe: KernelBuild) -> kernels.Kernel:
        return kernels.build(
            name,
            recipe,
            offline=kernels.offline_requested(),
            log=lambda message: print(f"iomatrix: {message}", file=out),
            trusted=name in trusted,
        )

    return build


def start_record(
    matrix: Matrix,
    run_id: str,
    *,
    shard: str | None,
    prepared: Prepared,
) -> RunRecord:
    source = Path(matrix.source)
    return RunRecord(
        run_id=run_id,
        created_at=now_iso(),
        status="running",
        matrix_name=matrix.name,
        matrix_source=str(source),
        matrix_sha256=sha256_file(source) if source.is_file() else "",
        matrix_origin=provenance.matrix_origin(source) if source.is_file() else None,
        shard=shard,
        environment=environment.capture(
            prepared.accelerator, prepared.shared_fs, prepared.guest_root_record
        ),
        kernels={
            spec: KernelInfo(
                spec=spec,
                release=k.release,
                source=k.source,
                vmlinuz_sha256=k.vmlinuz_sha256,
                build=k.build,
            )
            for spec, k in prepared.fetched.items()
        },
    )


def check_matrix_unchanged(matrix: Path, previous: RunRecord, run_dir: Path) -> None:
    """Before a resume fetches, builds or probes anything: the matrix file must be the one the
    run started with (its sha256 as run.json recorded it)."""
    now = sha256_file(matrix) if matrix.is_file() else "(no such file)"
    if previous.matrix_sha256 and now != previous.matrix_sha256:
        raise IomatrixError(
            f"cannot resume {run_dir}: the matrix file {matrix} changed since the run started "
            f"(sha256 {now[:16]}, was {previous.matrix_sha256[:16]}); start a new run"
        )


def resumable(previous: RunRecord, fresh: RunRecord, run_dir: Path) -> RunRecord:
    """The previous record, checked against this session, ready to take more cells."""
    problems = []
    if previous.matrix_sha256 != fresh.matrix_sha256:
        problems.append("the matrix file changed since the run started")
    if previous.shard != fresh.shard:
        problems.append(f"the run was shard {previous.shard}, not {fresh.shard}")
    for name in MEASUREMENT_ENVIRONMENT:
        old, new = getattr(previous.environment, name), getattr(fresh.environment, name)
        if old != new:
            problems.append(f"{name} was {old!r}, is now {new!r}")
    for spec, info in fresh.kernels.items():
        if spec in previous.kernels and previous.kernels[spec].release != info.release:
            problems.append(
                f"kernel {spec} was {previous.kernels[spec].release}, is {info.release}"
            )
    if problems:
        raise IomatrixError(f"cannot resume {run_dir}: " + "; ".join(problems))
    return previous.model_copy(
        update={"status": "running", "kernels": {**previous.kernels, **fresh.kernels}}
    )


def execution(
    prepared: Prepared,
    options: RunOptions,
    *,
    rw_dir: Path,
    scratch_id: str,
    matrix: Matrix,
    clock: RunClock,
    host_cpus: tuple[int, ...],
    out: TextIO,
) -> Execution:
    return Execution(
        rw_dir=rw_dir,
        scratch=(options.scratch_dir / scratch_id).resolve(),
        fetched=prepared.fetched,
        fetch_errors=prepared.fetch_errors,
        refused=prepared.refused,
        accelerator=prepared.accelerator,
        vm_settings=matrix.vm,
        timeouts=matrix.timeouts,
        out=out,
        progress=options.progress,
        clock=clock,
        shared_fs=prepared.shared_fs,
        guest_root=prepared.guest_root,
        guest_root_error=prepared.guest_root_error,
        inputs=prepared.inputs,
        jobs=options.jobs,
        share_cores=options.share_cores,
        host_cpus=host_cpus,
    )
