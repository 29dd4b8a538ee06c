"""md RAID, LVM and dm-crypt between the disks (or a loop stack's loop device) and the
filesystem under test: set up with each one's own tool, read back, and taken down again.

The layers are always stacked in one order, from the bottom: md, LVM, dm-crypt (each optional;
model.cell.FilesystemChoice). The guest has no udev: every device-mapper tool runs with
DM_DISABLE_UDEV=1 (libdevmapper makes its /dev nodes itself) and lvm with a --config that asks
udev nothing (adapters.stacks.lvm_config).

tear_down_layers is safe on any state: it takes down whatever md arrays, iomatrix volume group
and crypt mapping it finds, innermost first, and leaves the disks without their signatures, so
that a later cell always finds clean disks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix.adapters.schedulers import active_scheduler, available_schedulers
from iomatrix.adapters.stacks import (
    DM_ENV,
    DmTarget,
    crypt_table,
    lvm_argv,
    lvs_devices,
    mdstat_lines,
    parse_cryptsetup_status,
    parse_dm_table,
    parse_lvs_json,
    parse_mdadm_detail,
    parse_pvs_json,
    without_key,
)
from iomatrix.guest.context import CellContext, CellError, CellFailed
from iomatrix.guest.disks import scheduler_file
from iomatrix.guest.plan_view import CryptStackView, FilesystemChoiceView, LvmStackView, MdStackView
from iomatrix.guest.records import CryptApplied, LvmApplied, MdApplied
from iomatrix.model.units import KIB

# The guest's block devices (a test points it at a tree of its own).
SYS_BLOCK = Path("/sys/block")
MD_DEVICE = "/dev/md0"
VG = "iomatrix"
LV = "vol"
POOL = "pool"
CRYPT_NAME = "iomatrix-crypt"
# The dm-crypt key: fixed bytes, in the guest's own /tmp. This is a benchmark of the layer's
# cost, not security: anyone may read the key, and the disks are thrown away after the run.
KEY_FILE = Path("/tmp/iomatrix/crypt.key")
KEY_BYTES = bytes(range(64))
# LUKS2 with PBKDF2 at its fewest iterations: the key slot opens at once (argon2, cryptsetup's
# default, takes seconds and much memory under an emulated CPU), and nothing measured depends
# on it.
LUKS_FORMAT = (
    "--batch-mode",
    "--type",
    "luks2",
    "--pbkdf",
    "pbkdf2",
    "--pbkdf-force-iterations",
    "1000",
)
MD_LEVEL_MODULES: dict[str, tuple[str, ...]] = {
    "raid0": ("raid0",),
    "raid1": ("raid1",),
    "raid5": ("raid456",),
    "raid10": ("raid10",),
}
# The kernel's modules for each cipher of the allow-list (model.cell.CRYPT_CIPHERS); the crypto
# API would ask for most of them itself, loading them first makes a missing one show in the log.
CIPHER_MODULES: dict[str, tuple[str, ...]] = {
    "aes-xts-plain64": ("xts", "aes_generic"),
    "aes-cbc-essiv:sha256": ("cbc", "essiv", "sha256_generic", "aes_generic"),
    "xchacha12,aes-adiantum-plain64": ("adiantum", "chacha_generic", "nhpoly1305", "aes_generic"),
}


def layer_modules(fs: FilesystemChoiceView) -> list[str]:
    modules: list[str] = []
    if fs.md is not None:
        modules += ["md_mod", *MD_LEVEL_MODULES.get(fs.md.level, ())]
    if fs.lvm is not None or fs.crypt is not None:
        modules.append("dm_mod")
    if fs.lvm is not None and fs.lvm.thin:
        modules.append("dm_thin_pool")
    if fs.crypt is not None:
        # algif_skcipher: cryptsetup encrypts the LUKS2 key slots through the kernel (AF_ALG).
        modules += ["dm_crypt", "algif_skcipher", *CIPHER_MODULES.get(fs.crypt.cipher, ())]
    return modules


@dataclass
class Built:
    """The devices of a built stack, bottom up: what each layer was made on, and the top."""

    below: list[str]
    md: str | None = None
    lvm: str | None = None
    crypt: str | None = None
    devices: list[str] = field(default_factory=list)

    @property
    def top(self) -> str:
        return self.devices[-1] if self.devices else self.below[0]


def dm_name_of(mapping: str) -> str:
    """The kernel's name (dm-N) of a device-mapper mapping: without udev /dev/mapper/<name> is a
    node of its own, not a link to /dev/dm-N."""
    name = _dm_maps().get(mapping)
    if name is None:
        raise CellError(f"no /sys/block/dm-*/dm/name is {mapping!r}")
    return name


def stacked_scheduler(ctx: CellContext, name: str) -> str:
    """The cell's scheduler on a stacked device where its queue offers it, read back. md and
    device-mapper's linear, striped and crypt targets are bio-based: their queue shows a bare
    'none' and takes no scheduler; that is recorded as it is, not failed."""
    sysfs = scheduler_file(name)
    text = sysfs.read_text()
    if ctx.cell.scheduler in available_schedulers(text) and len(text.split()) > 1:
        try:
            sysfs.write_text(ctx.cell.scheduler)
        except OSError as exc:
            ctx.log(f"writing {ctx.cell.scheduler!r} to {sysfs}: {exc}")
        text = sysfs.read_text()
    return text


def wipe(ctx: CellContext, devices: Sequence[str], *, cleanup: bool = False) -> None:
    """Old signatures (a filesystem, an md superblock, an LVM label, a LUKS header) off the
    devices: mdadm and pvcreate would otherwise ask before overwriting them."""
    ctx.run(["wipefs", "--all", "--quiet", *devices], what="wipefs", cleanup=cleanup)


def md_create_argv(md: MdStackView, devices: Sequence[str]) -> list[str]:
    argv = [
        "mdadm",
        "--create",
        MD_DEVICE,
        "--run",
        "--assume-clean",
        "--metadata=1.2",
        f"--level={md.level}",
        f"--raid-devices={len(devices)}",
    ]
    if md.chunk_bytes is not None:
        argv.append(f"--chunk={md.chunk_bytes // KIB}K")
    if md.bitmap is not None:
        argv.append(f"--bitmap={md.bitmap}")
    return [*argv, *devices]


def lvcreate_argv(
    lvm: LvmStackView, pvs: Sequence[str], vg_bytes: int | None = None
) -> list[list[str]]:
    """The lvcreate command(s): a linear volume over the group, a striped one over its first
    `stripes` physical volumes, or a thin pool and a thin volume in it."""
    size = ["-L", f"{lvm.size_bytes}b"] if lvm.size_bytes is not None else ["-l", "100%FREE"]
    common = ["--yes", "--wipesignatures", "y", "--zero", "y"]
    if lvm.thin:
        pool_bytes = (vg_bytes or 0) * 9 // 10 // (4 << 20) * (4 << 20)
        virtual = lvm.size_bytes if lvm.size_bytes is not None else pool_bytes
        return [
            # lvcreate refuses --wipesignatures with a pool (it zeroes the pool's metadata).
            lvm_argv(
                "lvcreate",
                pvs,
                "--yes",
                "--type",
                "thin-pool",
                "-L",
                f"{pool_bytes}b",
                "-n",
                POOL,
                VG,
            ),
            lvm_argv(
                "lvcreate", pvs, "--yes", "-V", f"{virtual}b", "--thinpool", POOL, "-n", LV, VG
            ),
        ]
    if lvm.stripes > 1:
        stripes = ["--stripes", str(lvm.stripes)]
        if lvm.stripe_size_bytes is not None:
            stripes += ["--stripesize", f"{lvm.stripe_size_bytes // KIB}k"]
        return [
            lvm_argv("lvcreate", pvs, *common, *stripes, *size, "-n", LV, VG, *pvs[: lvm.stripes])
        ]
    return [lvm_argv("lvcreate", pvs, *common, *size, "-n", LV, VG)]


def crypt_argv(crypt: CryptStackView, device: str) -> list[list[str]]:
    """luksFormat and open of the device with the fixed key file."""
    return [
        [
            *DM_ENV,
            "cryptsetup",
            "luksFormat",
            *LUKS_FORMAT,
            "--cipher",
            crypt.cipher,
            "--key-size",
            str(crypt.key_bits),
            "--key-file",
            str(KEY_FILE),
            device,
        ],
        [*DM_ENV, "cryptsetup", "open", "--key-file", str(KEY_FILE), device, CRYPT_NAME],
    ]


def build_layers(ctx: CellContext, fs: FilesystemChoiceView, below: Sequence[str]) -> Built:
    """md, LVM and dm-crypt, as the cell asks, over `below` (the disks or the loop device)."""
    built = Built(below=list(below))
    devices = list(below)
    wipe(ctx, devices)
    if fs.md is not None:
        ctx.run(md_create_argv(fs.md, devices), what="mdadm --create")
        built.md = MD_DEVICE
        devices = [MD_DEVICE]
        built.devices.append(MD_DEVICE)
    if fs.lvm is not None:
        ctx.run(lvm_argv("pvcreate", devices, "--yes", "-ff", *devices), what="pvcreate")
        ctx.run(lvm_argv("vgcreate", devices, "--yes", VG, *devices), what="vgcreate")
        vg_bytes = None
        if fs.lvm.thin:
            done = ctx.run(
                lvm_argv(
                    "vgs",
                    devices,
                    "--noheadings",
                    "--nosuffix",
                    "--units",
                    "b",
                    "-o",
                    "vg_size",
                    VG,
                ),
                what="vgs",
            )
            vg_bytes = int(done.stdout.strip())
        for argv in lvcreate_argv(fs.lvm, devices, vg_bytes):
            ctx.run(argv, what="lvcreate")
        built.lvm = f"/dev/mapper/{VG}-{LV}"
        devices = [built.lvm]
        built.devices.append(built.lvm)
    if fs.crypt is not None:
        if len(devices) != 1:
            raise CellError(f"dm-crypt is made on one device, not on {devices}")
        KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
        KEY_FILE.write_bytes(KEY_BYTES)
        luks_format, luks_open = crypt_argv(fs.crypt, devices[0])
        ctx.run(luks_format, what="cryptsetup luksFormat")
        ctx.run(luks_open, what="cryptsetup open")
        built.crypt = f"/dev/mapper/{CRYPT_NAME}"
        built.devices.append(built.crypt)
    return built


# --- read-back ------------------------------------------------------------------------------


def _sysfs(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise CellError(f"cannot read {path}: {exc.strerror}") from exc


def md_readback(ctx: CellContext, device: str) -> MdApplied:
    name = Path(device).name
    md_dir = SYS_BLOCK / name / "md"
    detail = ctx.run(["mdadm", "--detail", device], what="mdadm --detail")
    try:
        parsed = parse_mdadm_detail(detail.stdout)
    except ValueError as exc:
        raise CellError(str(exc)) from exc
    text = stacked_scheduler(ctx, name)
    return MdApplied(
        device=name,
        level=_sysfs(md_dir / "level"),
        raid_devices=int(_sysfs(md_dir / "raid_disks")),
        chunk_bytes=int(_sysfs(md_dir / "chunk_size")),
        layout=parsed.get("Layout"),
        state=parsed.get("State"),
        members=parsed.members,
        assume_clean=True,
        sync_action=_sysfs(md_dir / "sync_action"),
        mdstat=mdstat_lines(Path("/proc/mdstat").read_text(), name),
        scheduler=active_scheduler(text),
        schedulers_available=available_schedulers(text),
        bitmap=md_bitmap(md_dir),
    )


def md_bitmap(md_dir: Path) -> str:
    """The array's write-intent bitmap from sysfs md/bitmap/location: "none", "file", or an
    offset from the superblock ("+8"), which is an internal one; "" when the kernel has no
    bitmap attributes to show."""
    try:
        location = (md_dir / "bitmap" / "location").read_text().strip()
    except OSError:
        return ""
    return "internal" if location[:1] in ("+", "-") else location


def dm_targets(ctx: CellContext, mapping: str) -> tuple[DmTarget, ...]:
    """`dmsetup table` of a mapping. The agent's log gets what it prints, so a crypt key would
    be in it: the key is the fixed KEY_BYTES, and LUKS2 keeps it in the kernel's keyring (the
    table shows only a reference to it)."""
    done = ctx.run([*DM_ENV, "dmsetup", "table", mapping], what="dmsetup table")
    try:
        return parse_dm_table(done.stdout)
    except ValueError as exc:
        raise CellError(str(exc)) from exc


def table_lines(targets: Sequence[DmTarget]) -> tuple[str, ...]:
    """A table as recorded: a crypt key's bytes never (without_key)."""
    return tuple(without_key(t).line for t in targets)


