"""The namespace schema: Arrow schemas with Lance field ids in the Lance Namespace JSON form
(:mod:`.arrow_json`), the schema ``__manifest`` records (:mod:`.namespace_schema`), reconciling
data with it on write and read (:mod:`.conform`), and schema evolution (:mod:`.evolution`).

Nothing is re-exported here: import from the modules."""
