"""Clock hygiene shared by the benchmarks (experiments/README.md, "How we measure").

Two things every timed comparison needs: the one-time costs of a process (imports such as
``tvm.s_tir.tensor_intrin``, xgboost and scipy.optimize, the builder's worker pool, the runner's first
session) paid before any clock starts, so neither method pays them; and a record of which run and
process a time came from, so a time ratio never mixes runs of different sessions.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer

#: this process: every timed stage records it, so a reader can tell which stages shared a session
SESSION = {"pid": os.getpid(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
           "started_unix": time.time()}


def _tiny_operators() -> list:
    """Two small BMMs, one a reuse source for the other: cheap to build, tune and plan."""
    from eto import Operator

    return [Operator.create("BMM", B=1, M=16, N=16, K=16), Operator.create("BMM", B=2, M=16, N=16, K=16)]


def warm_measurer(measurer: "Measurer", target: "Target") -> None:
    """Build and run one tiny program, so a timed run's first batch does not start the worker pools."""
    from tvm.ir import IRModule

    measurer.measure([IRModule({"main": _tiny_operators()[0].prim_func()})], target)


def warm_up(target: "Target", *, plan: bool = True) -> float:
    """Pay the process's one-time costs now; return the seconds it took (on neither method's clock).

    Imports everything either method loads lazily, runs a 2-trial MetaSchedule search of a tiny
    operator (TuneContext, XGBoost cost model, builder, runner) and, with ``plan``, plans a tiny set
    with the trial estimator (selector, networkx, the ILP solver).
    """
    t0 = time.perf_counter()
    from tuner.analysis.intrinsics import register_tensor_intrinsics

    register_tensor_intrinsics(target)

    import eto.runs.pipeline  # noqa: F401
    import eto.planning.planner  # noqa: F401
    import tuner.measure.apply  # noqa: F401
    import tuner.reuse.estimate  # noqa: F401
    import tuner.analysis.features  # noqa: F401
    import tuner.reuse.search  # noqa: F401
    from tuner.measure.backend import BackendTask, tune_backend
    from tuner.measure.options import BackendOptions
    from tuner.measure.measurer import MeasureConfig, Measurer

    for optional in ("xgboost", "scipy.optimize"):
        try:
            __import__(optional)
        except ImportError:  # pragma: no cover - the code paths that need them import them too
            pass
    ops = _tiny_operators()
    with Measurer.local(MeasureConfig()) as measurer:
        tune_backend([BackendTask("warmup", ops[0].prim_func())], target, BackendOptions(trials=2, num_trials_per_iter=2, seed=0), measurer=measurer)
    if plan:
        from eto.operators.opsets import OperatorSet
        from eto.planning.planner import plan_operator_set
        from eto.options import TuneOptions

        plan_operator_set(OperatorSet.from_layers("warmup", ops), TuneOptions.of(trials=64, cost="estimate", top_k=None), target=target)
    return time.perf_counter() - t0


# -- run folders -----------------------------------------------------------------------------------
def new_run_id() -> str:
    """A run id that sorts by start time: ``run-YYYYmmdd-HHMMSS``."""
    return "run-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def open_run(base: str, resume: str | None, settings: dict) -> tuple[str, dict]:
    """The run folder under ``base`` and its record (``run.json``), this session appended to it.

    ``resume`` None: a new run in a new folder, so nothing cached by an earlier run is reused.
    ``resume`` "latest" or a run id: that run, which must have been started with the same
    ``settings`` (its cached stages are only valid for them).
    """
    settings = json.loads(json.dumps(settings))  # tuples become lists, as in the file
    if resume is None:
        run_id = new_run_id()
        while os.path.exists(os.path.join(base, run_id)):  # two runs in one second
            time.sleep(1.0)
            run_id = new_run_id()
        folder = os.path.join(base, run_id)
        os.makedirs(folder)
        info = {"run_id": run_id, "started": datetime.datetime.now().isoformat(timespec="seconds"),
                "started_unix": time.time(), "settings": settings, "sessions": []}
    else:
        runs = sorted(d for d in (os.listdir(base) if os.path.isdir(base) else []) if d.startswith("run-"))
        run_id = runs[-1] if resume == "latest" and runs else resume
        folder = os.path.join(base, run_id)
        if not os.path.exists(os.path.join(folder, "run.json")):
            raise SystemExit(f"no run to resume: {folder}/run.json does not exist (runs under {base}: {runs})")
        with open(os.path.join(folder, "run.json")) as f:
            info = json.load(f)
        if info["settings"] != settings:
            raise SystemExit(f"run {run_id} was started with other settings: {info['settings']} != {settings}")
    info["sessions"].append(SESSION)
    with open(os.path.join(folder, "run.json"), "w") as f:
        json.dump(info, f, indent=1)
    return folder, info


def add_search_option(ap) -> None:
    """``--search``: the backend's search, MetaSchedule's runs and eto's roots alike."""
    ap.add_argument("--search", choices=["evolutionary", "light"], default=None,
                    help="MetaSchedule's search in every backend run, both methods' (default: light at scale ci, "
                         "where it takes half the time of the evolutionary one; evolutionary otherwise)")


def search_name(args) -> str:
    """``args.search``, set to the scale's default where not given.

    At scale ci a benchmark checks its own plumbing, not MetaSchedule's search: the light search (a
    population of 64, :func:`tuner.measure.backend.light_search`) halves each backend run there (8 trials of a
    3x3 convolution: 14 s against 31 s)."""
    if args.search is None:
        args.search = "light" if getattr(args, "scale", None) == "ci" else "evolutionary"
    return args.search


def backend_search(args) -> "str | object":
    """The strategy of :func:`search_name` (``tuner.measure.backend.search_strategy``)."""
    from tuner.measure.backend import search_strategy

    return search_strategy(search_name(args))


def search_settings(args) -> dict:
    """What a work folder records of the search: nothing for the default, so older folders stay valid."""
    return {} if args.search == "evolutionary" else {"search": args.search}


def bind_settings(work: str, settings: dict) -> None:
    """Tie ``work`` to ``settings``: finished stages found there are reused only by the same command."""
    settings = json.loads(json.dumps(settings))
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "settings.json")
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old != settings:
            raise SystemExit(f"{work} holds runs made with other settings ({old} != {settings}); "
                             "give another --work")
        return
    with open(path, "w") as f:
        json.dump(settings, f, indent=1)
