"""The read path: projecting a filter onto each spec's partition columns and querying
``__manifest`` (:mod:`.pruning`), leaving out tables whose statistics prove no row matches
(:mod:`.stats_pruning`), scan plans (:mod:`.planning`), reading them (:mod:`.scan`,
:mod:`.data_files`), and filters naming partition field ids rewritten over the source columns
(:mod:`.field_filters`). The filter language itself is :mod:`..expr`.

Nothing is re-exported here: import from the modules."""
