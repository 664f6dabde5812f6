"""The shape of the ``__manifest`` table: its columns, the writer flags it carries, the names of
the partition tables it registers."""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Iterable

import pyarrow as pa

from ..errors import ManifestError
from ..partitioning.partition_spec import PartitionSpec

PK_KEY = "lance-schema:unenforced-primary-key:position"
WRITER_FLAG_KEY = "lance.namespace.manifest.writer_feature_flags"

# Our bit of the writer feature flags: the high bit 1 << 62 (Lance assigns bits from the bottom;
# 1 = namespace lifecycle is taken, 2 is the next it will assign). Namespaces written before
# Lance took the low bits carry the legacy value 2 and no high bit.
WRITER_FLAG_BIT = 1 << 62
LEGACY_WRITER_FLAG_BIT = 2
WRITER_FLAG_VALUE = str(WRITER_FLAG_BIT)
TABLE_NAME = "dataset"

SEP = "$"

COMMIT_PROPERTY_PREFIX = "dlp."

_NAME_ALPHABET = string.ascii_lowercase + string.digits


def base_manifest_schema() -> pa.Schema:
    """The manifest columns every partitioned namespace has, before partition columns."""
    return pa.schema(
        [
            pa.field("object_id", pa.utf8(), nullable=False, metadata={PK_KEY: "0"}),
            pa.field("object_type", pa.utf8(), nullable=False),
            pa.field("location", pa.utf8()),
            pa.field("metadata", pa.utf8()),
            pa.field("base_objects", pa.list_(pa.field("object_id", pa.utf8()))),
            pa.field("read_version", pa.uint64()),
            pa.field("read_branch", pa.utf8()),
            pa.field("read_tag", pa.utf8()),
        ]
    )


def writer_flags(existing: str | None) -> str:
    """The writer feature flags with our bit OR-ed into ``existing`` (a decimal u64 bitmask).

    ``existing`` carrying the legacy bit but not ours (a namespace written by an earlier
    version of this package) has the legacy bit replaced by ours."""
    flags = parse_writer_flags(existing)
    if flags & LEGACY_WRITER_FLAG_BIT and not flags & WRITER_FLAG_BIT:
        flags &= ~LEGACY_WRITER_FLAG_BIT
    return str(flags | WRITER_FLAG_BIT)


def parse_writer_flags(value: str | None) -> int:
    """The writer feature flags of a ``__manifest`` (0 when unset)."""
    if value is None or value == "":
        return 0
    try:
        flags = int(value)
    except ValueError:
        raise ManifestError(f"{WRITER_FLAG_KEY} is not a decimal bitmask: {value!r}") from None
    if not 0 <= flags < 1 << 64:
        raise ManifestError(f"{WRITER_FLAG_KEY} is not a u64 bitmask: {value!r}")
    return flags


def random_name() -> str:
    """A random 16-character ``a-z0-9`` partition-namespace name."""
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(16))


def table_location(object_id: str) -> str:
    """A new table directory name, ``<8 random lowercase hex>_<object_id>``."""
    return f"{secrets.token_hex(4)}_{object_id}"


# The directory names this package gives partition tables: ``<8 lowercase hex>_<object id>``,
# the object id ``v<spec id>$<name>$...$dataset`` (names ``a-z0-9``; no name for a spec without
# partition fields). Nothing else under a root is the namespace's to delete.
_TABLE_DIR_NAME = re.compile(r"[0-9a-f]{8}_v[0-9]+(?:\$[a-z0-9]+)*\$" + TABLE_NAME)


def is_table_dir_name(name: str) -> bool:
    """Whether ``name`` is a directory name this package gives the partition tables it creates
    (see :func:`table_location`)."""
    return _TABLE_DIR_NAME.fullmatch(name) is not None


def partition_field_columns(specs: Iterable[PartitionSpec]) -> list[pa.Field]:
    """Manifest columns for every partition field of every spec, in first-seen order."""
    seen: dict[str, pa.Field] = {}
    for spec in specs:
        for f in spec.fields:
            if f.column not in seen:
                seen[f.column] = pa.field(f.column, f.result_type)
            elif seen[f.column].type != f.result_type:
                raise ManifestError(
                    f"partition column {f.column!r} has types {seen[f.column].type} and "
                    f"{f.result_type} in different specs"
                )
    return list(seen.values())
