"""Options shared by ``eto tune``, ``eto plan`` and ``eto retune``: one copy of each flag, so that
``eto plan`` previews exactly what ``eto tune`` runs with the same arguments, and one function that
turns the flags into the run's :class:`eto.options.TuneOptions`."""

from __future__ import annotations

import argparse
import math
import re
from typing import TYPE_CHECKING, get_args

from tuner.measure.options import DEFAULT_TRIALS, DEFAULT_TRIALS_PER_ITER
from tuner.reuse.space import DEFAULT_STRATEGY, Strategy
from eto.models import extract_from_file
from eto.operators import Operator
from eto.operators.opsets import OperatorSet, load_opset
from eto.operators.task import FUNCTION_TRIALS
from eto.options import DISTANCE_WEIGHT, MAX_REDUCTION_RATIO
from eto.cli.errors import CLIError
from eto.cli.ops import add_dim_option, add_fast_math_option, add_layout_option, parse_dims
from eto.cli.progress import log

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.models.load import RelaxModel
    from eto.options import TuneOptions
    from eto.store.models import ModelLayout

#: the database ``eto tune`` writes (and ``eto plan`` reads) by default
DEFAULT_DB = "eto-db"


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default in its help, unless the help says it already or there is none to say."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every ``eto`` parser (subcommands too, made by ``add_subparsers``): defaults in its ``--help``
    (:class:`HelpFormatter`) and ``-q``/``-v`` (:func:`eto.cli.progress.console`), which a command takes
    before or after its name (``eto -q tune``, ``eto tune -q``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        said = self.add_mutually_exclusive_group()  # SUPPRESS: a subcommand keeps what the main parser got
        said.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                          help="warnings and errors only: no progress, no messages")
        said.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                          help="debug messages too, an internal error's traceback, and on eto tune --method "
                               "metaschedule MetaSchedule's own logging")


def add_strategy_option(p, *, suffix: str = "") -> None:
    """``--strategy`` and ``--top-k``: one copy for ``eto tune`` and ``eto plan``, so plans cost what tuning runs."""
    from tuner.reuse.ranked import DEFAULT_TOP_K

    p.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=list(get_args(Strategy)),
                   help="reuse tuner: rounds after T once (global) or per block count as in the paper (per-b); "
                        "plans estimate the same" + suffix)
    p.add_argument("--top-k", default="auto", metavar="K",
                   help=f"reuse tuner: measure each round's K best-ranked candidates at a time, ranked by a model "
                        f"learned from the database (default auto: {DEFAULT_TOP_K} on a CPU, on a GPU as many as the "
                        f"builder compiles at once; 0: measure every candidate, as in the paper); plans estimate "
                        f"the same" + suffix)
    p.add_argument("--max-reduction-ratio", type=float, default=MAX_REDUCTION_RATIO, metavar="R",
                   help=f"plan: no reuse edge where the operator's reduction is more than R times its source's "
                        f"(default {MAX_REDUCTION_RATIO:g}, measured: such reuses lose quality; inf lifts it)" + suffix)
    p.add_argument("--distance-weight", type=float, default=DISTANCE_WEIGHT, metavar="W",
                   help=f"plan: a reuse edge weighs 1 + W * (its loops' summed |log| extent ratios) times its "
                        f"seconds in the selection, so that of two sources of about the same cost the near one "
                        f"is taken (default {DISTANCE_WEIGHT:g}; 0: cost alone, as in the paper)" + suffix)
    p.add_argument("--no-polish", dest="polish", action="store_false",
                   help="do not polish each backend root's program by a self-reuse before its subtree derives "
                        "from it (beyond the paper; by default on where the backend budget is >= 32 trials, "
                        "which trains the reuse tuner's ranker); plans cost the same" + suffix)


def top_k_of(args: argparse.Namespace) -> "int | None | str":
    """``--top-k`` as the API takes it (None: measure everything; ``"auto"``: by target)."""
    if args.top_k == "auto":
        return "auto"
    try:
        k = int(args.top_k)
    except ValueError:
        k = -1
    if k < 0:
        raise CLIError(f"--top-k must be 'auto' or a number >= 0, got {args.top_k!r}")
    return k or None


