"""Tools for the experiments, not experiments themselves: re-measure databases side by side
(``compare_dbs``, ``model_dbs``), A/B two revisions or a reuse-search feature (``code_ab``,
``reuse_ab``), read where time and quality go (``candidate_costs``, ``timing_split``,
``reuse_quality``, ``harness_bench``), and run the set benchmark on a lent GPU machine
(``device_bundle.sh``, ``device_set_bench.sh``). Run as ``python -m experiments.tools.NAME``."""
