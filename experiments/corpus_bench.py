"""E12: corpus models tuned by eto with the default layout, against ONNX Runtime and PyTorch eager,
each runtime timed in a process of its own.

    python -m experiments.corpus_bench --models squeezenet1_0,googlenet --budget 300 [--rounds 5]
                                      [--work DIR] [--out FILE]

For each model (:mod:`eto.models.corpus`, scale ``small``: the usual input size, random weights): the
module is exported to ONNX (:func:`eto.models.corpus.onnx_bytes`: TorchScript exporter, opset 17, else
the ``torch.export`` one), ``eto tune --model M.onnx --time-budget
B`` tunes it from an empty database with no ``--layout`` flag (the default, ``auto``), ``eto build``
compiles it, and then, in ``--rounds`` rounds, eto's library, ONNX Runtime on the same ONNX file and
PyTorch eager each run in a fresh process of their own (``--time`` below), the order rotating every
round, with the same thread count (``TVM_NUM_THREADS``, default 2) and the same input. Each process
warms up, then times ``--repeat`` runs and at least :data:`MIN_TIMED_S` of them, and reports their
median; the table gives the median of the rounds' medians and the per-round range, eto's speed over
each runtime's (above 1: eto faster), and the geomean over the models. Processes of their own,
because runtimes sharing one process share and fight over thread pools (TVM's, PyTorch's OpenMP,
ONNX Runtime's): ONNX Runtime's round medians spread 2-4x that way. Results: ``experiments/results/corpus_bench_<budget>_<cpu>.json``; each model's
row also goes to ``<work>/corpus_bench_<budget>_<cpu>.jsonl`` as it finishes, so an interrupted run
goes on with the models it has not done.
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

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIMES = ("eto", "onnxruntime", "pytorch")


def _inputs(name: str):
    from eto.models.corpus import make_model

    return make_model(name, "small")


#: Each process times at least this many seconds of runs, whatever ``--repeat``: a 2 ms model's 20 runs
#: (40 ms) let one slow stretch of the machine set a round's median. MobileNet v3's builds, 7 rounds
#: each (Zen 5, 2 threads): the alone build's round medians 1.77-3.12 ms with 20 runs, 1.72-1.84 ms
#: with 50; a ratio of two builds 0.82-1.36 per round, then 0.88-1.00.
MIN_TIMED_S = 1.0


def time_runtime(runtime: str, name: str, artifact: str, threads: int, repeat: int) -> list[float]:
    """Seconds of at least ``repeat`` runs of ``name`` in ``runtime`` and at least :data:`MIN_TIMED_S` of
    them (after 3 warm-up runs), in this process."""
    import numpy as np

    module, inputs = _inputs(name)
    arrays = [np.ascontiguousarray(i.numpy()) for i in inputs]
    if runtime == "eto":
        import eto

        model = eto.load(artifact)
        run = lambda: model(*arrays)  # noqa: E731
    elif runtime == "onnxruntime":
        from eto.models.bench import onnxruntime_session

        session = onnxruntime_session(artifact, threads)
        feed = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
        run = lambda: session.run(None, feed)  # noqa: E731
    else:
        import torch

        torch.set_num_threads(threads)

        def run():
            with torch.no_grad():
                return module(*inputs)
    for _ in range(3):
        run()
    times: list[float] = []
    while len(times) < repeat or sum(times) < MIN_TIMED_S:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def export_onnx(name: str, path: str) -> None:
    from eto.models.corpus import onnx_bytes

    with open(path, "wb") as f:
        f.write(onnx_bytes(*_inputs(name)))


def run_eto(*argv: str, log) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "eto", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    log.write(proc.stderr[-20000:])
    log.flush()
    if proc.returncode not in (0, 1):  # 1: some operator failed, named in the log; the build goes on
        raise RuntimeError(f"eto {argv[0]} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def bench_model(name: str, budget: float, rounds: int, repeat: int, threads: int, work: str) -> dict:
    os.makedirs(work, exist_ok=True)
    onnx_path, db, lib = (os.path.join(work, f"{name}{ext}") for ext in (".onnx", "-db", ".so"))
    row: dict = {"model": name, "budget_s": budget, "threads": threads, "rounds": rounds, "repeat": repeat}
    with open(os.path.join(work, f"{name}.log"), "a") as log:
        if not os.path.exists(onnx_path):
            export_onnx(name, onnx_path)
        row["tune_s"] = round(run_eto("tune", "--model", onnx_path, "--db", db, "--time-budget", str(budget), "-q",
                                   log=log), 1)
        row["build_s"] = round(run_eto("build", "--model", onnx_path, "--db", db, "-o", lib, "--json", log=log), 1)
    with open(os.path.join(db, "eto_models.json")) as f:
        row["layout"] = json.loads(f.readlines()[-1])
    row.update(time_model(name, {"eto": lib, "onnxruntime": onnx_path, "pytorch": ""}, rounds, repeat, threads))
    return row


def round_medians(name: str, runs: dict[str, tuple[str, str]], rounds: int, repeat: int,
                  threads: int) -> dict[str, list[float]]:
    """Per label of ``runs`` (label -> runtime, artifact), each round's median seconds: every run in a process
    of its own (:func:`time_runtime`), the order rotating every round, the same thread count for all."""
    medians: dict[str, list[float]] = {label: [] for label in runs}
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    labels = list(runs)
    for k in range(rounds):
        for label in labels[k % len(labels):] + labels[:k % len(labels)]:
            runtime, artifact = runs[label]
            proc = subprocess.run([sys.executable, "-m", "experiments.corpus_bench", "--time", runtime, name,
                                   artifact, "--threads", str(threads), "--repeat", str(repeat)],
                                  stdout=subprocess.PIPE, text=True, env=env, cwd=os.path.dirname(HERE), check=True)
            medians[label].append(statistics.median(json.loads(proc.stdout.strip().splitlines()[-1])))
    return medians


def add_timing_options(p: argparse.ArgumentParser, work: str) -> None:
    """The timing and folder options E12 and E13 share."""
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=20, help="timed runs per process, at least (and 1 s of them: MIN_TIMED_S)")
    p.add_argument("--threads", type=int, default=int(os.environ.get("TVM_NUM_THREADS") or 2))
    p.add_argument("--work", default=os.path.join(HERE, "work", work))
    p.add_argument("--out")


def time_model(name: str, artifacts: dict[str, str], rounds: int, repeat: int, threads: int) -> dict:
    """Each runtime in a process of its own, the order rotating every round: medians of the rounds' medians,
    each round's, and eto's speed over each other runtime's (median and per-round range)."""
    medians = round_medians(name, {r: (r, artifacts[r]) for r in RUNTIMES}, rounds, repeat, threads)
    row: dict = {"rounds": rounds, "repeat": repeat, "min_timed_s": MIN_TIMED_S}
    for runtime, values in medians.items():
        row[runtime] = {"median_ms": statistics.median(values) * 1e3, "rounds_ms": [v * 1e3 for v in values]}
    for other in RUNTIMES[1:]:
        ratios = [o / e for o, e in zip(medians[other], medians["eto"])]
        row[f"vs_{other}"] = statistics.median(medians[other]) / statistics.median(medians["eto"])
        row[f"vs_{other}_rounds"] = [min(ratios), max(ratios)]
    return row