def volume_devices(
    rows: Sequence[dict[str, Any]], own: Sequence[dict[str, Any]], pool: str
) -> tuple[str, ...]:
    """The physical volumes a volume is on, from lvs's rows (-a: hidden volumes too). A thin
    volume's extents are its pool's, whose data and metadata are hidden volumes (pool_tdata,
    pool_tmeta) on the physical volumes."""
    carriers = own
    if pool:
        carriers = [r for r in rows if str(r.get("lv_name", "")).strip("[]").startswith(pool)]
    devices = (d for r in carriers for d in lvs_devices(str(r.get("devices", ""))))
    return tuple(dict.fromkeys(d for d in devices if d.startswith("/dev/")))


def lvm_readback(ctx: CellContext, pvs: Sequence[str]) -> LvmApplied:
    fields = "lv_name,vg_name,segtype,stripes,stripe_size,lv_size,devices,pool_lv"
    done = ctx.run(
        lvm_argv(
            "lvs",
            pvs,
            "--reportformat",
            "json",
            "--units",
            "b",
            "--nosuffix",
            "-a",
            "-o",
            fields,
            VG,
        ),
        what="lvs",
    )
    try:
        rows = parse_lvs_json(done.stdout)
    except ValueError as exc:
        raise CellError(str(exc)) from exc
    own = [r for r in rows if r.get("lv_name") == LV]
    if not own:
        raise CellError(f"lvs does not list {VG}/{LV}: {done.stdout[:300]!r}")
    pool = str(own[0].get("pool_lv", ""))
    physical = volume_devices(rows, own, pool)
    mapping = f"{VG}-{LV}"
    name = dm_name_of(mapping)
    text = stacked_scheduler(ctx, name)
    return LvmApplied(
        vg=VG,
        lv=LV,
        device=name,
        segtype=str(own[0]["segtype"]),
        stripes=int(own[0]["stripes"]),
        stripe_size_bytes=int(own[0]["stripe_size"] or 0),
        size_bytes=int(own[0]["lv_size"]),
        physical_volumes=physical,
        pool=pool,
        dm_table=table_lines(dm_targets(ctx, mapping)),
        scheduler=active_scheduler(text),
        schedulers_available=available_schedulers(text),
    )


