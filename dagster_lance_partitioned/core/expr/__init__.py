"""Filters: the filter language every API takes (SQL text or DNF tuples, checked and
rendered by :mod:`.filters`) and the predicate tree planning reasons about (:mod:`.predicates`)."""
