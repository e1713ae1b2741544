"""New shapes: programs for sizes the database has not seen.

* :mod:`~eto.shapes.retune` -- ``eto retune``: a set at new sizes, tuned from the database;
* :mod:`~eto.shapes.instant` -- the instant program: a checked program before any search;
* :mod:`~eto.shapes.dispatch` -- one compiled function for a symbolic size, bucketed;
* :mod:`~eto.shapes.serve` -- a program cache for serving changing shapes.
"""
