"""Row-level changes across partitions: merge (upsert), delete and update.

Each operation changes every partition table it touches as a **detached** Lance version
built on the version the manifest registers, then moves all their ``read_version`` pins (and
registers new partitions, deregisters emptied ones) in **one** manifest commit: readers see
all of it or none of it.

The whole change is planned inside the manifest commit's plan function, on the snapshot that
commit is built on. When a concurrent commit wins, the plan runs again on the latest snapshot:
partitions whose pin did not move reuse the detached version already made (memoized by table,
base version and change), partitions that moved are redone on their new version -- so no
concurrent change is ever lost (see :mod:`.commit`).

Modules: :mod:`.change` (what a change is, what it did), :mod:`.keys` (matching by key
columns), :mod:`.plan` (routing and per-snapshot planning), :mod:`.executor` (one table's
detached version), :mod:`.commit` (one manifest commit), and the operations :mod:`.merge`,
:mod:`.delete`, :mod:`.update`. The Spark merge (``spark.merge``) plans and applies per-table
changes in Spark tasks with the same executor and commits their outcomes with
:func:`~.commit.commit_outcomes`.

Nothing is re-exported here: import from the modules (engines: from
:mod:`dagster_lance_partitioned.core.engine`)."""
