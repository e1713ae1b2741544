"""The database of optimized programs: MetaSchedule's JSON files plus eto's metadata.

* :mod:`~eto.store.database` -- :class:`~eto.store.database.Database` (readable by MetaSchedule's ``JSONDatabase``);
* :mod:`~eto.store.programs` -- a stored program, the queries every database answers, several databases read as one;
* :mod:`~eto.store.jsonlines` -- append-only, crash-safe JSON-lines files underneath;
* :mod:`~eto.store.checkpoints` -- an interrupted run's measured batches, read back by a rerun;
* :mod:`~eto.store.errors` -- a database that cannot be used, a record TVM cannot read;
* :mod:`~eto.store.claims` -- which process tunes an operator, so two runs never tune it twice.
"""
