"""The write modes: how a write treats the partitions it touches (defined here, once)."""

from __future__ import annotations

from typing import Literal, get_args

from ..errors import WriteError

WriteMode = Literal["append", "overwrite_partitions", "overwrite"]
"""``append`` adds rows; ``overwrite_partitions`` (Spark's dynamic overwrite) replaces the
partitions the write has rows for, or names; ``overwrite`` replaces the whole table."""

WRITE_MODES: tuple[WriteMode, ...] = get_args(WriteMode)


def check_mode(mode: str) -> WriteMode:
    """``mode`` as a :data:`WriteMode`; :class:`WriteError` when it is none."""
    for known in WRITE_MODES:
        if mode == known:
            return known
    raise WriteError(f"unknown write mode {mode!r} (use one of {', '.join(WRITE_MODES)})")
