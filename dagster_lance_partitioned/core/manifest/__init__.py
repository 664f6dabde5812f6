"""The ``__manifest`` table and its commits: loading a version and committing to it
(:mod:`.store`), the edits a commit applies (:mod:`.edit`), what each commit records
(:mod:`.commit_summary`), table-metadata changes as steps (:mod:`.changes`), registering partition
table versions (:mod:`.registration`; new versions of registered tables, as compaction and index
builds make them, :mod:`.revisions`), the names of partition namespaces (:mod:`.naming`), the
retirement protocol ordering deletion (:mod:`.retire`), the state operations work on
(:mod:`.state`), statistics recorded per table version (:mod:`.stats`), and upgrading a
namespace of the draft shape (:mod:`.upgrade`).

Nothing is re-exported here: import from the modules."""
