"""The base of every record, in a module of its own so that records cell.py holds (a kernel
build's spec) can be defined in modules cell.py imports (model/kernel_spec.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Base of every record: immutable, and unknown fields are an error rather than ignored.

    defer_build: a record's validator is built when first used, not at import: the guest agent
    imports many records it never uses, and under an emulated CPU each costs time at every boot.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
