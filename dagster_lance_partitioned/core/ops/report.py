"""One health report of a namespace: every check of :mod:`.health` at one manifest version,
with what they found sorted into **problems** (partition schemas that disagree, pinned versions
that cannot be read, orphan tables older than the grace, rows in the wrong partition) and
**leftovers** of interrupted writes (uncommitted table versions, orphan tables younger than the
grace: reads never see them, the next write or ``vacuum`` removes them)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from ..manifest.state import HasState, NamespaceState, registered_partitions, state_of
from .health import (
    ORPHAN_GRACE,
    IntegrityIssue,
    Orphan,
    SchemaIssue,
    UncommittedVersion,
    VersionIssue,
    check_integrity,
    check_read_versions,
    check_schemas,
    find_orphans,
)


@dataclass(frozen=True)
class HealthReport:
    """What the health checks found in the namespace ``uri`` at ``manifest_version``.

    Problems: ``schema_issues``, ``version_issues`` (unreadable pinned versions),
    ``stale_orphans`` (orphan tables older than ``grace``) and ``integrity_issues`` (of the
    ``integrity_checked`` of ``partitions`` partition tables whose rows were read). Leftovers
    of interrupted writes: ``uncommitted`` table versions and ``young_orphans`` (orphan tables
    within ``grace``). :attr:`ok` when there is no problem, :attr:`leftovers_only` when there
    are leftovers and nothing else."""

    uri: str
    manifest_version: int
    partitions: int
    integrity_checked: int
    grace: dt.timedelta
    schema_issues: tuple[SchemaIssue, ...]
    version_issues: tuple[VersionIssue, ...]
    uncommitted: tuple[UncommittedVersion, ...]
    stale_orphans: tuple[Orphan, ...]
    young_orphans: tuple[Orphan, ...]
    integrity_issues: tuple[IntegrityIssue, ...]

    @property
    def problems(self) -> int:
        """How many problems were found (each issue and each stale orphan counts once)."""
        return (
            len(self.schema_issues)
            + len(self.version_issues)
            + len(self.stale_orphans)
            + len(self.integrity_issues)
        )

    @property
    def leftovers(self) -> int:
        """How many leftovers of interrupted writes were found."""
        return len(self.uncommitted) + len(self.young_orphans)

    @property
    def ok(self) -> bool:
        """No problem found (leftovers of interrupted writes may remain)."""
        return self.problems == 0

    @property
    def leftovers_only(self) -> bool:
        """No problem found, but leftovers of interrupted writes."""
        return self.ok and self.leftovers > 0

    @property
    def orphans(self) -> tuple[Orphan, ...]:
        """Every orphan table, stale ones first."""
        return self.stale_orphans + self.young_orphans

    def to_dict(self) -> dict[str, Any]:
        """The report as plain values (JSON-ready apart from the issues' partition values)."""
        from dataclasses import asdict

        return {
            "uri": self.uri,
            "manifest_version": self.manifest_version,
            "ok": self.ok,
            "problems": self.problems,
            "leftovers": self.leftovers,
            "partitions": self.partitions,
            "integrity_checked": self.integrity_checked,
            "grace_hours": self.grace.total_seconds() / 3600,
            "schema_issues": [asdict(i) for i in self.schema_issues],
            "version_issues": [asdict(i) for i in self.version_issues],
            "uncommitted": [asdict(u) for u in self.uncommitted],
            "stale_orphans": [asdict(o) for o in self.stale_orphans],
            "young_orphans": [asdict(o) for o in self.young_orphans],
            "integrity_issues": [asdict(i) for i in self.integrity_issues],
        }


def health_report(
    ns: NamespaceState | HasState,
    *,
    history: int | None = 50,
    sample: int | None = None,
    grace: dt.timedelta = ORPHAN_GRACE,
    seed: int = 0,
) -> HealthReport:
    """Every health check of the namespace at the manifest version it reads: partition schemas,
    pinned and uncommitted versions (``history``: see :func:`.health.check_read_versions`),
    orphan tables (on every manifest version on storage; older than ``grace`` a problem,
    younger a leftover) and the rows of every partition table (``sample``: of that many,
    chosen by ``seed``)."""
    state = state_of(ns)
    schema = check_schemas(state)
    broken, uncommitted = check_read_versions(state, history)
    orphans = find_orphans(state)
    integrity = check_integrity(state, sample, seed)
    partitions = len(registered_partitions(state.snapshot))
    return HealthReport(
        uri=state.uri,
        manifest_version=state.version,
        partitions=partitions,
        integrity_checked=partitions if sample is None else min(max(sample, 0), partitions),
        grace=grace,
        schema_issues=tuple(schema),
        version_issues=tuple(broken),
        uncommitted=tuple(uncommitted),
        stale_orphans=tuple(o for o in orphans if o.stale(grace)),
        young_orphans=tuple(o for o in orphans if not o.stale(grace)),
        integrity_issues=tuple(integrity),
    )
