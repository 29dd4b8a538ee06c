"""The schema of a filesystem entry of matrix.filesystem (its type, mkfs arguments and the layers
under it: loop, md, lvm, crypt) and of the mount option sets of matrix.mount_options.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from iomatrix.matrix.rules import DEFAULT_OPTIONS, DEVICE_SIZE_MAX, LOOP_FILE_MIN, listing, show
from iomatrix.matrix.schema_fields import (
    MkfsArg,
    Name,
    _check_fstype,
    _check_option_entry,
    _check_options,
    _entry_kind,
    _Schema,
    _size_in_range,
    option_tokens,
)
from iomatrix.model.cell import (
    MAX_DEVICE_COUNT,
    CryptCipher,
    CryptStack,
    LoopStack,
    LvmStack,
    MdStack,
)
from iomatrix.model.filesystems import FILESYSTEM_TYPES, FILESYSTEMS, NOCOW_TYPES, FsType
from iomatrix.model.units import KIB, MIB, format_size


def _loop_file_size(value: object) -> int:
    return _size_in_range(value, LOOP_FILE_MIN, DEVICE_SIZE_MAX, "a loop file")


class _LoopSpec(_Schema):
    """`loop:` of a filesystem entry: the filesystem runs on a loop device over a file on an
    outer filesystem, which is made on the test disk(s)."""

    outer: FsType
    outer_mkfs: list[MkfsArg] = Field(default_factory=list)
    outer_options: Annotated[str, AfterValidator(_check_option_entry)] = DEFAULT_OPTIONS
    nocow: bool = False
    size: Annotated[int, BeforeValidator(_loop_file_size)] | None = None
    direct_io: bool = False

    @model_validator(mode="after")
    def _nocow_is_btrfs(self) -> _LoopSpec:
        if self.nocow and not FILESYSTEMS[self.outer].nocow:
            raise ValueError(
                f"nocow (chattr +C) turns off {listing(NOCOW_TYPES)} copy-on-write; the outer "
                f"filesystem is "
                f"{self.outer}, where it does not exist"
            )
        return self

    def stack(self) -> LoopStack:
        return LoopStack(
            outer_fstype=self.outer,
            outer_mkfs_options=tuple(self.outer_mkfs),
            outer_mount_options=(
                () if self.outer_options == DEFAULT_OPTIONS else option_tokens(self.outer_options)
            ),
            nocow=self.nocow,
            file_size_bytes=self.size,
            direct_io=self.direct_io,
        )


def _chunk_size(value: object) -> int:
    size = _size_in_range(value, 4 * KIB, 256 * MIB, "a chunk or stripe size")
    if size & (size - 1):
        raise ValueError(f"{show(value)} ({format_size(size)}) is not a power of two")
    return size


ChunkSize = Annotated[int, BeforeValidator(_chunk_size)]


def _volume_size(value: object) -> int:
    return _size_in_range(value, LOOP_FILE_MIN, DEVICE_SIZE_MAX, "a logical volume")


# The record itself (model.cell.MdStack) as a matrix spells it: a field added to the record is a
# key of `md:` with no change here; only a field whose matrix spelling differs from the record's
# (a size the user writes as 64K) is declared again, under its alias.
class _MdSpec(MdStack):
    """`md:` of a filesystem entry: md RAID over the stack's devices (mdadm --create)."""

    # serialize_by_alias: a matrix layer dumped and read again (presets, include) keeps the
    # matrix's spelling.
    model_config = ConfigDict(
        **{**MdStack.model_config, **_Schema.model_config}, serialize_by_alias=True
    )

    chunk_bytes: ChunkSize | None = Field(default=None, alias="chunk")

    @model_validator(mode="after")
    def _chunk_not_raid1(self) -> _MdSpec:
        if self.chunk_bytes is not None and self.level == "raid1":
            raise ValueError("raid1 mirrors whole devices and has no chunk size; remove chunk")
        return self

    def stack(self) -> MdStack:
        return MdStack.model_validate(self.model_dump(by_alias=False))


# The record (model.cell.LvmStack) as a matrix spells it, like _MdSpec: the sizes are declared
# again under their matrix names.
class _LvmSpec(LvmStack):
    """`lvm:` of a filesystem entry: a logical volume over a volume group of the devices."""

    model_config = ConfigDict(
        **{**LvmStack.model_config, **_Schema.model_config}, serialize_by_alias=True
    )

    stripes: Annotated[int, Field(ge=1, le=MAX_DEVICE_COUNT)] = 1
    stripe_size_bytes: ChunkSize | None = Field(default=None, alias="stripe_size")
    size_bytes: Annotated[int, BeforeValidator(_volume_size)] | None = Field(
        default=None, alias="size"
    )

    @model_validator(mode="after")
    def _stripe_size_needs_stripes(self) -> _LvmSpec:
        if self.stripe_size_bytes is not None and self.stripes == 1:
            raise ValueError(
                "stripe_size is for a striped volume: give stripes (2 or more) or remove it"
            )
        if self.thin and self.stripes > 1:
            raise ValueError("a thin volume is not striped here: give stripes 1 with thin")
        return self

    def stack(self) -> LvmStack:
        return LvmStack.model_validate(self.model_dump(by_alias=False))


class _CryptSpec(_Schema):
    """`crypt:` of a filesystem entry: dm-crypt (LUKS2) on top of the other layers."""

    cipher: CryptCipher = "aes-xts-plain64"

    def stack(self) -> CryptStack:
        return CryptStack(cipher=self.cipher)


class FilesystemSpec(_Schema):
    name: Name
    type: FsType | None = None
    mkfs: list[MkfsArg] = Field(default_factory=list)
    # The layers under the filesystem, from the disks up: loop, md, lvm, crypt.
    loop: _LoopSpec | None = None
    md: _MdSpec | None = None
    lvm: _LvmSpec | None = None
    crypt: _CryptSpec | None = None

    @model_validator(mode="after")
    def _type_matches_name(self) -> FilesystemSpec:
        if self.type is None and self.name not in FILESYSTEM_TYPES:
            raise ValueError(
                f"filesystem {self.name!r} needs a type; allowed: {listing(FILESYSTEM_TYPES)}"
            )
        if self.type is not None and self.name in FILESYSTEM_TYPES and self.type != self.name:
            raise ValueError(
                f"the name {self.name!r} is a filesystem type, so its type must be {self.name!r},"
                f" not {self.type!r}; give this filesystem another name"
            )
        return self


class OptionSetSpec(_Schema):
    name: Name
    options: Annotated[str, AfterValidator(_check_options)]

    @model_validator(mode="after")
    def _default_is_reserved(self) -> OptionSetSpec:
        if self.name == DEFAULT_OPTIONS:
            raise ValueError(
                f"the name {DEFAULT_OPTIONS!r} is reserved for no options (the kernel's defaults)"
            )
        return self


FilesystemEntry = Annotated[
    Annotated[Annotated[str, AfterValidator(_check_fstype)], Tag("<text>")]
    | Annotated[FilesystemSpec, Tag("<mapping>")],
    Discriminator(
        _entry_kind,
        custom_error_type="filesystem_entry",
        custom_error_message="expected a filesystem type name or a mapping {name, type, mkfs}",
    ),
]
OptionSetEntry = Annotated[
    Annotated[Annotated[str, AfterValidator(_check_option_entry)], Tag("<text>")]
    | Annotated[OptionSetSpec, Tag("<mapping>")],
    Discriminator(
        _entry_kind,
        custom_error_type="option_set_entry",
        custom_error_message=(
            "expected 'default', a string of mount options or a mapping {name, options}"
        ),
    ),
]
