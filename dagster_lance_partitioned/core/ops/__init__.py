"""Maintenance and inspection of a namespace, as ``ns.maintenance`` and ``ns.inspect`` group
them (:mod:`.groups`): compaction, cleanup, vacuum and partition drops (:mod:`.maintenance`),
health checks (:mod:`.health`), commit history (:mod:`.history`), and the one-off conversions:
importing a Hive tree (:mod:`.hive`); upgrading the draft shape is a manifest change
(:mod:`..manifest.upgrade`).

Nothing is re-exported here: import from the modules."""
