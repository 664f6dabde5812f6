"""The read path: row filters (:mod:`.filters`), the predicate tree pruning works on
(:mod:`.predicates`), projecting a filter onto each spec's partition columns and querying
``__manifest`` (:mod:`.pruning`), scan plans (:mod:`.planning`), reading them (:mod:`.scan`), and
filters naming partition field ids rewritten over the source columns (:mod:`.field_filters`).

Nothing is re-exported here: import from the modules."""
