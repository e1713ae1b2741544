"""The plan's trial estimates kept on disk (tuner/reuse/estimate_cache.py): the same numbers as estimated,
only the pairs not seen before estimated, a change of options a different entry, a broken file rebuilt
with a warning, and ``ETO_CACHE_DIR=off`` writing nothing. Scale ci: hand-made loop nests, no TVM."""

from __future__ import annotations

import pytest

import tuner.reuse.estimate as est
from tuner.analysis.features import Access, LoopNest
from tuner.reuse.options import ReuseOptions

OPTIONS = ReuseOptions(strategy="global", top_k=None)
LIMITS = {"cores": 2, "cache_bytes": 1 << 20, "native_lanes": 16, "registers": 32}


def matmul(m: int, n: int, k: int) -> LoopNest:
    """The loop nest of ``C[m, n] = sum_k A[m, k] B[k, n]``."""
    return LoopNest((m, n), (k,), (Access("A", (m, k), ((1, 0, 0), (0, 0, 1))),
                                   Access("B", (k, n), ((0, 0, 1), (0, 1, 0)))))


@pytest.fixture
def pairs():
    nests = [matmul(64, 64, 64), matmul(128, 64, 256), matmul(32, 512, 128)]
    return [(a, b) for a in nests for b in nests if a is not b]


@pytest.fixture
def counted(monkeypatch):
    """Pairs the estimator enumerates (not read from the cache), call by call."""
    calls: list[int] = []
    inner = est._estimate_many

    def spy(kind, todo, workers, **kw):
        calls.append(len(todo))
        return inner(kind, todo, workers, **kw)

    monkeypatch.setattr(est, "_estimate_many", spy)
    return calls


def test_cached_estimates_are_the_estimates_and_only_new_pairs_are_enumerated(pairs, counted, tmp_path, monkeypatch):
    monkeypatch.setenv("ETO_CACHE_DIR", str(tmp_path))
    fresh = [est.estimate_trials("cpu", a, b, OPTIONS, samples=4, limits=LIMITS) for a, b in pairs]
    assert est.estimate_many("cpu", pairs[:4], workers=1, options=OPTIONS, samples=4, limits=LIMITS) == fresh[:4]
    assert est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS) == fresh
    assert est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS) == fresh
    assert counted == [4, len(pairs) - 4]  # the third call read everything back
    # another sample count or other limits are other numbers: estimated, not read
    est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=2, limits=LIMITS)
    est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits={**LIMITS, "cores": 8})
    assert counted[2:] == [len(pairs), len(pairs)]


def test_an_unreadable_cache_file_is_rebuilt_with_a_warning(pairs, counted, tmp_path, monkeypatch):
    monkeypatch.setenv("ETO_CACHE_DIR", str(tmp_path))
    first = est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS)
    (path,) = tmp_path.glob("estimates-*.json")
    path.write_text('{"truncated": [1, 2')
    with pytest.warns(UserWarning, match=f"estimate cache {path} cannot be read"):
        assert est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS) == first
    assert counted == [len(pairs), len(pairs)]
    assert est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS) == first
    assert len(counted) == 2  # rebuilt, then read


def test_off_writes_nothing_and_an_unwritable_directory_only_warns(pairs, counted, tmp_path, monkeypatch):
    monkeypatch.setenv("ETO_CACHE_DIR", "off")
    first = est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS)
    est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS)
    assert counted == [len(pairs)] * 2
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ETO_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be created
    with pytest.warns(UserWarning, match="cannot be written"):
        assert est.estimate_many("cpu", pairs, workers=1, options=OPTIONS, samples=4, limits=LIMITS) == first
