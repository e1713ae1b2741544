"""Measurement and the backend: candidates built and run for real, and MetaSchedule's own search.

* :mod:`~tuner.measure.measurer` -- :class:`~tuner.measure.measurer.Measurer`: parallel builds, sequential runs;
* :mod:`~tuner.measure.builder` -- persistent build workers and a forked build server;
* :mod:`~tuner.measure.finalists` -- screen briefly, settle the best few precisely;
* :mod:`~tuner.measure.trajectory` -- run times and best-so-far trajectories;
* :mod:`~tuner.measure.apply` -- a tuning record back into a program (replay, build, run);
* :mod:`~tuner.measure.backend` -- the backend compiler: MetaSchedule (Ansor's space) per operator;
* :mod:`~tuner.measure.timed` -- the backend's builder and runner: timed, each candidate reported as measured;
* :mod:`~tuner.measure.progress` -- the backend's per-task progress, from MetaSchedule's measure callbacks;
* :mod:`~tuner.measure.workers` -- worker processes bound to their run, and stopped at once;
* :mod:`~tuner.measure.stop` -- stop requests (SIGINT, SIGTERM) and where a run honours them;
* :mod:`~tuner.measure.deadline` -- a time budget's deadline, checked before new candidates are built;
* :mod:`~tuner.measure.faults` -- kill and hang points for the fault-injection tests.
"""
