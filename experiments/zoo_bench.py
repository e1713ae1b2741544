"""E13: a model zoo tuned in sequence, each model with every earlier model's database as ``--prior``,
against the same model tuned alone from an empty database at the same settings.

    python -m experiments.zoo_bench --family resnet=resnet18,resnet34,resnet50 --trials 32 [--rounds 5]
                                    [--family mobile=mobilenet_v2,mobilenet_v3_large,efficientnet_b0]

Models are corpus models or torchvision classification models (:func:`eto.models.corpus.make_model`:
random weights, no download), exported to ONNX as E12 exports them (:mod:`experiments.corpus_bench`).
For each family, in order, each model is tuned twice with ``eto tune --model M.onnx --trials N`` and
the default layout: *alone*, into an empty database, and in the *zoo*, into an empty database with
every earlier model's zoo database as ``--prior`` (the first model's zoo run is its alone run). Each
row gives both wall times (the whole ``eto tune`` process, as a user waits for it), the tasks a prior
covered (the same task already tuned in a prior, or reused from a prior's program), and both built
models timed side by side, each in a process of its own, alternating over ``--rounds`` rounds (as E12
times runtimes). The family's cumulative tuning time with and without priors is plotted.

``--budget-share S`` adds a third run of each later model: with the same priors and ``--time-budget``
S x its alone time (e.g. 0.2: what a fifth of the alone run buys when every earlier model is a prior;
the run gives the operators it cannot search in time instant programs from the priors), built and
timed beside the other two. Each run records what other processes took of the machine meanwhile
(``busy``, :mod:`tuner.measure.contention`): a run beside another benchmark stores programs timed
against it, and the models after it inherit them as priors. Given for a family already measured, it adds that run to each row.

``--retime`` times the builds of a family already measured again (the tuning and the builds kept).

Results: ``experiments/results/zoo_bench_<families>_N<trials>_<cpu>.json`` and a PNG beside it. Each
finished model goes to ``<work>/zoo_bench.jsonl`` at once, so an interrupted run goes on from there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from experiments.corpus_bench import HERE, MIN_TIMED_S, add_timing_options, export_onnx, round_medians

ROUND_ORDER = ("alone", "zoo")


def tune(onnx_path: str, db: str, priors: list[str], trials: int, log, budget: float | None = None,
         extra: "tuple[str, ...]" = ()) -> tuple[float, dict]:
    """``eto tune`` of a model into ``db`` (within ``budget`` seconds; ``extra``: more flags): its wall
    seconds and its JSON report."""
    argv = ["tune", "--model", onnx_path, "--db", db, "--trials", str(trials), "--json", *extra]
    if budget is not None:
        argv += ["--time-budget", f"{budget:.0f}"]
    for prior in priors:
        argv += ["--prior", prior]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "eto", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    seconds = time.perf_counter() - start
    log.write(proc.stderr[-20000:])
    log.flush()
    if proc.returncode not in (0, 1):  # 1: an operator failed (named in the log); the others are tuned
        raise RuntimeError(f"eto tune exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return seconds, json.loads(proc.stdout)


def prior_keys(priors: list[str]) -> set[str]:
    """Keys of every operator the prior databases hold a program of."""
    from eto.store.database import Database

    return {p.op.key for path in priors for p in Database(path, readonly=True).programs()}


def prior_dbs(folder: str, earlier: list[str]) -> list[str]:
    """The databases a model's zoo run reads: the first model's alone run (its zoo run), then each later
    model's zoo run."""
    return [os.path.join(folder, f"{m}-zoo-db" if k else f"{m}-alone-db") for k, m in enumerate(earlier)]


def covered(report: dict, keys: set[str]) -> dict[str, int]:
    """The model's tasks a prior covered: already tuned there (copied into the database), or tuned by a
    reuse of a prior's program."""
    rows = report["operators"]
    same = sum(r["key"] in keys for r in rows)
    reused = sum(r["key"] not in keys and r["method"].startswith("reuse") and r["source"] in keys for r in rows)
    return {"tasks": len(rows), "same_in_prior": same, "reused_from_prior": reused}