def retime(row: dict, work: str, rounds: int, repeat: int, threads: int) -> dict:
    """``row`` with its builds timed again (the tuning and the build kept): a timing disturbed by other work
    on the machine is repeated, not the tuning; the earlier timing stays in the row, under ``timed_before``."""
    name = row["model"]
    folder = os.path.join(work, name)
    artifacts = {"eto": os.path.join(folder, f"{name}.so"), "onnxruntime": os.path.join(folder, f"{name}.onnx"),
                 "pytorch": ""}
    kept = (*RUNTIMES, *(f"vs_{o}" for o in RUNTIMES[1:]), *(f"vs_{o}_rounds" for o in RUNTIMES[1:]))
    before = {k: row[k] for k in kept}
    return {**row, **time_model(name, artifacts, rounds, repeat, threads),
            "timed_before": [*row.get("timed_before", []), before]}


def table(rows: list[dict]) -> str:
    lines = ["| model | layout (Winograd convs) | tuning s | eto ms | ONNX Runtime ms | PyTorch ms | vs ONNX Runtime "
             "(per round) | vs PyTorch |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lay = r["layout"]
        lines.append(f"| {r['model']} | {lay['resolved']} ({len(lay['winograd'])}) | {r['tune_s']:.0f} | "
                     f"{r['eto']['median_ms']:.2f} | {r['onnxruntime']['median_ms']:.2f} | {r['pytorch']['median_ms']:.2f} | "
                     f"{r['vs_onnxruntime']:.2f}x ({r['vs_onnxruntime_rounds'][0]:.2f}-{r['vs_onnxruntime_rounds'][1]:.2f}) | "
                     f"{r['vs_pytorch']:.2f}x |")
    if rows:
        geo = math.exp(statistics.mean(math.log(r["vs_onnxruntime"]) for r in rows))
        worst = sorted(rows, key=lambda r: r["vs_onnxruntime"])[:3]
        named = ", ".join(f"{r['model']} {r['vs_onnxruntime']:.2f}x" for r in worst)
        lines.append(f"\ngeomean vs ONNX Runtime over {len(rows)} models: {geo:.2f}x; worst: {named}")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """eto's speed over ONNX Runtime's and PyTorch's per model (bars: medians; whiskers: the per-round range)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 3.6))
    width = 0.38
    for k, (other, label) in enumerate((("onnxruntime", "vs ONNX Runtime"), ("pytorch", "vs PyTorch eager"))):
        xs = [i + (k - 0.5) * width for i in range(len(rows))]
        mids = [r[f"vs_{other}"] for r in rows]
        lows = [m - r[f"vs_{other}_rounds"][0] for m, r in zip(mids, rows)]
        highs = [r[f"vs_{other}_rounds"][1] - m for m, r in zip(mids, rows)]
        ax.bar(xs, mids, width, yerr=[lows, highs], capsize=3, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    geo = math.exp(statistics.mean(math.log(r["vs_onnxruntime"]) for r in rows)) if rows else float("nan")
    ax.set_xticks(range(len(rows)), [r["model"] for r in rows], rotation=20, fontsize=8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel("eto's speed over the runtime's (x)")
    ax.set_title(f"E12: eto tune --model, default layout, {rows[0]['budget_s']:g} s each; geomean vs ONNX Runtime "
                 f"{geo:.2f}x" if rows else "E12", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.corpus_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help="comma-separated corpus model names")
    p.add_argument("--budget", type=float, default=600, help="eto tune's --time-budget per model, seconds")
    add_timing_options(p, "corpus_bench")
    p.add_argument("--retime", action="store_true",
                   help="time the finished models of --models again (their tuning and builds kept), as after a "
                        "timing other work on the machine disturbed; the earlier timing stays in the row")
    p.add_argument("--time", nargs=3, metavar=("RUNTIME", "MODEL", "ARTIFACT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.time:
        print(json.dumps(time_runtime(*args.time, args.threads, args.repeat)))
        return 0
    from eto.target import cpu_info

    from experiments._env import environment

    tag = f"corpus_bench_{args.budget:.0f}_{cpu_info().mcpu}"
    out = args.out or os.path.join(HERE, "results", f"{tag}.json")
    log = os.path.join(args.work, f"{tag}.jsonl")  # one model per line as it finishes: a rerun goes on from it
    os.makedirs(args.work, exist_ok=True)
    rows = []
    if os.path.exists(log):
        with open(log) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    names = [n for n in (args.models or "").split(",") if n]
    if args.retime:
        rows = [retime(r, args.work, args.rounds, args.repeat, args.threads) if r["model"] in names else r
                for r in rows]
        with open(log, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    for name in names:
        if name not in {r["model"] for r in rows}:
            row = bench_model(name, args.budget, args.rounds, args.repeat, args.threads, os.path.join(args.work, name))
            rows.append(row)
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{name}: eto {row['eto']['median_ms']:.2f} ms, ONNX Runtime {row['onnxruntime']['median_ms']:.2f} ms "
                  f"({row['vs_onnxruntime']:.2f}x), tuned in {row['tune_s']:.0f} s", flush=True)
    geo = math.exp(statistics.mean(math.log(r["vs_onnxruntime"]) for r in rows)) if rows else None
    with open(out, "w") as f:
        json.dump({"experiment": "corpus_bench", "environment": environment(), "scale": "small",
                   "budget_s": args.budget, "rounds": args.rounds, "repeat": args.repeat,
                   "summary": {"models": len(rows), "geomean_vs_onnxruntime": geo,
                               "geomean_vs_pytorch": math.exp(statistics.mean(math.log(r["vs_pytorch"]) for r in rows))
                               if rows else None},
                   "rows": rows}, f, indent=1)
    if rows:
        plot(rows, os.path.splitext(out)[0] + ".png")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
