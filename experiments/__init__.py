"""The paper's experiments (E1-E9), one script each, run from the repository root as modules:
``python -m experiments.set_bench --help``. Tools beside them are in :mod:`experiments.tools`;
``_bench``, ``_env`` and ``_experiment`` are what both share. README.md here says which script is
which experiment."""
