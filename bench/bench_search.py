"""Search across partitions (issue 22): one index per partition table, searched where the
filter prunes to and merged, against ONE plain Lance dataset holding the same rows with one
index, and exact brute force for recall; all in the same run.

Vectors: ``--rows`` (default 1,000,000) vectors of 128 float32 dimensions around 1,000 Gaussian
cluster centres (each cluster spread mostly in a 16-dimensional subspace, as real embeddings
have a low intrinsic dimension), 100 tenants of Zipf-distributed sizes (s = 1), each tenant's
rows drawn from its own random 50 of the centres (tenants share centres); the namespace is
partitioned by tenant with ``IVF_PQ`` declared (the package's defaults). The single dataset
gets one ``IVF_PQ`` index with the parameters Lance's documentation suggests
(``num_partitions`` = sqrt(rows), ``num_sub_vectors`` = dim / 8 = 16, as the package uses),
searched with ``tenant = 'x'`` as a pre-filter and as a post-filter; as a stronger baseline
its pre-filter is also measured on the same dataset with a ``BITMAP`` index on ``tenant``
(built afterwards, not counted in the build time). Queries are data points plus noise: for
one tenant, with the tenant drawn uniformly over tenants and, separately, in proportion to
its size (a random row, as traffic proportional to data would be); across all tenants, the
size-proportional query vectors without a filter. Each query set is searched with every
system's defaults and with a tuned setting (``--tuned-ours``, ``--tuned-single``); systems
take turns query by query. Index builds are interleaved, best of ``--build-repeat``.

Full text: ``--docs`` (default 100,000) documents of 4-16 words from a 20,000-word synthetic
vocabulary (Zipf, s = 1.07), 70 % of the words from the global distribution and 30 % from a
partition-specific one (so a term's frequency differs from partition to partition), in 50
partitions of Zipf-distributed sizes (s = 0.7); 50 queries of 1-3 mid-frequency words (ranks
20-2,000). The merged top 10 is compared with one Lance dataset's ``INVERTED`` index over the
same rows: rows shared, and rows shared counting ties (a row of ours whose score in the single
dataset equals the single dataset's 10th score is a valid top-10 answer).

Run by hand (progress on stderr, Markdown tables on stdout; results in
docs/explanation/benchmarks.md,
"Search across partitions (issue 22)"):

    .venv/bin/python bench/bench_search.py                 # the full run, ~10 min on 2 cores
    .venv/bin/python bench/bench_search.py --rows 100000 --docs 20000   # a quick check

``--workdir DIR`` keeps the data (and reuses it when run again with the same sizes: the build
figures are then those of the run that built it)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LANCE_LOG", "error")  # Lance's per-query deprecation warnings

import lance
import numpy as np
import pyarrow as pa

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.search.declaration import VECTOR_MIN_ROWS, IndexDeclaration
from dagster_lance_partitioned.core.search.session import SearchSession

DIM = 128
TENANTS = 150
CATS = 16  # values of the non-partition column ``cat``
CENTRES = 1000
CENTRES_PER_TENANT = 50
CENTRE_SCALE = 2.0  # cluster centres: Gaussian, this standard deviation per dimension
INTRINSIC = 16  # dimensions of a cluster's spread (plus ISOTROPIC noise in all 128)
ISOTROPIC = 0.1
QUERY_NOISE = 0.3  # query = a data point + this fraction of a cluster's spread
K = 10
SEED = 22
VOCAB = 20_000
TEXT_PARTS = 50
WARMUP = 10
UNIFORM = "one tenant, tenants uniform"
BY_SIZE = "one tenant, tenants by size"
ALL = "all tenants"
BITMAP_PRE = "single pre-filter + BITMAP(tenant)"
CAT = "filter cat = c (all tenants)"
PRICE = "filter tenant = 'x' AND price < 20"
SESSION = SearchSession()  # what ours keeps between queries (measured at the end)

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def dir_bytes(root: str, only: str | None = None) -> int:
    """Bytes of the files under ``root`` (with ``only``: under directories of that name)."""
    total = 0
    for path, _, files in os.walk(root):
        if only is not None and f"{os.sep}{only}" not in path:
            continue
        total += sum(os.path.getsize(os.path.join(path, f)) for f in files)
    return total


def parse_params(text: str) -> dict[str, int]:
    """``nprobes=40,refine_factor=10`` as a dict (empty string: none)."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, _, value = item.partition("=")
        out[key.strip()] = int(value)
    return out


# ---------------------------------------------------------------------------- vector data


