"""The facade's operation groups, as pyiceberg groups them on a table: ``ns.maintenance``
(compact, clean up, vacuum, drop partitions) and ``ns.inspect`` (partitions, health checks,
commit history). Each is a small object over the :class:`NamespaceState` the facade holds, so
an operation sees (and moves) the same manifest version as the facade."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..boundary import storage_boundary
from ..expr.filters import FilterLike
from ..manifest.state import NamespaceState, registered_partitions
from . import health, maintenance, statistics
from .health import (
    ORPHAN_GRACE,
    IntegrityIssue,
    Orphan,
    SchemaIssue,
    UncommittedVersion,
    VersionIssue,
)
from .history import Commit, commits
from .maintenance import CleanupResult, CompactResult, DropResult, VacuumResult
from .report import HealthReport, health_report
from .statistics import StatisticsResult

if TYPE_CHECKING:
    from ..search.catalog import IndexResult


class Maintenance:
    """Operations that rewrite or remove stored data without changing what a read returns
    (``drop_partitions`` aside: it deregisters whole partitions). Each commits at most once."""

    def __init__(self, state: NamespaceState) -> None:
        self.state = state

    @property
    def uri(self) -> str:
        """The namespace root."""
        return self.state.uri

    @storage_boundary("compacting")
    def compact(
        self, filter: FilterLike = None, target_rows_per_fragment: int = 1 << 20
    ) -> CompactResult:
        """Rewrite the selected partition tables with fewer, larger fragments (detached versions
        built on their pinned versions) and register them in one manifest commit."""
        return maintenance.compact(self.state, filter, target_rows_per_fragment)

    @storage_boundary("cleaning up")
    def cleanup(
        self,
        older_than: dt.timedelta = dt.timedelta(days=7),
        keep_manifest_versions: int = 10,
    ) -> CleanupResult:
        """Remove manifest versions older than both bounds, and partition-table versions older
        than ``older_than`` that no retained manifest version pins (time travel to every
        retained manifest version keeps working)."""
        return maintenance.cleanup(self.state, older_than, keep_manifest_versions)

    @storage_boundary("vacuuming")
    def vacuum(self, grace: dt.timedelta = dt.timedelta(days=7)) -> VacuumResult:
        """Delete orphan partition tables and unreferenced files older than ``grace``."""
        return maintenance.vacuum(self.state, grace)

    @storage_boundary("dropping partitions")
    def drop_partitions(self, filter: FilterLike) -> DropResult:
        """Deregister, in one manifest commit, the partitions all of whose rows match
        ``filter`` (refused, changing nothing, when a partition matches only in part)."""
        return maintenance.drop_partitions(self.state, filter)

    @storage_boundary("collecting statistics")
    def collect_statistics(
        self, filter: FilterLike = None, *, refresh: bool = False
    ) -> StatisticsResult:
        """Read the selected partition tables that have no statistics for their pinned
        version (``refresh``: all of them) and register their statistics in one manifest
        commit (no table version changes; see :mod:`.statistics`). Reads then skip the tables
        whose statistics prove a filter matches none of their rows."""
        return statistics.collect_statistics(self.state, filter, refresh=refresh)

    @storage_boundary("optimizing indexes")
    def optimize_indexes(self, filter: FilterLike = None) -> IndexResult:
        """Build the declared indexes the selected partition tables lack and fold the rows
        appended since into the ones they have (scalar and full-text indexes get a segment
        for the new rows, vector indexes are trained again), registered in one manifest
        commit."""
        from ..search.catalog import optimize_indexes

        return optimize_indexes(self.state, filter)


class Inspect:
    """Read-only views of the namespace at the manifest version it reads: its partitions, the
    health checks (see :mod:`.health`) and the commit history."""

    def __init__(self, state: NamespaceState) -> None:
        self.state = state

    @property
    def uri(self) -> str:
        """The namespace root."""
        return self.state.uri

    @storage_boundary("listing partitions")
    def partitions(self) -> list[dict[str, Any]]:
        """Every registered partition table: object id, location, spec, values, read version."""
        return registered_partitions(self.state.snapshot)

    @storage_boundary("checking partition schemas")
    def check_schemas(self) -> list[SchemaIssue]:
        """Registered tables whose schema does not fit the namespace schema (see
        :func:`.health.check_schemas`)."""
        return health.check_schemas(self.state)

    @storage_boundary("checking read versions")
    def check_read_versions(
        self, history: int | None = 50
    ) -> tuple[list[VersionIssue], list[UncommittedVersion]]:
        """Registered tables that cannot be read at their pinned state, and versions no manifest
        version references (see :func:`.health.check_read_versions`)."""
        return health.check_read_versions(self.state, history)

    @storage_boundary("finding orphans")
    def find_orphans(self, history: int | None = None) -> list[Orphan]:
        """Table directories no manifest version of ``history`` registers (see
        :func:`.health.find_orphans`)."""
        return health.find_orphans(self.state, history)

    @storage_boundary("checking the namespace's health")
    def check(
        self,
        *,
        history: int | None = 50,
        sample: int | None = None,
        grace: dt.timedelta = ORPHAN_GRACE,
        seed: int = 0,
    ) -> HealthReport:
        """Every health check at once (what ``lance-partitioned check`` runs): a
        :class:`.HealthReport` of the problems found (partition schemas, unreadable pinned
        versions, orphan tables older than ``grace``, rows in the wrong partition of every
        partition table or of ``sample`` of them) and the leftovers of interrupted writes
        (uncommitted table versions, younger orphan tables); ``report.ok`` when there is no
        problem. ``history``: see :meth:`check_read_versions`."""
        return health_report(self.state, history=history, sample=sample, grace=grace, seed=seed)

    @storage_boundary("checking integrity")
    def check_integrity(self, sample: int | None = None, seed: int = 0) -> list[IntegrityIssue]:
        """Rows whose partition values differ from their table's registered values (see
        :func:`.health.check_integrity`)."""
        return health.check_integrity(self.state, sample, seed)

    def history(self, since: int = 0, until: int | None = None) -> Iterator[Commit]:
        """The commits after manifest version ``since`` up to ``until`` (default: the latest),
        oldest first (see :func:`.history.commits`)."""
        return commits(self.uri, since, until, self.state.storage_options)
