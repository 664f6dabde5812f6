"""The namespace schema: Arrow schemas with Lance field ids in the Lance Namespace JSON form
(:mod:`.arrow_json`), the schema ``__manifest`` records (:mod:`.namespace_schema`), reconciling
data with it on write and read (:mod:`.conform`). The operations that evolve a namespace's
schema commit, and live beside the transaction (:mod:`..evolution`).

Nothing is re-exported here: import from the modules."""