def add_prior_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--prior DB`` (repeatable): databases read, never written; one copy for tune and plan."""
    p.add_argument("--prior", action="append", default=[], metavar="DB",
                   help=f"a prior database, read and never written (repeatable): {what}")


def operators_from_args(args: argparse.Namespace) -> OperatorSet:
    """The set to tune from ``--opset``, ``--op`` or ``--model`` (at most one; default quickstart)."""
    given = [flag for flag, v in (("--opset", args.opset), ("--op", args.op), ("--model", args.model)) if v]
    if len(given) > 1:
        raise CLIError(f"give one of --opset, --op and --model, not {' and '.join(given)}")
    if args.model:
        result = extract_from_file(args.model, dims=parse_dims(args.dim))
        for u in result.unsupported:
            log.warning(f"{args.model}: not tuned: {u.count} x {u.op} ({u.reason})")
        return result.opset
    if args.op:
        # argparse (3.11) turns ``--op=--`` into an empty list rather than the string "--"
        specs = [t if isinstance(t, str) else "--" for t in args.op]
        return OperatorSet.from_layers("operators", [Operator.parse(t) for t in specs])
    return load_opset(args.opset or "quickstart")


def add_operator_options(p: argparse.ArgumentParser) -> None:
    """``--opset``, ``--op`` and ``--model`` (read by :func:`operators_from_args`): one copy for tune and retune."""
    p.add_argument("--opset", help="built-in set name or JSON file (default: quickstart)")
    p.add_argument("--op", action="append", help="one operator, e.g. 'BMM(B=1,M=128,N=768,K=768)' (repeatable)")
    p.add_argument("--model", help="an ONNX model or torch.export .pt2 file: eto tune tunes the fused tasks Relax "
                   "compiles for it (eto build applies them), eto retune its operators")
    add_dim_option(p)
    add_fast_math_option(p)
    add_layout_option(p)


def tasks_opset(model: "RelaxModel", target: "Target", *, fast_math: bool = False, layout: str | None = None,
                label: str, db: str | None = None, record_as: str | None = None) -> "tuple[OperatorSet, ModelLayout]":
    """The fused tasks Relax compiles for ``model`` (:mod:`eto.models.tasks`), ``fast_math`` applied
    first, its convolutions in ``layout`` (None: as the database ``db`` last tuned the model, else
    ``auto``), and the layout line the database records for them, under ``record_as`` (default: the
    model's name; ``eto retune`` of a model's sizes records them under the model's); the tasks without a
    catalogue type (TASK operators, tuned after the plan) and those left alone are named on stderr, after
    ``label``."""
    from eto.models.fast_math import fast_math as approximate
    from eto.models.layout import layout_from_database
    from eto.models.tasks import SCHEDULED, model_tasks
    from eto.models.winograd import SCHEDULED_BY

    looked_up = approximate(model, fast_math)._replace(name=record_as or model.name)
    chosen = layout_from_database(looked_up, db, target, layout, building=False)._replace(name=model.name)
    tasks = model_tasks(chosen, target)
    choice = tasks.layout
    log.info(f"{label}: layout {choice.describe()}")
    for t in tasks.left_alone:
        log.warning(f"{label}: not tuned: {t.weight} x {t.name} ({t.reason})")
    if scheduled := [t for t in tasks.tasks if t.reason == SCHEDULED]:
        convs = sum(t.weight for t in scheduled if t.mod["main"].attrs[SCHEDULED_BY] == "input")  # one each
        log.info(f"{label}: {convs} convolutions by Winograd: their transforms are scheduled by eto "
                 f"({len(scheduled)} functions), their batched GEMMs tuned as BMM operators")
    functions = tasks.backend_only
    if functions:
        log.info(f"{label}: {len(functions)} tasks without a catalogue type are tuned by the backend "
                 f"(--function-trials each) or reused from the same task at another size: "
                 f"{', '.join(t.name for t in functions)}")
    return tasks.opset, choice.entry(record_as or model.name, target)


def tuning_opset(args: argparse.Namespace, target: "Target") -> "tuple[OperatorSet, ModelLayout | None]":
    """What ``eto tune`` (and ``eto plan``, previewing it) tunes: a model's fused tasks as Relax compiles
    them for ``target`` (``--model`` alone) with the layout line the database is to record, else
    :func:`operators_from_args` (no layout)."""
    if (args.fast_math or args.layout is not None) and not args.model:
        raise CLIError(f"{'--fast-math' if args.fast_math else '--layout'} applies to --model (it rewrites the "
                       "model's functions)")
    if args.model and not (args.op or args.opset):
        from eto.models import load_relax

        return tasks_opset(load_relax(args.model, dims=parse_dims(args.dim)), target, fast_math=args.fast_math,
                           layout=args.layout, label=args.model, db=args.db)
    return operators_from_args(args), None


#: flags whose value is an option field as it is (flag attribute -> TuneOptions.of name)
_OPTION_FLAGS = {"trials": "trials", "trials_per_iter": "num_trials_per_iter", "seed": "seed",
                 "plan_budget": "plan_budget", "bridges": "bridges", "solver": "solver", "cost": "cost",
                 "strategy": "strategy", "hot_share": "hot_share", "hot_factor": "hot_factor",
                 "evolve": "evolve_trials", "distance_weight": "distance_weight", "finalists": "finalists",
                 "function_trials": "function_trials", "time_budget": "time_budget", "timing": "timing"}


def add_tuning_options(p: argparse.ArgumentParser) -> None:
    """The flags a tuning run's :class:`~eto.options.TuneOptions` are made of: ``eto tune`` and ``eto plan``
    take the same ones with the same defaults, so a plan previews the run. The ablations and knobs
    beyond the paper are grouped under "advanced", after the main options."""
    p.add_argument("--method", default="eto", choices=["eto", "metaschedule", "ansor", "topk", "st"],
                   type=lambda m: "metaschedule" if m == "ansor" else m,
                   help="eto: reuse pair selection, the backend for the plan's roots, the reuse tuner for the rest; "
                        "metaschedule (alias ansor): MetaSchedule for every operator; the paper's baselines: topk "
                        "(eto's plan, each reuse by TopK: the parent's top 3 programs applied, no search), st "
                        "(Selective Tuning: clusters by tuning-space overlap, one backend root each, the rest by TopK)")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS,
                   help="MetaSchedule's measured candidates per operator the backend tunes")
    add_function_trials_option(p, "; --method metaschedule gives them --trials")
    add_time_budget_option(p)
    add_timing_option(p)
    p.add_argument("--seed", type=int, default=None, help="random seed of the searches (default: none)")
    a = advanced(p)
    a.add_argument("--plan-budget", type=int, default=None,
                   help="the backend's cost per operator when planning (default: --trials)")
    a.add_argument("--bridges", default="1hop", choices=["none", "1hop", "all"],
                   help="bridge operators in the OC graph (paper: 1hop)")
    a.add_argument("--solver", default="auto", choices=["auto", "exact", "approx"],
                   help="directed Steiner tree: exact (HiGHS), approximate, or by instance size")
    a.add_argument("--cost", default="estimate", choices=["estimate", "analytic"],
                   help="OC-graph edge costs: the tuner's trial estimator, or the selector's analytic stand-in")
    add_strategy_option(a)
    add_finalists_option(a)
    a.add_argument("--hot-share", type=float, default=None, metavar="SHARE",
                   help="frequency-aware tuning: operators with at least this share of the set's frequency x "
                        "FLOPs get backend tuning with --hot-factor x --trials, never reuse (default: off)")
    a.add_argument("--hot-factor", type=float, default=2.0, help="budget multiplier for --hot-share operators")
    a.add_argument("--evolve", type=int, default=0, metavar="N",
                   help="reuse-then-evolve: N more MetaSchedule trials per reused operator, continuing from every "
                        "candidate the reuse tuner measured")
    a.add_argument("--trials-per-iter", type=int, default=DEFAULT_TRIALS_PER_ITER, help="MetaSchedule's batch size")
    a.add_argument("--search", default="evolutionary", choices=["evolutionary", "light"],
                   help="MetaSchedule's evolutionary search with its defaults, or a small-population one")


def add_time_budget_option(p: argparse.ArgumentParser) -> None:
    """``--time-budget``: one copy for ``eto tune``, ``eto plan`` and ``eto retune``."""
    p.add_argument("--time-budget", type=parse_duration, default=None, metavar="DURATION",
                   help="the run's wall time, e.g. 90s, 20m, 1h30m (plain numbers are seconds): the backend's "
                        "trials are chosen so the plan fits most of it (--trials is ignored), the rest goes to "
                        "the operators with the most latency to gain, and the run stops on time; the same command "
                        "goes on from there (default: none, --trials decides)")


def budget_left(args: argparse.Namespace) -> float | None:
    """``--time-budget`` less what the command took before asking (None: no budget): the budget is the
    whole command's wall time, counted from ``args.started`` (:func:`eto.cli.main` sets it; as the
    process's own command, from the process's start)."""
    import time

    if args.time_budget is None:
        return None
    return args.time_budget - (time.perf_counter() - getattr(args, "started", time.perf_counter()))


def add_timing_option(p: argparse.ArgumentParser) -> None:
    """``--timing``: one copy for ``eto tune``, ``eto plan`` and ``eto retune``."""
    from typing import get_args

    from tuner.measure.timing import DEFAULT_TIMING, Timing

    p.add_argument("--timing", default=DEFAULT_TIMING, choices=list(get_args(Timing)),
                   help="how candidates are timed on a CPU: cold, each run with its weights and outputs flushed "
                        "from the caches, as a model's layers meet them; hot, MetaSchedule's way, runs in a row "
                        "with the data in the caches (GPUs: always hot)")


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``20m``, ``1h30m``, ``1.5h``; an argparse error naming the text otherwise."""
    m = _DURATION.fullmatch(text.strip().lower())
    if not text.strip() or m is None or not any(m.groups()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90s, 20m, 1h30m)")
    h, mins, secs = (float(g) if g else 0.0 for g in m.groups())
    seconds = 3600 * h + 60 * mins + secs
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: a time budget must be more than 0 s")
    return seconds


