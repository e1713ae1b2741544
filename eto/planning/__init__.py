"""Planning: which operators the backend tunes and which reuse whose program (paper section 6).

* :mod:`~eto.planning.planner` -- :func:`~eto.planning.planner.plan_operator_set`: an operator set, the
  database and the trial estimator in, a :class:`selector.Plan` out;
* :mod:`~eto.planning.time_model` -- seconds per backend trial and per reuse candidate, learned from the database;
* :mod:`~eto.planning.lead_sources` -- where a reuse search's lead tiles come from besides β's best program.
"""