def crypt_readback(ctx: CellContext) -> CryptApplied:
    status = parse_cryptsetup_status(
        ctx.run([*DM_ENV, "cryptsetup", "status", CRYPT_NAME], what="cryptsetup status").stdout
    )
    targets = dm_targets(ctx, CRYPT_NAME)
    try:
        (target,) = targets
        crypt = crypt_table(target)
    except ValueError as exc:
        raise CellError(f"the crypt mapping's table: {exc}") from exc
    name = dm_name_of(CRYPT_NAME)
    text = stacked_scheduler(ctx, name)
    return CryptApplied(
        name=CRYPT_NAME,
        device=name,
        type=status.get("type", ""),
        cipher=crypt.cipher,
        key_bits=crypt.key_bits,
        sector_size=int(status.get("sector size", "512").split()[0]),
        underlying=status.get("device", ""),
        offset_sectors=crypt.offset_sectors,
        features=crypt.features,
        dm_table=table_lines(targets),
        scheduler=active_scheduler(text),
        schedulers_available=available_schedulers(text),
    )


@dataclass(frozen=True)
class LayersApplied:
    md: MdApplied | None
    lvm: LvmApplied | None
    crypt: CryptApplied | None


def layers_readback(ctx: CellContext, built: Built) -> LayersApplied:
    md = md_readback(ctx, built.md) if built.md is not None else None
    lvm = None
    if built.lvm is not None:
        lvm = lvm_readback(ctx, [built.md] if built.md is not None else built.below)
    return LayersApplied(
        md=md, lvm=lvm, crypt=crypt_readback(ctx) if built.crypt is not None else None
    )


