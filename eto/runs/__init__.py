"""Runs: a plan carried out, resumably (plan -> roots -> derive -> gate -> store -> report).

* :mod:`~eto.runs.pipeline` -- :func:`~eto.runs.pipeline.tune`, the main job (paper Figure 3);
* :mod:`~eto.runs.tuning` -- backend runs into the database, progress and reports;
* :mod:`~eto.runs.polish` -- root polish: a root's program improved by a self-reuse;
* :mod:`~eto.runs.verify` -- the gate: every program checked against numpy before it is stored.
"""