def zipf_sizes(total: int, n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** s
    sizes = np.floor(total * weights / weights.sum()).astype(np.int64)
    sizes[: total - sizes.sum()] += 1
    return sizes


def vector_data(rows: int) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """The table (id, tenant, vec), the vectors, each row's tenant and the tenant sizes."""
    rng = np.random.default_rng(SEED)
    centres = rng.standard_normal((CENTRES, DIM)).astype(np.float32) * CENTRE_SCALE
    basis = rng.standard_normal((INTRINSIC, DIM)).astype(np.float32) / math.sqrt(INTRINSIC)
    sizes = zipf_sizes(rows, TENANTS, 1.0)
    tenant = np.repeat(np.arange(TENANTS), sizes)
    cluster = np.empty(rows, dtype=np.int64)
    start = 0
    for size in sizes:
        own = rng.choice(CENTRES, CENTRES_PER_TENANT, replace=False)
        cluster[start : start + size] = rng.choice(own, size)
        start += size
    vectors = np.empty((rows, DIM), dtype=np.float32)
    for lo in range(0, rows, 100_000):
        hi = min(rows, lo + 100_000)
        vectors[lo:hi] = centres[cluster[lo:hi]] + spread(rng, hi - lo, basis, 1.0)
    # rows in random order (as written over time), tenant kept per row
    order = rng.permutation(rows)
    vectors, tenant = vectors[order], tenant[order]
    names = np.array([f"t{t:03d}" for t in range(TENANTS)])
    vec = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM)
    extra = np.random.default_rng(SEED + 5)
    table = pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "tenant": names[tenant],
            "cat": extra.integers(0, CATS, rows).astype(np.int32),
            "price": (extra.random(rows) * 100).astype(np.float32),
            "vec": vec,
        }
    )
    return table, vectors, tenant, sizes


def spread(rng: np.random.Generator, n: int, basis: np.ndarray, scale: float) -> np.ndarray:
    """Gaussian offsets from a centre: mostly in an ``INTRINSIC``-dimensional subspace (as real
    embeddings have a low intrinsic dimension), plus a little isotropic noise."""
    z = rng.standard_normal((n, INTRINSIC), dtype=np.float32)
    iso = rng.standard_normal((n, DIM), dtype=np.float32) * ISOTROPIC
    return scale * (z @ basis + iso)


