"""The write path: :class:`PartitionWriter` routes a write's rows to partitions
(:mod:`.ingest`), commits a new version of each partition table (:mod:`.table`), then registers
them in one ``__manifest`` commit whose rules against concurrent commits are its mode's
(:mod:`.append`, :mod:`.overwrite`, on :mod:`.commit`).

Nothing is re-exported here: import from the modules (engines: from
:mod:`dagster_lance_partitioned.core.engine`)."""
