"""Partition specs and what they compute: the fields and their JSON forms
(:mod:`.partition_spec`), transforms, calendar time windows and range/list expressions as
partition expressions, the hash functions, DataFusion evaluation of a spec over record batches
(:mod:`.partitioner`), ``partition_by`` text, and how people name a field (:mod:`.describe`).

Nothing is re-exported here: import from the modules (a package's re-exports would make every
importer of one module depend on all of them)."""
