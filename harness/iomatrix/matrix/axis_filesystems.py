"""The filesystem axis (a type name, or a named filesystem with its mkfs arguments and the
layers under it: loop, md, lvm, crypt) and the mount option sets of each filesystem, the axis
that depends on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iomatrix.matrix.axis import Context
from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import DEFAULT_OPTIONS, did_you_mean, listing, show, slug
from iomatrix.matrix.schema import FilesystemSpec, OptionSetSpec, option_tokens
from iomatrix.model.cell import FilesystemChoice, MountOptionSet
from iomatrix.model.filesystems import FILESYSTEM_TYPES

DEFAULT_SET = MountOptionSet(name=DEFAULT_OPTIONS)


def _choice(entry: str | FilesystemSpec) -> FilesystemChoice:
    """What one entry of matrix.filesystem defines: a type name is a filesystem of that name."""
    if isinstance(entry, str):
        return FilesystemChoice(name=entry, fstype=entry)
    return FilesystemChoice(
        name=entry.name,
        fstype=entry.type or entry.name,
        mkfs_options=tuple(entry.mkfs),
        loop=entry.loop.stack() if entry.loop is not None else None,
        md=entry.md.stack() if entry.md is not None else None,
        lvm=entry.lvm.stack() if entry.lvm is not None else None,
        crypt=entry.crypt.stack() if entry.crypt is not None else None,
    )


def _option_set(entry: str | OptionSetSpec) -> MountOptionSet:
    if isinstance(entry, OptionSetSpec):
        return MountOptionSet(name=entry.name, options=option_tokens(entry.options))
    if entry == DEFAULT_OPTIONS:
        return DEFAULT_SET
    return MountOptionSet(name=slug(entry), options=option_tokens(entry))


class FilesystemAxis:
    """matrix.filesystem defines the filesystems by name; `resolve` (AxisResolver) finds one by
    name, or makes one of a known type; `option_set` finds a mount option set of one."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.filesystems: dict[str, FilesystemChoice] = {}
        # filesystem name -> its index in matrix.filesystem (where its errors are reported)
        self.index: dict[str, int] = {}
        self.option_sets: dict[str, list[MountOptionSet]] = {}

    def axis(self, entries: Sequence[str | FilesystemSpec]) -> list[FilesystemChoice]:
        """Defines the filesystems of matrix.filesystem; a name given twice must mean the same."""
        seen: dict[str, tuple[FilesystemChoice, int]] = {}
        for i, entry in enumerate(entries):
            choice = _choice(entry)
            if choice.name in seen:
                earlier, j = seen[choice.name]
                if earlier != choice:
                    self.ctx.error(
                        ("matrix", "filesystem", i),
                        f"duplicate filesystem name {choice.name!r} (also matrix.filesystem[{j}]) "
                        "with a different definition; give each a distinct name",
                    )
                continue
            seen[choice.name] = (choice, i)
        self.filesystems = {name: choice for name, (choice, _) in seen.items()}
        self.index = {name: i for name, (_, i) in seen.items()}
        return list(self.filesystems.values())

    def resolve(self, value: str, loc: Loc) -> FilesystemChoice | None:
        fs = self.filesystems.get(value)
        if fs is None and value in FILESYSTEM_TYPES:
            fs = _choice(value)
        if fs is None:
            self.ctx.error(
                loc,
                f"{show(value)} is neither a filesystem of matrix.filesystem "
                f"({listing(list(self.filesystems))}) nor a known type "
                f"({listing(FILESYSTEM_TYPES)})",
            )
        return fs

    def define_option_sets(
        self,
        table: Mapping[str, Sequence[str | OptionSetSpec]],
        filesystems: Sequence[FilesystemChoice],
    ) -> None:
        """matrix.mount_options: its sets, by filesystem name or type."""
        names = [fs.name for fs in filesystems]
        fstypes = list(dict.fromkeys(fs.fstype for fs in filesystems))
        for key, entries in table.items():
            if key not in names and key not in fstypes:
                self.ctx.error(
                    ("matrix", "mount_options", key),
                    f"{key!r} names no filesystem of matrix.filesystem; allowed: a name "
                    f"({listing(names)}) or a type ({listing(fstypes)})",
                )
                continue
            sets: dict[str, tuple[MountOptionSet, int]] = {}
            for i, entry in enumerate(entries):
                option_set = _option_set(entry)
                if option_set.name in sets:
                    earlier, j = sets[option_set.name]
                    if earlier != option_set:
                        self.ctx.error(
                            ("matrix", "mount_options", key, i),
                            f"option set name {option_set.name!r} is already used by "
                            f"[{j}] for other options; name them with {{name, options}}",
                        )
                    continue
                sets[option_set.name] = (option_set, i)
            self.option_sets[key] = [s for s, _ in sets.values()]

    def sets_for(self, fs: FilesystemChoice) -> list[MountOptionSet]:
        """Option sets of a filesystem: by its name, else by its type, else only the defaults."""
        return self.option_sets.get(fs.name) or self.option_sets.get(fs.fstype) or [DEFAULT_SET]

    def option_set(self, fs: FilesystemChoice, value: str, loc: Loc) -> MountOptionSet | None:
        """The mount_options axis, which depends on the filesystem: one of its sets, or the
        defaults."""
        sets = {s.name: s for s in self.sets_for(fs)}
        sets.setdefault(DEFAULT_OPTIONS, DEFAULT_SET)
        option_set = sets.get(value)
        if option_set is None:
            self.ctx.error(
                loc,
                f"{show(value)} is not a mount option set of filesystem {fs.name!r}; defined: "
                f"{listing(list(sets))}{did_you_mean(value, list(sets))}",
            )
        return option_set
