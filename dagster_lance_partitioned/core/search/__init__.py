"""Search across partitions: indexes declared for the whole namespace (:mod:`.declaration`),
built on every partition table before the manifest commit that registers it (:mod:`.build`),
listed and maintained (:mod:`.catalog`), and searched (:mod:`.query`: vectors in
:mod:`.nearest` against the reference :mod:`.exact`, tables without a vector index together
in :mod:`.pooled`, full text in :mod:`.text` with
:mod:`.bm25`), with what searches keep owned by a :class:`.session.SearchSession`.

Import the modules themselves; this package imports nothing so that the write path can use
:mod:`.build` without a cycle."""