def default_scheduled(report: dict) -> int:
    """The model's tasks the run left with no program at all: built with TVM's default schedules."""
    return sum(r["frequency"] > 0 and r["status"] in ("pending", "failed") and r.get("latency_s") is None
               for r in report["operators"])


def build(onnx_path: str, db: str, lib: str, log) -> None:
    proc = subprocess.run([sys.executable, "-m", "eto", "build", "--model", onnx_path, "--db", db, "-o", lib],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log.write(proc.stderr[-5000:])
    if proc.returncode != 0:
        raise RuntimeError(f"eto build exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")


def time_side_by_side(name: str, libs: dict[str, str], rounds: int, repeat: int, threads: int,
                      reference: str = "alone") -> dict:
    """Each library in a process of its own (:func:`experiments.corpus_bench.round_medians`), the order
    alternating every round; medians of the rounds' medians, and each other library's speed over the
    ``reference`` one's (``zoo_speed``, ``budget_speed`` over the alone build) with its per-round range.
    The reference is also timed as a build of its own, ``control``: ``control_speed`` and its range are
    what the same program's timings differ by here (on a 2-core cloud VM the per-round range of one
    build against itself has been 0.7-1.4x), the floor under which a speed ratio says nothing."""
    libs = {**libs, "control": libs[reference]}  # the noise floor: the reference build timed against itself
    medians = round_medians(name, {label: ("eto", lib) for label, lib in libs.items()}, rounds, repeat, threads)
    row = speeds(medians, reference)
    row["interleaved"] = speeds(interleaved_medians(name, libs, rounds, repeat, threads), reference)
    return row


def speeds(medians: dict[str, list[float]], reference: str) -> dict:
    """Per label its median over the rounds' medians and the rounds' (ms), and each label's speed over the
    ``reference``'s: the ratio of those medians and the range of the rounds' ratios."""
    row = {**{f"{label}_ms": statistics.median(v) * 1e3 for label, v in medians.items()},
           **{f"{label}_rounds_ms": [x * 1e3 for x in v] for label, v in medians.items()}}
    for label in (label for label in medians if label != reference):
        ratios = [a / z for a, z in zip(medians[reference], medians[label])]
        row[f"{label}_speed"] = statistics.median(medians[reference]) / statistics.median(medians[label])
        row[f"{label}_speed_rounds"] = [min(ratios), max(ratios)]
    return row


def interleaved_medians(name: str, libs: dict[str, str], rounds: int, repeat: int,
                        threads: int) -> dict[str, list[float]]:
    """Per label of ``libs``, each round's median seconds with every build loaded in one process and run
    in turn (:func:`time_interleaved`), one process a round.

    All of them are eto's builds on one TVM thread pool, so nothing fights over threads, and a slow
    stretch of the machine (on a 2-core cloud VM, whole processes ran 1.3-1.9x slower than others)
    falls on every build alike: the per-round ratios are much tighter than those of builds timed in
    processes of their own, which stay in the row as the other timing. It is not quite the regime of a
    model served alone: each build runs after the others, with their data in the caches, not its own."""
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    out: dict[str, list[float]] = {label: [] for label in libs}
    for _ in range(rounds):
        proc = subprocess.run([sys.executable, "-m", "experiments.zoo_bench", "--interleave", name, json.dumps(libs),
                               "--repeat", str(repeat)], stdout=subprocess.PIPE, text=True, env=env,
                              cwd=os.path.dirname(HERE), check=True)
        for label, times in json.loads(proc.stdout.strip().splitlines()[-1]).items():
            out[label].append(statistics.median(times))
    return out


def time_interleaved(name: str, libs: dict[str, str], repeat: int) -> dict[str, list[float]]:
    """In this process: every build of ``libs`` loaded, 3 warm-up runs each, then one run of each in
    turn until each has ``repeat`` runs and :data:`MIN_TIMED_S` of them; seconds per run, per label."""
    import numpy as np

    import eto
    from experiments.corpus_bench import _inputs

    arrays = [np.ascontiguousarray(i.numpy()) for i in _inputs(name)[1]]
    models = {label: eto.load(lib) for label, lib in libs.items()}
    for model in models.values():
        for _ in range(3):
            model(*arrays)
    times: dict[str, list[float]] = {label: [] for label in libs}
    while any(len(t) < repeat or sum(t) < MIN_TIMED_S for t in times.values()):
        for label, model in models.items():
            start = time.perf_counter()
            model(*arrays)
            times[label].append(time.perf_counter() - start)
    return times


def add_budget_run(row: dict, args: argparse.Namespace) -> dict:
    """``row``'s model tuned a third time, with its priors and ``--time-budget`` of ``args.budget_share``
    x its alone time, and its three builds timed side by side again (the earlier timing is replaced)."""
    folder = os.path.join(args.work, row["family"])
    name = row["model"]
    onnx_path = os.path.join(folder, f"{name}.onnx")
    priors = prior_dbs(folder, row["priors"])
    budget_db = os.path.join(folder, f"{name}-budget-db")
    libs = {kind: os.path.join(folder, f"{name}-{kind}.so") for kind in (*ROUND_ORDER, "budget")}
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.log"), "a") as log:
        budget = args.budget_share * row["alone_s"]
        seconds, report = tune(onnx_path, budget_db, priors, args.trials, log, budget=budget)
        build(onnx_path, budget_db, libs["budget"], log)
    row = {**row, "budget_share": args.budget_share, "budget_given_s": budget, "budget_s": seconds,
           "budget_candidates": sum(r["candidates"] for r in report["operators"] if r["status"] == "tuned"),
           "budget_instant": sum(r.get("status") == "pending" and r.get("latency_s") is not None
                                 for r in report["operators"]),
           "budget_default": default_scheduled(report), "budget_busy": report.get("busy")}
    return {**row, **time_side_by_side(name, libs, args.rounds, args.repeat, args.threads)}


def retime(row: dict, args: argparse.Namespace) -> dict:
    """``row``'s builds (alone, zoo and, where it has one, budget) timed again, as ``--rounds`` and the
    timing options now say; the tuning and the builds kept. The earlier timing stays in the row, under
    ``timed_before``: a timing disturbed by the machine is repeated, not the tuning."""
    folder = os.path.join(args.work, row["family"])
    kinds = (*ROUND_ORDER, "budget") if "budget_s" in row else ROUND_ORDER
    libs = {kind: os.path.join(folder, f"{row['model']}-{kind}.so") for kind in kinds}
    timed = time_side_by_side(row["model"], libs, args.rounds, args.repeat, args.threads)
    before = {k: row[k] for k in (*timed, "timed_with") if k in row}
    return {**row, **timed, "timed_before": [*row.get("timed_before", []), before],
            "timed_with": {"rounds": args.rounds, "repeat": args.repeat, "min_timed_s": MIN_TIMED_S}}


def bench_model(family: str, name: str, earlier: list[str], args: argparse.Namespace) -> dict:
    """One model of a family: tuned alone and in the zoo (priors: the earlier models' zoo databases)."""
    folder = os.path.join(args.work, family)
    os.makedirs(folder, exist_ok=True)
    onnx_path = os.path.join(folder, f"{name}.onnx")
    alone_db, zoo_db = (os.path.join(folder, f"{name}-{kind}-db") for kind in ("alone", "zoo"))
    priors = prior_dbs(folder, earlier)
    row: dict = {"family": family, "model": name, "priors": earlier, "trials": args.trials}
    with open(os.path.join(folder, f"{name}.log"), "a") as log:
        if not os.path.exists(onnx_path):
            export_onnx(name, onnx_path)
        row["alone_s"], alone = tune(onnx_path, alone_db, [], args.trials, log)
        row["alone_candidates"] = sum(r["candidates"] for r in alone["operators"])
        row["alone_busy"] = alone.get("busy")
        if earlier:
            row["zoo_s"], zoo = tune(onnx_path, zoo_db, priors, args.trials, log)
            row["zoo_candidates"] = sum(r["candidates"] for r in zoo["operators"] if r["status"] == "tuned")
            row["zoo_busy"] = zoo.get("busy")
            row.update(covered(zoo, prior_keys(priors)))
            libs = {kind: os.path.join(folder, f"{name}-{kind}.so") for kind in ROUND_ORDER}
            build(onnx_path, alone_db, libs["alone"], log)
            build(onnx_path, zoo_db, libs["zoo"], log)
            row.update(time_side_by_side(name, libs, args.rounds, args.repeat, args.threads))
            row["time_ratio"] = row["zoo_s"] / row["alone_s"]
        else:
            row["zoo_s"], row["zoo_candidates"] = row["alone_s"], row["alone_candidates"]
    return row


def table(rows: list[dict]) -> str:
    lines = ["| family | model | priors | tuning s alone | tuning s with priors (ratio) | tasks from a prior | "
             "alone ms | with priors ms | speed with priors (per round) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["priors"]:
            lines.append(f"| {r['family']} | {r['model']} | - | {r['alone_s']:.0f} | (first) | - | - | - | - |")
            continue
        lines.append(f"| {r['family']} | {r['model']} | {len(r['priors'])} | {r['alone_s']:.0f} | "
                     f"{r['zoo_s']:.0f} ({r['time_ratio']:.2f}) | "
                     f"{r['same_in_prior']} same + {r['reused_from_prior']} reused of {r['tasks']} | "
                     f"{r['alone_ms']:.2f} | {r['zoo_ms']:.2f} | {r['zoo_speed']:.2f}x "
                     f"({r['zoo_speed_rounds'][0]:.2f}-{r['zoo_speed_rounds'][1]:.2f}) |")
    for r in (r for r in rows if "budget_s" in r):
        lines.append(f"\n{r['family']}/{r['model']} with priors within {r['budget_given_s']:.0f} s "
                     f"({r['budget_share']:.2f} of alone): {r['budget_s']:.0f} s, {r['budget_ms']:.2f} ms, "
                     f"{r['budget_speed']:.2f}x the alone model's speed ({r['budget_speed_rounds'][0]:.2f}-"
                     f"{r['budget_speed_rounds'][1]:.2f}), {r['budget_instant']} tasks on instant programs, "
                     f"{r.get('budget_default', '?')} on TVM's default schedules")
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        alone, zoo = sum(r["alone_s"] for r in mine), sum(r["zoo_s"] for r in mine)
        lines.append(f"\n{family}: cumulative tuning {alone:.0f} s alone, {zoo:.0f} s with priors ({zoo / alone:.2f})")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, axes = plt.subplots(1, len(families), figsize=(5 * len(families), 3.6), squeeze=False)
    for ax, family in zip(axes[0], families):
        mine = [r for r in rows if r["family"] == family]
        steps = range(1, len(mine) + 1)
        for key, label in (("alone_s", "each model alone"), ("zoo_s", "with the earlier models as --prior")):
            total, ys = 0.0, []
            for r in mine:
                total += r[key]
                ys.append(total / 60)
            ax.plot(steps, ys, marker="o", label=label)
        ax.set_xticks(list(steps), [r["model"] for r in mine], rotation=20, fontsize=8)
        ax.set_ylabel("cumulative tuning time (min)")
        ax.set_title(f"{family}: {mine[0]['trials']} trials per backend root")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.zoo_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--family", action="append", required=True, metavar="NAME=M1,M2,...",
                   help="a family's models in the order they are tuned (repeatable)")
    p.add_argument("--trials", type=int, default=32, help="eto tune's --trials (backend trials per root)")
    p.add_argument("--budget-share", type=float, default=None, metavar="S",
                   help="also tune each later model with its priors within S x its alone time (e.g. 0.2)")
    p.add_argument("--retime", action="store_true",
                   help="time the builds of the families' later models again (tuning and builds kept; the earlier "
                        "timing stays in each row, under timed_before)")
    add_timing_options(p, "zoo_bench")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--interleave"]:  # one round of interleaved_medians, in a process of its own
        q = argparse.ArgumentParser()
        q.add_argument("--interleave", nargs=2, metavar=("MODEL", "LIBS_JSON"))
        q.add_argument("--repeat", type=int, required=True)
        one = q.parse_args(argv)
        print(json.dumps(time_interleaved(one.interleave[0], json.loads(one.interleave[1]), one.repeat)))
        return 0
    args = p.parse_args(argv)
    families = [(f.split("=", 1)[0], [m for m in f.split("=", 1)[1].split(",") if m]) for f in args.family
                if "=" in f]
    if len(families) != len(args.family) or not all(models for _, models in families):
        p.error("--family takes NAME=MODEL,MODEL,...")
    from eto.target import cpu_info

    from experiments._env import environment

    tag = f"zoo_bench_{'_'.join(f for f, _ in families)}_N{args.trials}_{cpu_info().mcpu}"
    out = args.out or os.path.join(HERE, "results", f"{tag}.json")
    os.makedirs(args.work, exist_ok=True)
    log = os.path.join(args.work, f"{tag}.jsonl")
    rows: list[dict] = []
    if os.path.exists(log):
        with open(log) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    for family, models in families:
        for k, name in enumerate(models):
            if any(r["family"] == family and r["model"] == name for r in rows):
                continue
            row = bench_model(family, name, models[:k], args)
            rows.append(row)
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{family}/{name}: alone {row['alone_s']:.0f} s, with priors {row['zoo_s']:.0f} s", flush=True)
    if args.budget_share is not None:
        for i, row in enumerate(rows):
            if row["priors"] and row.get("budget_share") != args.budget_share and \
                    any(row["family"] == f and row["model"] in models for f, models in families):
                rows[i] = add_budget_run(row, args)
                with open(log, "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in rows)
                print(f"{row['family']}/{row['model']}: within {rows[i]['budget_given_s']:.0f} s with priors: "
                      f"{rows[i]['budget_speed']:.2f}x the alone model's speed", flush=True)
    if args.retime:
        for i, row in enumerate(rows):
            if row["priors"] and any(row["family"] == f and row["model"] in models for f, models in families):
                rows[i] = retime(row, args)
                with open(log, "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in rows)
                print(f"{row['family']}/{row['model']}: timed again", flush=True)
    later = [r for r in rows if r["priors"]]
    busy = [r[k]["others"] + r[k]["steal"] for r in rows for k in ("alone_busy", "zoo_busy", "budget_busy")
            if r.get(k)]
    summary = {"busy_cores_max": max(busy, default=None), "busy_runs": len(busy),
               "time_ratio_max": max((r["time_ratio"] for r in later), default=None),
               "zoo_speed_min": min((r["zoo_speed"] for r in later), default=None),
               "cumulative": {f: {"alone_s": sum(r["alone_s"] for r in rows if r["family"] == f),
                                  "zoo_s": sum(r["zoo_s"] for r in rows if r["family"] == f)} for f, _ in families}}
    with open(out, "w") as f:
        json.dump({"experiment": "zoo_bench", "environment": environment(), "scale": "small",
                   "trials": args.trials, "rounds": args.rounds, "repeat": args.repeat, "min_timed_s": MIN_TIMED_S,
                   "summary": summary,
                   "rows": rows}, f, indent=1)
    plot(rows, os.path.splitext(out)[0] + ".png")
    print(table(rows))
    print(f"wrote {out}")
    return 0 if all(math.isfinite(r["zoo_s"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
