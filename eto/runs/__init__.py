"""Runs: a plan carried out, resumably (plan -> roots -> derive -> gate -> store -> report).

* :mod:`~eto.runs.pipeline` -- :func:`~eto.runs.pipeline.tune`, the main job (paper Figure 3);
* :mod:`~eto.runs.tuning` -- backend runs into the database, progress and reports;
* :mod:`~eto.runs.polish` -- root polish: a root's program improved by a self-reuse;
* :mod:`~eto.runs.instant` -- the instant program: a checked program from the nearest tuned one, no search;
* :mod:`~eto.runs.improve` -- a time budget's spare time, where the built model's latency is;
* :mod:`~eto.runs.finish` -- a time budget's end: instant programs for the operators not reached;
* :mod:`~eto.runs.verify` -- the gate: every program checked against numpy before it is stored.
"""
