"""Search across partitions: indexes declared for the whole namespace (:mod:`.declaration`),
built on every partition table before the manifest commit that registers it (:mod:`.build`),
listed and maintained (:mod:`.catalog`), and searched partition by partition, the results
merged into one global top k (:mod:`.query`, :mod:`.text`, both on :mod:`.searched`).

Import the modules themselves; this package imports nothing so that the write path can use
:mod:`.build` without a cycle."""
