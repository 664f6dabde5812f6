"""Where a manifest version's table rows point: each at a directory of its own.

A partition table's location is a path inside the root (checked as text by
:func:`~..storage.check_location`); among the rows of one manifest version no two may share a
directory, nor may one lie inside another's (a row copied or edited around this package would
read another partition's rows twice, or as a different partition, and cleanup would judge one
table's versions by the wrong rows), and none may be ``__manifest`` or lie inside it (its rows
read as data, its versions removed by cleanup). What lies at or below a ``__manifest`` on
storage -- a namespace nested below the root -- is checked where the directories are met
(:func:`~..storage.check_table_dir`, listings)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from .. import storage
from ..errors import TableLocationError


def check_row_locations(rows: pa.Table, where: str) -> None:
    """Refuse (:class:`TableLocationError` naming the rows) manifest ``rows`` (of one version,
    described by ``where``) whose table locations are ``__manifest`` or inside it, or share a
    directory, or lie one inside another. One vectorised pass when no location has a ``/``
    (this package's own, always); rows without the columns are not checked."""
    names = set(rows.column_names)
    if not {"object_id", "object_type", "location"} <= names or rows.num_rows == 0:
        return
    tables = rows.filter(pc.equal(rows.column("object_type"), "table"))
    tables = tables.filter(pc.is_valid(tables.column("location")))
    if tables.num_rows == 0:
        return
    locations = tables.column("location")
    inside = pc.match_substring_regex(locations, rf"(^|/){storage.MANIFEST_DIR}(/|$)")
    if pc.any(inside).as_py():
        i = pc.index(inside, True).as_py()
        oid, location = tables.column("object_id")[i].as_py(), locations[i].as_py()
        raise storage.manifest_location_error(oid, location)
    nested = pc.any(pc.match_substring(locations, "/")).as_py()
    if not nested and len(pc.unique(locations)) == len(locations):
        return
    pairs = zip(tables.column("object_id").to_pylist(), locations.to_pylist(), strict=True)
    _check_pairs(pairs, where)


def _check_pairs(pairs: Iterable[tuple[str, str]], where: str) -> None:
    """Refuse two rows at one directory, or one inside the other. Sorted by path segments, a
    row that some row lies inside is directly followed by one that does (every row between
    them lies inside it too): comparing neighbours finds them all."""
    ordered = sorted(((tuple(loc.split("/")), oid) for oid, loc in pairs), key=lambda p: p[0])
    for (outer, other), (parts, oid) in itertools.pairwise(ordered):
        if parts[: len(outer)] != outer:
            continue
        how = "the same directory as" if parts == outer else "inside the table of"
        location = "/".join(parts)
        raise TableLocationError(
            f"{where}: table row {oid!r} has location {location!r}, {how} row {other!r} "
            f"({'/'.join(outer)!r}); each partition table must have a directory of its own. "
            "The manifest was changed outside this package: nothing was read, written or "
            "deleted; restore an earlier manifest version or remove the row",
            oid,
            location,
        )
