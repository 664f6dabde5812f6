"""The edges of a namespace, tried as an adversarial user would: namespaces nested below one,
manifest rows added with plain pylance that point at what is not a table of the namespace, and
symbolic links at any depth of a local root. Prints the Markdown tables of
docs/explanation/reliability.md, section 7.

Run by hand::

    .venv/bin/python bench/bench_edges.py [--workdir DIR] [--partitions 150] [--repeat 30]

Every operation on every case is run on a fresh copy; for each, the exception (or none), whether
it is this package's, whether stored data is unchanged (a hash of every file under the lake,
links not followed, outside files included) and, where a nested namespace or an outside
directory exists, whether it is unchanged. The last table is the price of checking a read's
files for links at the moment of use: a filter over ``--partitions`` partitions, warm, with the
check and with it switched off in the same process (median of ``--repeat``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core import table_files
from dagster_lance_partitioned.core.errors import PartitionedNamespaceError
from dagster_lance_partitioned.core.read import planning, scan

SCHEMA = pa.schema([("id", pa.int64()), ("country", pa.utf8()), ("value", pa.float64())])
FIELDS = [PartitionField.identity("country")]
OLD = 90 * 24 * 3600


def rows(n: int, start: int = 0, countries: tuple[str, ...] = ("US", "FR", "DE")) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "country": [countries[i % len(countries)] for i in range(n)],
            "value": [float(i) for i in range(n)],
        },
        schema=SCHEMA,
    )


def tree(root: Path) -> str:
    """One hash of every file under ``root`` and where every link points (links not followed)."""
    h = hashlib.sha1()
    for dirpath, dirs, names in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(
            [*names, *(d for d in dirs if os.path.islink(os.path.join(dirpath, d)))]
        ):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            if os.path.islink(path):
                h.update(os.readlink(path).encode())
            elif os.path.isfile(path):
                h.update(Path(path).read_bytes())
    return h.hexdigest()[:12]


def age(root: Path) -> None:
    when = time.time() - OLD
    for dirpath, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)


def lake(base: Path, nested: str = "eu/data") -> tuple[PartitionedNamespace, PartitionedNamespace]:
    outer = PartitionedNamespace.create(base / "sales", SCHEMA, FIELDS)
    inner = PartitionedNamespace.create(base / "sales" / nested, SCHEMA, FIELDS)
    for i in range(3):
        outer.write(rows(6, 100 * i))
        inner.write(rows(9, 1000 + 100 * i))
    return outer, inner


OPS: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "open": lambda ns: PartitionedNamespace.open(ns.uri),
    # reads of the latest version (a handle opened before the row was added reads the version
    # before it, which has no such row)
    "to_table": lambda ns: ns.refresh().to_table(),
    "count_rows": lambda ns: ns.refresh().count_rows("value >= 0"),
    "write_to_it": lambda ns: ns.write(rows(3, 900, ("XX",))),
    "compact": lambda ns: ns.maintenance.compact(),
    "cleanup(0)": lambda ns: ns.maintenance.cleanup(
        older_than=dt.timedelta(0), keep_manifest_versions=1
    ),
    "vacuum(0)": lambda ns: ns.maintenance.vacuum(grace=dt.timedelta(0)),
    "drop_partitions": lambda ns: ns.maintenance.drop_partitions("country = 'XX'"),
}


def attempt(run: Callable[[], Any]) -> str:
    try:
        run()
    except PartitionedNamespaceError as e:
        return type(e).__name__
    except Exception as e:  # a raw error crossed the package boundary
        return f"RAW {type(e).__name__}"
    return "-"


# -- 1. nested namespaces ------------------------------------------------------------------------
NESTED = [
    "eu/data",
    "x/_versions",
    "0123abcd_x/c",
    "eu/data/deeper/still",
    "0123abcd_v1$aaaaaaaaaaaaaaaa$dataset/n",
]


def nested_rows(work: Path) -> list[list[str]]:
    out = []
    for nested in NESTED:
        base = Path(tempfile.mkdtemp(dir=work))
        outer, inner = lake(base, nested)
        age(base)
        before, inner_rows = tree(Path(inner.uri)), inner.count_rows()
        listed = len(outer.inspect.find_orphans())
        result = outer.maintenance.vacuum(grace=dt.timedelta(0))
        outer.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
        outer.maintenance.compact()
        outer.maintenance.vacuum(grace=dt.timedelta(0))
        same = tree(Path(inner.uri)) == before
        readable = PartitionedNamespace.open(inner.uri).count_rows() == inner_rows
        out.append(
            [
                f"`{nested}`",
                str(listed),
                str(len(result.orphans_removed)),
                "yes" if same else "**no**",
                "yes" if readable else "**no**",
            ]
        )
    return out


# -- 2. hostile manifest rows --------------------------------------------------------------------
HOSTILE_ID = "v1$hostilehostileh$dataset"


def add_row(root: str, location: str) -> None:
    uri = os.path.join(root, "__manifest")
    table = lance.dataset(uri).to_table()
    tables = table.filter(pc.equal(table.column("object_type"), "table"))
    row = tables.slice(0, 1).to_pylist()[0]
    ns_row = dict(row, object_id=HOSTILE_ID.rsplit("$", 1)[0], object_type="namespace")
    ns_row.update(location=None, read_version=None)
    column = next(c for c in table.column_names if c.startswith("partition_field_"))
    row = dict(row, object_id=HOSTILE_ID, location=location)
    row.pop("dlp_stats", None)  # written by hand: no statistics
    row[column] = ns_row[column] = "XX"
    lance.write_dataset(
        pa.Table.from_pylist([ns_row, row], schema=table.schema), uri, mode="append"
    )


def hostile_location(kind: str, outer: PartitionedNamespace, inner: PartitionedNamespace) -> str:
    us = outer.inspect.partitions()[0]["location"]
    nested = inner.inspect.partitions()[0]["location"]
    return {
        "__manifest": "__manifest",
        "inside __manifest": "eu/data/__manifest",
        "a nested namespace's table": f"eu/data/{nested}",
        "a nested namespace's root": "eu/data",
        "another row's table": us,
        "inside another row's table": f"{us}/data",
    }[kind]


def hostile_rows(work: Path) -> list[list[str]]:
    out = []
    for kind in [
        "__manifest",
        "inside __manifest",
        "a nested namespace's table",
        "a nested namespace's root",
        "another row's table",
        "inside another row's table",
    ]:
        errors: list[str] = []
        unchanged = 0
        for op in OPS.values():
            base = Path(tempfile.mkdtemp(dir=work))
            outer, inner = lake(base)
            add_row(outer.uri, hostile_location(kind, outer, inner))
            age(base)
            before = tree(base)
            errors.append(attempt(lambda op=op, outer=outer: op(outer)))
            unchanged += (tree(base) == before) if errors[-1] != "-" else 0
        refused = [e for e in errors if e != "-"]
        out.append(
            [
                kind,
                f"{len(refused)} / {len(errors)}",
                ", ".join(sorted(set(refused))),
                str(sum(e.startswith("RAW") for e in errors)),
                f"{unchanged} / {len(refused)}",
                not_refused(OPS, errors),
            ]
        )
    return out


def not_refused(ops: dict[str, Any], errors: list[str]) -> str:
    """The operations that did not raise (they never met the case)."""
    return ", ".join(name for name, e in zip(ops, errors, strict=True) if e == "-") or "-"


# -- 3. links at any depth -----------------------------------------------------------------------
LINK_OPS: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "to_table": lambda ns: ns.to_table(),
    "count_rows": lambda ns: ns.count_rows("value >= 0"),
    "append": lambda ns: ns.write(rows(3, 900, ("US",))),
    "update": lambda ns: ns.update("id = 1", {"value": "value + 1"}),
    "compact": lambda ns: ns.maintenance.compact(),
    "cleanup(0)": OPS["cleanup(0)"],
    "vacuum(0)": OPS["vacuum(0)"],
}


def index_uuid(ds: lance.LanceDataset) -> str:
    return str(ds.describe_indices()[0].segments[0].uuid)


def links(work: Path) -> list[list[str]]:
    out = []
    cases = ["data file", "deletion file", "index directory", "table directory"]
    for case in cases:
        errors = []
        outside_same = 0
        for op in LINK_OPS:
            base = Path(tempfile.mkdtemp(dir=work))
            ns = PartitionedNamespace.create(base / "ns", SCHEMA, FIELDS)
            for i in range(3):
                ns.write(rows(6, 100 * i, ("US",)))
            ns.create_index("id", "BTREE")
            ns.delete("id = 0")
            ns.to_table()  # opened warm before the link appears
            p = ns.inspect.partitions()[0]
            table = base / "ns" / p["location"]
            ds = lance.dataset(str(table), version=p["read_version"])
            frag = ds.get_fragments()[0].metadata
            target = {
                "data file": table / "data" / frag.files[0].path,
                "deletion file": table
                / next(
                    f.metadata.deletion_file.path(f.metadata.id)
                    for f in ds.get_fragments()
                    if f.metadata.deletion_file is not None
                ),
                "index directory": table
                / "_indices"
                / str(ds.describe_indices()[0].segments[0].uuid),
                "table directory": table,
            }[case]
            moved = base / "outside" / target.name
            moved.parent.mkdir()
            shutil.move(str(target), str(moved))
            target.symlink_to(moved, target_is_directory=moved.is_dir())
            age(base)
            before = tree(base / "outside")
            errors.append(attempt(lambda op=op, ns=ns: LINK_OPS[op](ns)))
            outside_same += tree(base / "outside") == before
        refused = [e for e in errors if e != "-"]
        out.append(
            [
                case,
                f"{len(refused)} / {len(errors)}",
                ", ".join(sorted(set(refused))),
                f"{outside_same} / {len(errors)}",
                not_refused(LINK_OPS, errors),
            ]
        )
    return out


# -- 4. what the check costs a read --------------------------------------------------------------
def link_check_cost(work: Path, partitions: int, repeat: int) -> list[list[str]]:
    base = Path(tempfile.mkdtemp(dir=work))
    countries = tuple(f"c{i:03d}" for i in range(partitions))
    ns = PartitionedNamespace.create(base / "ns", SCHEMA, FIELDS)
    ns.write(rows(2000 * partitions, 0, countries))
    ns.to_table("value < 5")  # warm: tables open, plans kept

    real = scan.check_version_files, planning.check_known_files

    def timed(checked: bool) -> float:
        if checked:
            scan.check_version_files, planning.check_known_files = real
        else:
            scan.check_version_files = planning.check_known_files = lambda *a, **k: None
        try:
            t = time.perf_counter()
            ns.to_table("value < 5")
            return time.perf_counter() - t
        finally:
            scan.check_version_files, planning.check_known_files = real

    on, off = [], []
    for _ in range(repeat):  # interleaved: the machine's drift falls on both alike
        on.append(timed(True))
        off.append(timed(False))
    checked, unchecked = statistics.median(on), statistics.median(off)
    per = (checked - unchecked) / partitions * 1e6
    return [
        [
            str(partitions),
            f"{unchecked * 1e3:.1f}",
            f"{checked * 1e3:.1f}",
            f"{checked / unchecked:.3f}x",
            f"{per:.1f}",
        ]
    ]


def table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--partitions", type=int, default=150)
    parser.add_argument("--repeat", type=int, default=60)
    args = parser.parse_args()
    # rows of small tables read again are kept in memory, where no file (and no link) is met:
    # keep none, so that every read reads its files and meets what was put there
    os.environ["DLP_READ_CACHE_MB"] = "0"
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dlp-edges-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    print("### Namespaces nested below the one maintained\n")
    print(
        table(
            [
                "nested at",
                "listed as orphans",
                "removed by vacuum(0)",
                "nested files unchanged",
                "nested rows readable",
            ],
            nested_rows(work),
        )
    )
    print("\n### Manifest rows added with plain pylance\n")
    print(
        table(
            [
                "the row's location",
                "operations refused",
                "errors",
                "raw errors",
                "stored data unchanged (refused)",
                "not refused (never met the row)",
            ],
            hostile_rows(work),
        )
    )
    print("\n### Symbolic links at any depth (warm handles)\n")
    print(
        table(
            [
                "link in place of the US table's",
                "operations refused",
                "errors",
                "outside files unchanged",
                "not refused (never read the file)",
            ],
            links(work),
        )
    )
    print("\n### What checking a read's files costs\n")
    print(
        table(
            ["partitions", "read without the check, ms", "with it, ms", "ratio", "µs per table"],
            link_check_cost(work, args.partitions, args.repeat),
        )
    )
    print(f"\n({time.time() - started:.0f} s; operations: {', '.join(OPS)})")
    table_files.forget_file_lists()


if __name__ == "__main__":
    main()