def advanced(p: argparse.ArgumentParser) -> "argparse._ArgumentGroup":
    """The group of a command's ablations and experiment knobs, shown after its main options."""
    return p.add_argument_group("advanced", "ablations, experiments and knobs beyond the paper")


def tune_options_of(args: argparse.Namespace) -> "TuneOptions":
    """The :class:`eto.options.TuneOptions` that a command's flags say (``eto tune``, ``eto retune``),
    checked there, once; a bad value names its flag."""
    from eto.options import OptionError, TuneOptions

    given = vars(args)
    method = given.get("method", "eto")
    try:
        return TuneOptions.of(  # MetaSchedule alone (--method metaschedule) reads the backend's options only
            method="eto" if method == "metaschedule" else method,
            **{field: given[flag] for flag, field in _OPTION_FLAGS.items() if flag in given},
            top_k=top_k_of(args), polish=None if args.polish else False,
            max_reduction_ratio=None if math.isinf(args.max_reduction_ratio) else args.max_reduction_ratio)
    except OptionError as exc:
        flag = {field: flag for flag, field in _OPTION_FLAGS.items()}.get(exc.name, exc.name)
        raise CLIError(f"--{flag.replace('_', '-')} {exc.message}") from None


def add_finalists_option(p: argparse.ArgumentParser) -> None:
    """``--finalists``: one copy for ``eto tune`` and ``eto retune``."""
    from tuner.measure.finalists import DEFAULT_FINALISTS

    p.add_argument("--finalists", type=int, default=DEFAULT_FINALISTS, metavar="F",
                   help=f"reuse tuner: time every candidate briefly (3 runs of >= 10 ms) and the F best again in "
                        f"full, which picks the winner (in ETO_SETTLE_PROCESSES runner processes, default 1; with "
                        f"2 or more the backend's F best are timed so too) (default {DEFAULT_FINALISTS}; 0: every "
                        f"candidate in full, about 0.2 s more each on a CPU; the plan's time model assumes the "
                        f"default)")


def add_function_trials_option(p: argparse.ArgumentParser, more: str = "") -> None:
    p.add_argument("--function-trials", type=int, default=None, metavar="N",
                   help=f"backend trials for each of a model's functions outside the catalogue (softmax, norms, "
                        f"element-wise) that cannot be reused (default {FUNCTION_TRIALS}, at most --trials){more}")
