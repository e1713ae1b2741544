"""E10's summary (experiments/time_curve.py): MetaSchedule at the same tuning time, and the time to its best."""

from __future__ import annotations

from experiments.time_curve import summarize


def result(eto: list[tuple[float, float]], ms: list[tuple[int, float, float]]) -> dict:
    return {"model": "m", "layout": "NCHW",
            "eto": [{"tuning_s": t, "latency_ms": lat} for t, lat in eto],
            "metaschedule": [{"trials_per_task": n, "tuning_s": t, "latency_ms": lat} for n, t, lat in ms],
            "lines_ms": {"onnxruntime": 2.0, "pytorch": 4.0, "untuned": 20.0}}


def test_each_eto_point_is_set_beside_metaschedules_best_within_its_time():
    sm = summarize(result([(50, 5.0), (100, 3.0), (400, 2.5)], [(8, 80, 6.0), (16, 160, 4.0), (64, 640, 2.9)]))
    assert [p["metaschedule_within_ms"] for p in sm["points"]] == [None, 6.0, 4.0]
    assert [p["eto_vs_onnxruntime"] for p in sm["points"]] == [0.4, 0.667, 0.8]
    # MetaSchedule's best (2.9 ms) took 640 s; eto was there at 400 s
    assert sm["eto_seconds_to_metaschedule_best"] == 400 and sm["metaschedule_seconds_to_its_best"] == 640
    assert sm["time_ratio_to_metaschedule_best"] == 1.6


def test_an_eto_curve_that_never_reaches_metaschedules_best_says_so():
    sm = summarize(result([(50, 5.0), (100, 4.0)], [(8, 80, 3.0)]))
    assert sm["eto_seconds_to_metaschedule_best"] is None and sm["time_ratio_to_metaschedule_best"] is None
