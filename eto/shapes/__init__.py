"""New shapes: programs for sizes the database has not seen (their instant programs: :mod:`eto.runs.instant`).

* :mod:`~eto.shapes.retune` -- ``eto retune``: a set at new sizes, tuned from the database;
* :mod:`~eto.shapes.dispatch` -- one compiled function for a symbolic size, bucketed;
* :mod:`~eto.shapes.serve` -- a program cache for serving changing shapes.
"""