# --- tear-down ------------------------------------------------------------------------------


def _try(ctx: CellContext, argv: Sequence[str], what: str) -> bool:
    try:
        ctx.run(argv, what=what, cleanup=True)
    except (CellFailed, CellError) as exc:
        ctx.log(f"(tear down) {exc}")
        return False
    return True


def _slaves(name: str) -> list[str]:
    """The devices a stacked device is made on (/sys/block/<name>/slaves)."""
    try:
        return [f"/dev/{p.name}" for p in sorted((SYS_BLOCK / name / "slaves").iterdir())]
    except OSError:
        return []


def _dm_maps() -> dict[str, str]:
    """mapping name -> dm-N of every device-mapper device."""
    maps = {}
    for block in sorted(SYS_BLOCK.glob("dm-*")):
        try:
            maps[(block / "dm" / "name").read_text().strip()] = block.name
        except OSError:
            continue
    return maps


def _physical_volumes(ctx: CellContext) -> tuple[set[str], list[str]]:
    """The volume groups lvm sees, and the physical volumes of ours or of none (every one in the
    guest is the agent's: it has no disks but its test disks). All of the group's, not only
    those its volume used: a striped volume leaves the others unused, but labelled."""
    argv = lvm_argv("pvs", [], "--reportformat", "json", "-o", "pv_name,vg_name")
    try:
        done = ctx.run(argv, what="pvs", cleanup=True)
        rows = parse_pvs_json(done.stdout)
    except (CellFailed, CellError, ValueError) as exc:
        ctx.log(f"(tear down) {exc}")
        return {VG}, []
    return {vg for _pv, vg in rows}, [pv for pv, vg in rows if vg in (VG, "")]


