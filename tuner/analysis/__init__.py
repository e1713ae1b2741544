"""Program analysis: what a MetaSchedule program is, read without measuring it.

* :mod:`~tuner.analysis.sketch` -- sketch signatures and decisions of a trace (the paper's K and A);
* :mod:`~tuner.analysis.features` -- B, T, M of a program (section 3), on GPU and CPU;
* :mod:`~tuner.analysis.tiling` -- divisors, perfect tilings, LShapes;
* :mod:`~tuner.analysis.subsketch` -- other sketch types (section 5.2);
* :mod:`~tuner.analysis.gathers` -- a static bound on gathered vectors in unrolled CPU code;
* :mod:`~tuner.analysis.symbolic` -- programs for symbolic sizes;
* :mod:`~tuner.analysis.intrinsics` -- MetaSchedule's tensor intrinsics without the 25 s import;
* :mod:`~tuner.analysis.host` -- this machine's cores, vector width and caches (TVM-free).
"""
