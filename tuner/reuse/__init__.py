"""The reuse-based tuner (paper section 5): α's program derived from β's best one.

* :mod:`~tuner.reuse.search` -- Algorithm 1, the hierarchical B/T/M search (:func:`~tuner.reuse.search.reuse_tune`);
* :mod:`~tuner.reuse.rounds` -- which best candidate each round after T starts from (per B, or overall);
* :mod:`~tuner.reuse.space` -- its space: B/T/M windows and GetBShape / GetTShape / GetLShape;
* :mod:`~tuner.reuse.session` -- one search's bookkeeping and its :class:`~tuner.reuse.session.ReuseResult`;
* :mod:`~tuner.reuse.leads`, :mod:`~tuner.reuse.registers`, :mod:`~tuner.reuse.cachesets`,
  :mod:`~tuner.reuse.panel` -- what round T measures first (beyond the paper, CPU);
* :mod:`~tuner.reuse.cost_model`, :mod:`~tuner.reuse.ranked` -- ranking candidates before measuring them;
* :mod:`~tuner.reuse.estimate` -- the trial-count estimator the selector's edges cost (section 6.1);
* :mod:`~tuner.reuse.predict` -- the instant program: β's tiles on α's loops, nothing measured;
* :mod:`~tuner.reuse.topk` -- TopK, the paper's baseline derivation.
"""