def tear_down_layers(ctx: CellContext) -> None:
    """Close the crypt mapping, remove the volume group and its physical volumes, stop the md
    arrays and zero their members' superblocks; the devices under each end up wiped. Safe on
    any state: whatever is not there is skipped."""
    maps = _dm_maps()
    if CRYPT_NAME in maps:
        under = _slaves(maps[CRYPT_NAME])
        if _try(ctx, [*DM_ENV, "cryptsetup", "close", CRYPT_NAME], "cryptsetup close") and under:
            _try(ctx, ["wipefs", "--all", "--quiet", *under], "wipefs after cryptsetup close")
    maps = _dm_maps()
    if ctx.cell.filesystem.lvm is not None or any(m.startswith(f"{VG}-") for m in maps):
        groups, pvs = _physical_volumes(ctx)
        if VG in groups:
            _try(ctx, lvm_argv("vgremove", [], "--yes", "-ff", VG), "vgremove")
        if pvs:
            _try(ctx, lvm_argv("pvremove", [], "--yes", "-ff", *pvs), "pvremove")
    # What the tools could not remove (a busy or half-made mapping), the latest made (the top
    # of the stack) first.
    left = [(dm, m) for m, dm in _dm_maps().items() if m == CRYPT_NAME or m.startswith(f"{VG}-")]
    for _dm, mapping in sorted(left, key=lambda item: -int(item[0].removeprefix("dm-"))):
        _try(ctx, [*DM_ENV, "dmsetup", "remove", "--force", mapping], "dmsetup remove")
    for block in sorted(SYS_BLOCK.glob("md*")):
        members = _slaves(block.name)
        _try(ctx, ["mdadm", "--stop", f"/dev/{block.name}"], "mdadm --stop")
        if members:
            _try(ctx, ["mdadm", "--zero-superblock", *members], "mdadm --zero-superblock")
