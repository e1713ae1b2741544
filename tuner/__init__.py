"""Everything that touches TVM schedules. Never imports ``eto`` or ``selector``.

Three rooms, each importing only the ones before it:

* :mod:`tuner.analysis` -- program analysis: sketches (paper section 2), B/T/M features (section 3),
  tilings, sub-sketches (section 5.2), symbolic sizes, the host's cores and caches;
* :mod:`tuner.measure` -- building and running candidates for real (:class:`~tuner.measure.measurer.Measurer`),
  screening and settling finalists, the MetaSchedule backend (:func:`~tuner.measure.backend.tune_backend`),
  kill points for the fault tests;
* :mod:`tuner.reuse` -- the reuse-based tuner (paper section 5, Algorithm 1:
  :func:`~tuner.reuse.search.reuse_tune`), its space (BShape/TShape/LShape), leads, ranking cost
  models, the trial-count estimator (section 6.1), the instant prediction, and the TopK baseline.

Importing ``tuner`` imports no TVM; the modules import it where they use it.
"""