def queries(vectors: np.ndarray, tenant: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Query vectors ``[set, i]`` and their tenants: set 0 with tenants uniform over tenants,
    set 1 in proportion to tenant size (a random row); each near a data point of its tenant."""
    rng = np.random.default_rng(SEED + 1)
    basis = _basis()
    by_tenant = [np.flatnonzero(tenant == t) for t in range(TENANTS)]
    uniform_t = rng.integers(0, TENANTS, n)
    uniform_rows = np.array([rng.choice(by_tenant[t]) for t in uniform_t])
    sized_rows = rng.integers(0, len(vectors), n)
    uq = vectors[uniform_rows] + spread(rng, n, basis, QUERY_NOISE)
    sq = vectors[sized_rows] + spread(rng, n, basis, QUERY_NOISE)
    return np.stack([uq, sq]), np.stack([uniform_t, tenant[sized_rows]])


def _basis() -> np.ndarray:
    """``vector_data``'s subspace basis (drawn from the same generator, after the centres)."""
    rng = np.random.default_rng(SEED)
    rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    return rng.standard_normal((INTRINSIC, DIM)).astype(np.float32) / math.sqrt(INTRINSIC)


def exact_top(
    vectors: np.ndarray, norms: np.ndarray, rows: np.ndarray | None, qs: np.ndarray
) -> list[np.ndarray]:
    """For each query of ``qs``, the ids of its K nearest rows among ``rows`` (None: all) by
    squared L2 (candidates from float32 matrix products, re-checked in float64)."""
    sub = vectors if rows is None else vectors[rows]
    sub_norms = norms if rows is None else norms[rows]
    cands: list[list[np.ndarray]] = [[] for _ in qs]
    step = 100_000
    for lo in range(0, len(sub), step):
        d = sub_norms[lo : lo + step, None] - 2.0 * (sub[lo : lo + step] @ qs.T)
        take = min(len(d), 4 * K)
        idx = np.argpartition(d, take - 1, axis=0)[:take]
        for j in range(len(qs)):
            cands[j].append(idx[:, j] + lo)
    out = []
    for j, q in enumerate(qs):
        cand = np.concatenate(cands[j])
        diff = sub[cand].astype(np.float64) - q.astype(np.float64)
        top = cand[np.argsort(np.einsum("ij,ij->i", diff, diff), kind="stable")[:K]]
        out.append(top if rows is None else rows[top])
    return out


# ---------------------------------------------------------------------------- vector runs


def build_vectors(work: str, rows: int, repeat: int) -> dict[str, Any]:
    """Write both stores and build their indexes (``repeat`` times each, interleaved: the
    machine is shared); returns the build figures (best of the repeats)."""
    log(f"generating {rows:,} vectors")
    table, _, _, sizes = vector_data(rows)
    ns_uri, single_uri = os.path.join(work, "ns"), os.path.join(work, "single.lance")
    log("writing the namespace (partitioned by tenant)")
    ns = PartitionedNamespace.create(ns_uri, table.schema, [PartitionField.identity("tenant")])
    _, ns_write = timed(lambda: ns.write(table))
    log(f"  {ns_write:.1f} s; writing the single dataset")
    _, single_write = timed(lambda: lance.write_dataset(table, single_uri))
    log(f"  {single_write:.1f} s")
    params = {"num_partitions": max(1, round(math.sqrt(rows))), "num_sub_vectors": DIM // 8}
    single_builds, ns_builds = [], []
    sizes_on_disk: dict[str, int] = {}
    coverage = None
    for i in range(repeat):
        single = lance.dataset(single_uri)
        log(f"build {i + 1}/{repeat}: single dataset IVF_PQ {params}")
        _, took = timed(lambda d=single: d.create_index("vec", "IVF_PQ", replace=True, **params))
        single_builds.append(took)
        log(f"  {took:.1f} s; ours: create_index over {TENANTS} partitions")
        if i:
            ns.drop_index("vec_ivf_pq")
        coverage, took = timed(lambda: ns.create_index("vec", "IVF_PQ"))
        ns_builds.append(took)
        log(
            f"  {took:.1f} s ({coverage.partitions_indexed} indexed, "
            f"{coverage.partitions_flat} flat)"
        )
        if not i:  # before rebuilds leave superseded index files behind
            sizes_on_disk = {
                "ns": dir_bytes(ns_uri, "_indices"),
                "single": dir_bytes(single_uri, "_indices"),
            }
    assert coverage is not None
    vector_version = lance.dataset(single_uri).version
    single = lance.dataset(single_uri)
    _, bitmap = timed(lambda: single.create_scalar_index("tenant", "BITMAP"))
    log(f"single dataset: BITMAP on tenant {bitmap:.1f} s")
    return {
        "rows": rows,
        "tenants": TENANTS,
        "single_params": params,
        "ns_write_s": ns_write,
        "single_write_s": single_write,
        "single_build_s": min(single_builds),
        "ns_build_s": min(ns_builds),
        "single_builds_s": single_builds,
        "ns_builds_s": ns_builds,
        "bitmap_build_s": bitmap,
        "single_vector_version": vector_version,
        "single_bitmap_version": lance.dataset(single_uri).version,
        "ns_indexed": coverage.partitions_indexed,
        "ns_flat": coverage.partitions_flat,
        "ns_index_bytes": sizes_on_disk["ns"],
        "single_index_bytes": sizes_on_disk["single"],
        "ns_params": [ns_params(int(s)) for s in sizes if s >= VECTOR_MIN_ROWS],
    }


def ns_params(rows: int) -> dict[str, int]:
    """The parameters the package derives for a partition table of ``rows`` rows."""
    decl = IndexDeclaration("vec_ivf_pq", "vec", None, "IVF_PQ", VECTOR_MIN_ROWS, {})
    return decl.build_params(rows, DIM)


def run_vectors(args: argparse.Namespace, work: str) -> list[str]:
    state_file = os.path.join(work, "vectors.json")
    built = None
    if os.path.exists(state_file):
        with open(state_file) as f:
            built = json.load(f)
        if built.get("rows") != args.rows or built.get("tenants") != TENANTS:
            raise SystemExit(f"{work} holds {built.get('rows')} rows; use another --workdir")
        log(f"reusing the data in {work}")
    else:
        built = build_vectors(work, args.rows, args.build_repeat)
        with open(state_file, "w") as f:
            json.dump(built, f)
    log("regenerating vectors for brute force")
    _, vectors, tenant, sizes = vector_data(args.rows)
    n = args.queries
    qv, qt = queries(vectors, tenant, n + WARMUP)
    names = [f"t{t:03d}" for t in range(TENANTS)]

    log("brute force ground truth")
    norms = np.einsum("ij,ij->i", vectors, vectors)
    truth_all = exact_top(vectors, norms, None, qv[1])
    truth_f: list[list[np.ndarray]] = [[np.empty(0)] * len(qt[s]) for s in (0, 1)]
    for t in range(TENANTS):
        rows = np.flatnonzero(tenant == t)
        for s in (0, 1):
            mine = np.flatnonzero(qt[s] == t)
            if len(mine):
                for j, top in zip(mine, exact_top(vectors, norms, rows, qv[s][mine]), strict=True):
                    truth_f[s][j] = top
    del vectors, norms

    ns = PartitionedNamespace.open(os.path.join(work, "ns"))
    single_uri = os.path.join(work, "single.lance")
    # the baseline: the single dataset with its one IVF_PQ index; and, as a stronger
    # baseline for its pre-filter, the same dataset with a BITMAP index on tenant as well
    single = lance.dataset(single_uri, version=built["single_vector_version"])
    single_bitmap = lance.dataset(single_uri, version=built["single_bitmap_version"])

    def ours(q: np.ndarray, t: int | None, params: dict[str, int]) -> np.ndarray:
        flt = None if t is None else f"tenant = '{names[t]}'"
        got = ns.search(q, k=K, filter=flt, columns=["id"], session=SESSION, **params)
        return got.column("id").to_numpy()

    def plain(
        ds: lance.LanceDataset, q: np.ndarray, t: int | None, params: dict[str, int], pre: bool
    ) -> np.ndarray:
        flt = None if t is None else f"tenant = '{names[t]}'"
        nearest = {"column": "vec", "q": q, "k": K, **params}
        got = ds.to_table(columns=["id"], nearest=nearest, filter=flt, prefilter=pre)
        return got.column("id").to_numpy()

    settings = [
        ("defaults", {}, {}),
        ("tuned", parse_params(args.tuned_ours), parse_params(args.tuned_single)),
    ]
    # (name, ours?, search(q, tenant or None, params))
    Search = Callable[[np.ndarray, "int | None", dict[str, int]], np.ndarray]
    filtered: list[tuple[str, bool, Search]] = [
        ("ours", True, ours),
        ("single pre-filter", False, lambda q, t, p: plain(single, q, t, p, True)),
        ("single post-filter", False, lambda q, t, p: plain(single, q, t, p, False)),
        (BITMAP_PRE, False, lambda q, t, p: plain(single_bitmap, q, t, p, True)),
    ]
    unfiltered: list[tuple[str, bool, Search]] = [
        ("ours", True, lambda q, t, p: ours(q, None, p)),
        ("single", False, lambda q, t, p: plain(single, q, None, p, True)),
    ]
    results: dict[tuple[str, str, str], tuple[float, float, float, int]] = {}
    for label, p_ours, p_single in settings:
        for src, set_name, systems, truth in (
            (0, UNIFORM, filtered, truth_f[0]),
            (1, BY_SIZE, filtered, truth_f[1]),
            (1, ALL, unfiltered, truth_all),
        ):
            # warm-up on queries not measured (opened tables, index caches), then every query
            # on every system in turn (the machine is shared: interleaved, not in blocks)
            times: dict[str, list[float]] = {name: [] for name, _, _ in systems}
            recalls: dict[str, list[float]] = {name: [] for name, _, _ in systems}
            for i in [*range(n, n + WARMUP), *range(n)]:
                q, t = qv[src][i], int(qt[src][i])
                for name, is_ours, fn in systems:
                    params = p_ours if is_ours else p_single
                    got, took = timed(lambda f=fn, q=q, t=t, p=params: f(q, t, p))
                    if i < n:
                        times[name].append(took * 1000)
                        recalls[name].append(len(set(got.tolist()) & set(truth[i].tolist())) / K)
            for name, _, _ in systems:
                r, tm = recalls[name], times[name]
                results[(label, set_name, name)] = (
                    statistics.mean(r),
                    pct(tm, 50),
                    pct(tm, 95),
                    sum(1 for x in r if x < 1),
                )
                log(
                    f"{label:8s} {set_name:32s} {name:28s} recall {statistics.mean(r):.3f} "
                    f"p50 {pct(tm, 50):7.1f} ms p95 {pct(tm, 95):7.1f} ms"
                )
    data = vector_data(args.rows)
    extra = filter_and_cold(args, work, built, ns, qv, qt, data)
    del data
    kept_mb = SESSION.size_bytes() / 2**20
    report = ", ".join(
        f"{k} {v.bytes / 2**20:.1f} MiB ({v.entries})" for k, v in SESSION.report().items()
    )
    lines = vector_report(args, built, sizes, results, settings, kept_mb, report)
    return [*lines, "", *extra]


def filter_and_cold(
    args: argparse.Namespace,
    work: str,
    built: dict[str, Any],
    ns: PartitionedNamespace,
    qv: np.ndarray,
    qt: np.ndarray,
    data: tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray],
) -> list[str]:
    """Filters on non-partition columns (``cat = c`` over all tenants; ``tenant = 'x' AND
    price < 20``) without and then with scalar indexes (ours: BITMAP on cat and BTREE on
    price declared on the namespace; the single dataset: the same, and BITMAP on tenant), and
    all-tenant queries cold (the session cleared before each) against warm."""
    table, vectors, tenant, _ = data
    cat, price = table.column("cat").to_numpy(), table.column("price").to_numpy()
    names = [f"t{t:03d}" for t in range(TENANTS)]
    n = args.queries
    norms = np.einsum("ij,ij->i", vectors, vectors)

    def sql(set_name: str, i: int) -> str:
        if set_name == CAT:
            return f"cat = {i % CATS}"
        return f"tenant = '{names[int(qt[1][i])]}' AND price < 20"

    log("brute force for the filter sets")
    truth: dict[str, list[np.ndarray]] = {}
    for set_name in (CAT, PRICE):
        truth[set_name] = []
        for i in range(n):
            if set_name == CAT:
                rows = np.flatnonzero(cat == i % CATS)
            else:
                rows = np.flatnonzero((tenant == int(qt[1][i])) & (price < 20))
            truth[set_name].append(exact_top(vectors, norms, rows, qv[1][i : i + 1])[0])
    del norms
    single_uri = os.path.join(work, "single.lance")
    for decl in ns.indexes():
        if decl.column in ("cat", "price"):
            ns.drop_index(decl.name)
    out = [
        "| filter | scalar indexes | ours recall@10 | ours p50 ms | single recall@10 | "
        "single p50 ms | ours / single |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for phase in ("none", "BITMAP(cat), BTREE(price) (+ BITMAP(tenant) single)"):
        if phase == "none":
            single = lance.dataset(single_uri, version=built["single_vector_version"])
        else:
            log("scalar indexes: ours create_index cat BITMAP, price BTREE; single the same")
            ns.create_index("cat", "BITMAP")
            ns.create_index("price", "BTREE")
            single = lance.dataset(single_uri)
            if single.version == built["single_bitmap_version"]:
                single.create_scalar_index("cat", "BITMAP")
                single.create_scalar_index("price", "BTREE")
            single = lance.dataset(single_uri)
        for set_name in (CAT, PRICE):
            times: dict[str, list[float]] = {"ours": [], "single": []}
            recalls: dict[str, list[float]] = {"ours": [], "single": []}
            for i in [*range(min(WARMUP, n)), *range(n)]:
                q, f = qv[1][i], sql(set_name, i)
                got, a = timed(
                    lambda q=q, f=f: ns.search(q, k=K, filter=f, columns=["id"], session=SESSION)
                )
                ref, b = timed(
                    lambda q=q, f=f, d=single: d.to_table(
                        columns=["id"],
                        nearest={"column": "vec", "q": q, "k": K},
                        filter=f,
                        prefilter=True,
                    )
                )
                for name, found, took in (("ours", got, a), ("single", ref, b)):
                    times[name].append(took * 1000)
                    want = set(truth[set_name][i].tolist())
                    recalls[name].append(len(set(found["id"].to_pylist()) & want) / K)
            o_t, s_t = times["ours"][WARMUP:], times["single"][WARMUP:]
            o_r, s_r = recalls["ours"][WARMUP:], recalls["single"][WARMUP:]
            line = (
                f"| {set_name} | {phase} | {statistics.mean(o_r):.3f} | {pct(o_t, 50):.1f} | "
                f"{statistics.mean(s_r):.3f} | {pct(s_t, 50):.1f} | "
                f"{pct(o_t, 50) / pct(s_t, 50):.1f}x |"
            )
            log(line)
            out.append(line)
    log("cold (session cleared before each query) against warm, all tenants")
    cold, warm = [], []
    for i in range(n):
        q = qv[1][i]
        SESSION.clear()
        _, a = timed(lambda q=q: ns.search(q, k=K, columns=["id"], session=SESSION))
        _, b = timed(lambda q=q: ns.search(q, k=K, columns=["id"], session=SESSION))
        cold.append(a * 1000)
        warm.append(b * 1000)
    kept = SESSION.size_bytes() / 2**20
    out += [
        "",
        "| all tenants, package defaults | p50 ms | p95 ms |",
        "|---|---:|---:|",
        f"| cold (session cleared) | {pct(cold, 50):.1f} | {pct(cold, 95):.1f} |",
        f"| warm (the same query again) | {pct(warm, 50):.1f} | {pct(warm, 95):.1f} |",
        f"| cold / warm | {pct(cold, 50) / pct(warm, 50):.2f} | |",
        "",
        f"Session size after one all-tenant query: {kept:.1f} MiB.",
    ]
    log("\n".join(out[-6:]))
    return out


Results = dict[tuple[str, str, str], tuple[float, float, float, int]]


def vector_report(
    args: argparse.Namespace,
    built: dict[str, Any],
    sizes: np.ndarray,
    results: Results,
    settings: list[tuple[str, dict[str, int], dict[str, int]]],
    kept_mb: float,
    kept_report: str,
) -> list[str]:
    sp = built["single_params"]
    parts = sorted({p["num_partitions"] for p in built["ns_params"]})
    subs = sorted({p["num_sub_vectors"] for p in built["ns_params"]})
    out = [
        f"Vectors: {built['rows']:,} x {DIM} float32, {TENANTS} tenants (Zipf sizes "
        f"{int(sizes[0]):,} .. {int(sizes[-1]):,} rows; {built['ns_indexed']} partition tables "
        f"indexed, {built['ns_flat']} below {VECTOR_MIN_ROWS:,} rows searched flat), "
        f"{args.queries} queries per set, k = {K}. Single dataset: IVF_PQ "
        f"num_partitions={sp['num_partitions']}, num_sub_vectors={sp['num_sub_vectors']}; ours "
        f"(package defaults): num_partitions {parts[0]}..{parts[-1]} per partition table, "
        f"num_sub_vectors {', '.join(map(str, subs))}."
        if parts
        else "",
        "",
    ]
    for label, p_ours, p_single in settings:
        out.append(
            f"- `{label}`: ours {fmt(p_ours) or 'package defaults'}; "
            f"single {fmt(p_single) or 'Lance defaults'}"
        )
    out += [
        "",
        "| params | queries | system | recall@10 | p50 ms | p95 ms | queries with recall < 1 |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for (label, set_name, name), (recall, p50, p95, short) in results.items():
        out.append(
            f"| {label} | {set_name} | {name} | {recall:.3f} | {p50:.1f} | {p95:.1f} | {short} |"
        )
    rep = len(built["ns_builds_s"])
    out += [
        "",
        "| build | ours | single | ours / single |",
        "|---|---:|---:|---:|",
        f"| write (s) | {built['ns_write_s']:.1f} | {built['single_write_s']:.1f} | "
        f"{built['ns_write_s'] / built['single_write_s']:.2f} |",
        f"| IVF_PQ build, best of {rep} (s) | {built['ns_build_s']:.1f} | "
        f"{built['single_build_s']:.1f} | {built['ns_build_s'] / built['single_build_s']:.2f} |",
        f"| IVF_PQ builds (s) | {', '.join(f'{x:.1f}' for x in built['ns_builds_s'])} | "
        f"{', '.join(f'{x:.1f}' for x in built['single_builds_s'])} | |",
        f"| vector index size (MiB) | {built['ns_index_bytes'] / 2**20:.1f} | "
        f"{built['single_index_bytes'] / 2**20:.1f} | "
        f"{built['ns_index_bytes'] / built['single_index_bytes']:.2f} |",
        "",
        f"The single dataset's BITMAP index on tenant (not counted above): "
        f"{built['bitmap_build_s']:.1f} s.",
        "",
        f"What ours' search session kept at the end of these sets: {kept_mb:.0f} MiB "
        f"({kept_report}).",
        "",
    ]
    return out + targets(built, results, settings)


def fmt(params: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def targets(
    built: dict[str, Any],
    results: Results,
    settings: list[tuple[str, dict[str, int], dict[str, int]]],
) -> list[str]:
    """The issue's targets, met or not: one tenant against the single dataset's pre-filter
    (the issue's baseline, IVF_PQ only) and against the same with a BITMAP index on tenant."""

    def yes(ok: bool) -> str:
        return "yes" if ok else "**no**"

    out = [
        "| target | params | queries | ours | single (IVF_PQ only) | met | single + BITMAP | met |",
        "|---|---|---|---:|---:|---|---:|---|",
    ]
    for label, _, _ in settings:
        for set_name in (UNIFORM, BY_SIZE):
            o = results[(label, set_name, "ours")]
            s = results[(label, set_name, "single pre-filter")]
            b = results[(label, set_name, BITMAP_PRE)]
            out.append(
                f"| one tenant: recall@10 >= pre-filter's | {label} | {set_name} | {o[0]:.3f} | "
                f"{s[0]:.3f} | {yes(o[0] >= s[0])} | {b[0]:.3f} | {yes(o[0] >= b[0])} |"
            )
            out.append(
                f"| one tenant: p50 <= half the pre-filter's | {label} | {set_name} | "
                f"{o[1]:.1f} ms | {s[1]:.1f} ms | {yes(o[1] <= s[1] / 2)} | {b[1]:.1f} ms | "
                f"{yes(o[1] <= b[1] / 2)} |"
            )
        o = results[(label, ALL, "ours")]
        s = results[(label, ALL, "single")]
        out.append(
            f"| all tenants: recall@10 >= 0.95 | {label} | {ALL} | {o[0]:.3f} | {s[0]:.3f} | "
            f"{yes(o[0] >= 0.95)} | | |"
        )
        out.append(
            f"| all tenants: p50 <= 3x single | {label} | {ALL} | {o[1]:.1f} ms | "
            f"{s[1]:.1f} ms | {yes(o[1] <= 3 * s[1])} ({o[1] / s[1]:.0f}x) | | |"
        )
    ratio = built["ns_build_s"] / built["single_build_s"]
    out.append(
        f"| index build <= 1.5x single | | | {built['ns_build_s']:.1f} s | "
        f"{built['single_build_s']:.1f} s | {yes(ratio <= 1.5)} ({ratio:.2f}x) | | |"
    )
    return out


# ---------------------------------------------------------------------------- full text


def vocabulary() -> list[str]:
    """``VOCAB`` made-up words that the default tokenizer keeps as they are (no stop words,
    nothing a stemmer shortens)."""
    rng = np.random.default_rng(SEED + 2)
    consonants, vowels = list("bdfgklnprtvz"), list("aeiou")
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCAB:
        n = int(rng.integers(2, 4))
        w = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(n))
        if w in seen:
            continue
        seen.add(w)
        toks = lance.tokenize(w)
        if len(toks) == 1 and toks[0].text == w:
            words.append(w)
    return words


def text_data(docs: int) -> tuple[pa.Table, list[str]]:
    rng = np.random.default_rng(SEED + 3)
    words = np.array(vocabulary())
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.07
    p /= p.sum()
    sizes = zipf_sizes(docs, TEXT_PARTS, 0.7)
    part = np.repeat(np.arange(TEXT_PARTS), sizes)
    perms = [rng.permutation(VOCAB) for _ in range(TEXT_PARTS)]
    # partitions differ in document length: partition i's documents have L_i to 2 L_i words,
    # L_i from 4 to 40
    low = 4 + (np.arange(TEXT_PARTS) * 37) % 37
    lengths = rng.integers(low[part], 2 * low[part] + 1)
    ranks = rng.choice(VOCAB, int(lengths.sum()), p=p)
    local = rng.random(len(ranks)) < 0.3
    owner = np.repeat(part, lengths)
    ids = ranks.copy()
    for i in range(TEXT_PARTS):
        m = local & (owner == i)
        ids[m] = perms[i][ranks[m]]
    texts, pos = [], 0
    for n in lengths:
        texts.append(" ".join(words[ids[pos : pos + n]]))
        pos += n
    order = rng.permutation(docs)
    table = pa.table(
        {
            "id": np.arange(docs, dtype=np.int64),
            "part": part[order].astype(np.int32),
            "txt": pa.array([texts[i] for i in order]),
        }
    )
    qrng = np.random.default_rng(SEED + 4)
    qs = []
    for _ in range(50 + WARMUP):
        n = int(qrng.integers(1, 4))
        qs.append(" ".join(words[qrng.integers(20, 2000, n)]))
    return table, qs


def run_text(args: argparse.Namespace, work: str) -> list[str]:
    log(f"generating {args.docs:,} documents")
    table, qs = text_data(args.docs)
    ns_uri, single_uri = os.path.join(work, "text_ns"), os.path.join(work, "text_single.lance")
    for path in (ns_uri, single_uri):
        shutil.rmtree(path, ignore_errors=True)
    ns = PartitionedNamespace.create(ns_uri, table.schema, [PartitionField.identity("part")])
    ns.write(table)
    single = lance.write_dataset(table, single_uri)
    log("building FTS indexes")
    _, single_build = timed(lambda: single.create_scalar_index("txt", "INVERTED"))
    _, ns_build = timed(lambda: ns.create_index("txt", "FTS"))
    log(f"  single {single_build:.1f} s, ours {ns_build:.1f} s")
    single = lance.dataset(single_uri)

    def theirs(q: str, limit: int | None = K) -> pa.Table:
        return single.to_table(columns=["id"], full_text_query=q, limit=limit)

    def ours(q: str) -> pa.Table:
        return ns.search(q, k=K, columns=["id"], session=SESSION)

    n = len(qs) - WARMUP
    for q in qs[n:]:
        ours(q), theirs(q)
    # rows shared per 10: of min(10, rows matching) when fewer than 10 rows match
    overlap, tie_overlap, t_ours, t_single, matches = [], [], [], [], []
    for q in qs[:n]:
        mine, a = timed(lambda q=q: ours(q))
        ref, b = timed(lambda q=q: theirs(q))
        t_ours.append(a * 1000)
        t_single.append(b * 1000)
        got, want = mine.column("id").to_pylist(), ref.column("id").to_pylist()
        full = theirs(q, limit=args.docs)
        matches.append(full.num_rows)
        if not want:
            overlap.append(10.0 if not got else 0.0)
            tie_overlap.append(overlap[-1])
            continue
        scale = 10 / len(want)
        overlap.append(len(set(got) & set(want)) * scale)
        scores = full.column("_score").to_pylist()
        score = dict(zip(full.column("id").to_pylist(), scores, strict=True))
        last = sorted(scores, reverse=True)[len(want) - 1]
        valid = sum(1 for r in got if score.get(r, -1.0) >= last * (1 - 1e-5))
        tie_overlap.append(min(len(want), valid) * scale)
    log(
        f"FTS overlap mean {statistics.mean(overlap):.2f} min {min(overlap):.1f}; counting ties "
        f"mean {statistics.mean(tie_overlap):.2f} min {min(tie_overlap):.1f}"
    )
    few = sum(1 for m in matches if m < K)
    return [
        f"Full text: {args.docs:,} documents in {TEXT_PARTS} partitions, {n} queries of "
        f"1-3 words ({few} match fewer than {K} rows; shared rows are counted per 10 of "
        f"those that match), k = {K}.",
        "",
        "| | ours | single dataset | ours / single |",
        "|---|---:|---:|---:|",
        f"| INVERTED index build (s) | {ns_build:.1f} | {single_build:.1f} | "
        f"{ns_build / single_build:.2f} |",
        *(
            f"| p{p} ms | {pct(t_ours, p):.1f} | {pct(t_single, p):.1f} | "
            f"{pct(t_ours, p) / pct(t_single, p):.2f} |"
            for p in (50, 95)
        ),
        "",
        f"Top 10 shared with the single dataset (of 10): mean {statistics.mean(overlap):.2f}, "
        f"min {min(overlap):.1f}, queries with >= 8: {sum(1 for o in overlap if o >= 8)} / {n}; "
        f"counting ties (a row whose score in the single dataset equals its 10th score is a "
        f"valid answer): mean {statistics.mean(tie_overlap):.2f}, min {min(tie_overlap):.1f}, "
        f"queries with >= 8: {sum(1 for o in tie_overlap if o >= 8)} / {n}.",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="vectors (default 1,000,000)")
    ap.add_argument("--queries", type=int, default=200, help="queries per set (default 200)")
    ap.add_argument("--docs", type=int, default=100_000, help="documents (default 100,000)")
    ap.add_argument("--tuned-ours", default="probes=10,refine_factor=10")
    ap.add_argument("--tuned-single", default="nprobes=40,refine_factor=10")
    ap.add_argument("--build-repeat", type=int, default=3, help="index builds of each (best of)")
    ap.add_argument("--skip-text", action="store_true")
    ap.add_argument("--skip-vectors", action="store_true")
    ap.add_argument("--workdir", help="keep the data here (reused when run again)")
    ap.add_argument("--quick", action="store_true", help="100,000 vectors, 20,000 documents")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.docs, args.queries, args.build_repeat = 100_000, 20_000, 50, 1
    work = args.workdir or tempfile.mkdtemp(prefix="dlp_search_")
    os.makedirs(work, exist_ok=True)
    lines = [
        f"{dt.date.today().isoformat()}, {os.cpu_count()} cores ({platform.machine()}), "
        f"pylance {lance.__version__}, pyarrow {pa.__version__}, "
        f"Python {platform.python_version()}",
        "",
    ]
    try:
        if not args.skip_vectors:
            lines += run_vectors(args, work)
            lines.append("")
        if not args.skip_text:
            lines += run_text(args, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    log(f"done in {time.perf_counter() - T0:.0f} s")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
