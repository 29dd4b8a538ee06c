"""The device axis (profiles defined under devices:), the I/O scheduler axis, and the storage
stack a filesystem builds over a device's disks (md, LVM, dm-crypt, a loop file), checked against
the number of disks each combination gives it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import cast

from iomatrix.matrix.axis import Context
from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import DEVICE_SIZE_MAX, DEVICE_SIZE_MIN, did_you_mean, listing, show
from iomatrix.matrix.schema import _DeviceSpec
from iomatrix.model.cell import MD_MIN_DEVICES, DeviceProfile, FilesystemChoice
from iomatrix.model.filesystems import MULTI_DEVICE_TYPES
from iomatrix.model.schedulers import SCHEDULERS, Scheduler
from iomatrix.model.units import format_size


class SchedulerAxis:
    """AxisResolver[Scheduler]: one of the kernel's I/O schedulers."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def axis(self, values: Sequence[str]) -> list[Scheduler]:
        """matrix.scheduler, each value once, in the order written."""
        out: list[Scheduler] = []
        for i, value in enumerate(dict.fromkeys(values)):
            scheduler = self.resolve(value, ("matrix", "scheduler", i))
            if scheduler is not None:
                out.append(scheduler)
        return out

    def resolve(self, value: str, loc: Loc) -> Scheduler | None:
        if value not in SCHEDULERS:
            self.ctx.error(
                loc,
                f"{show(value)} is not allowed; allowed: {listing(SCHEDULERS)}"
                f"{did_you_mean(value, SCHEDULERS)}",
            )
            return None
        return cast(Scheduler, value)


class DeviceAxis:
    """AxisResolver[DeviceProfile]: a device profile by the name it is defined by."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.devices: dict[str, DeviceProfile] = {}

    def define(self) -> None:
        """The profiles under devices:, each complete and consistent once presets are merged."""
        for name, dev in (self.ctx.spec.devices or {}).items():
            reason = _missing_or_inconsistent(dev)
            if reason is not None:
                field, why = reason
                self.ctx.error(("devices", name, field), why)
                continue
            values = dev.model_dump(exclude_none=True)
            values["size_bytes"] = values.pop("size")
            if "bw_limit" in values:
                values["bw_limit_bytes"] = values.pop("bw_limit")
            self.devices[name] = DeviceProfile.model_validate({"name": name, **values})

    def axis(self, names: Sequence[str]) -> list[DeviceProfile]:
        out: dict[str, DeviceProfile] = {}
        for i, name in enumerate(names):
            device = self.resolve(name, ("matrix", "device", i))
            if device is not None:
                out[name] = device
        return list(out.values())

    def resolve(self, value: str, loc: Loc) -> DeviceProfile | None:
        if value in self.devices:
            return self.devices[value]
        defined = list(self.ctx.spec.devices or {})
        if value not in defined:  # else its definition already has an error
            self.ctx.error(
                loc,
                f"{show(value)} is not a device defined under devices:; defined: "
                f"{listing(defined)}{did_you_mean(value, defined)}",
            )
        return None

    def check_counts(
        self, pairs: Iterable[tuple[FilesystemChoice, DeviceProfile]], index: Mapping[str, int]
    ) -> bool:
        """A profile with several disks needs a filesystem that spans devices (btrfs), or md or
        LVM to make one device of them; each layer needs the devices its kind needs. `index`:
        where each filesystem is in matrix.filesystem (its layers' errors are reported there)."""
        refused: dict[tuple[str, str], str] = {}
        errors_before = len(self.ctx.errors)
        checked: set[tuple[str, str]] = set()
        for fs, device in pairs:
            if (fs.name, device.name) in checked:
                continue
            checked.add((fs.name, device.name))
            if fs.layered:
                self._check_layers(fs, device, ("matrix", "filesystem", index.get(fs.name, 0)))
                if fs.loop is None:
                    continue  # md or LVM make one device of the disks (or crypt is refused)
            fstype = fs.disk_fstype
            if device.count > 1 and fstype not in MULTI_DEVICE_TYPES:
                refused.setdefault((fs.name, device.name), fstype)
        for (fs_name, name), fstype in refused.items():
            count = self.devices[name].count
            self.ctx.error(
                ("matrix", "device"),
                f"filesystem {fs_name!r} ({fstype}) cannot use device {name!r}: it has "
                f"{count} disks and {fstype} is made on one; only {listing(MULTI_DEVICE_TYPES)} "
                "spans several (or md or lvm under the filesystem). Exclude the combination or "
                "use a profile with count 1",
            )
        return not refused and len(self.ctx.errors) == errors_before

    def _check_layers(self, fs: FilesystemChoice, device: DeviceProfile, loc: Loc) -> None:
        """md, LVM and dm-crypt over the devices under them: the disks of the profile, or the
        one loop device of a loop stack (whose outer filesystem spans the disks)."""
        below = 1 if fs.loop is not None else device.count
        what = "the loop device" if fs.loop is not None else f"{below} disk(s) of {device.name!r}"
        if fs.md is not None:
            need = MD_MIN_DEVICES[fs.md.level]
            if below < need:
                self.ctx.error(
                    (*loc, "md", "level"),
                    f"md {fs.md.level} needs at least {need} devices; with device {device.name!r}"
                    f" it would be made on {what}. Use a profile with count: {max(need, 4)} "
                    "(or another level), or exclude the combination",
                )
                return
            below = 1
            what = "the md array"
        if fs.lvm is not None:
            if fs.lvm.stripes > below:
                self.ctx.error(
                    (*loc, "lvm", "stripes"),
                    f"{fs.lvm.stripes} stripes need as many physical volumes; with device "
                    f"{device.name!r} the volume group has {what}. Use a profile with count: "
                    f"{fs.lvm.stripes} or more, fewer stripes, or exclude the combination",
                )
                return
            below = 1
        if fs.crypt is not None and below > 1:
            self.ctx.error(
                (*loc, "crypt"),
                f"dm-crypt is made on one device; device {device.name!r} has {below} disks. Put "
                "md or lvm below it (they make one device of the disks), use a profile with "
                "count 1, or exclude the combination",
            )


def _missing_or_inconsistent(dev: _DeviceSpec) -> tuple[str, str] | None:
    """(field, reason) of the first thing wrong with a merged device definition, or None."""
    if dev.size is None:
        return (
            "size",
            "missing; give the device size, e.g. 1GiB "
            f"({format_size(DEVICE_SIZE_MIN)} .. {format_size(DEVICE_SIZE_MAX)})",
        )
    if dev.backing == "host" and dev.path is None:
        return (
            "path",
            "missing; backing: host needs the path of the host block device, e.g. "
            "/dev/sdb (used only with --allow-host-device, and never while mounted)",
        )
    if dev.backing != "host" and dev.path is not None:
        return (
            "path",
            f"only a device with backing: host has a path (this one is backed by "
            f"{dev.backing or 'file'}); remove path or set backing: host",
        )
    if dev.backing == "host" and (dev.count or 1) > 1:
        return (
            "count",
            "a device with backing: host is one host block device; count must be 1",
        )
    return None
