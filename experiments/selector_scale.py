"""Selector at scale: 167 conv2d operators, 1-hop bridges and the full bridge closure.

The paper reports 1.5 hours to compute all bridge operators and reuse pairs for 167 conv2d
operators.  This builds a 167-operator conv2d set from ResNet-50 (20 shapes), MobileNetV2's K1
set (20) and a ResNeSt-50-like set (18 K1 shapes derived from resnest50: deep stem, radix 2,
avg-down; the split-attention grouped convs and 1x1-spatial fc convs are other types/sketches
and left out) at batch sizes 1, 16, 4, 64 (distinct loop nests, in that order, first 167), all
with one sketch key, and for each bridge mode reports: bridge count, reuse-pair edges, seconds
for bridges / OC graph (pairs + analytic cost) / solve, the plan's estimated cost against tuning
everything with the backend (budget 1000 per operator), and the solver's lower bound.

    python -m experiments.selector_scale [--scale ci|small|paper] [--time-limit S]

It then compares the heuristic with the MIP on the paper's ResNet-50, MobileNetV2 and BERT-Base
sets (batch 1) for each bridge mode.

``ci`` runs 1-hop only with a 3 s solve limit (MIP limit 10 s on the paper sets); ``small`` (default) and ``paper`` run none / 1-hop /
closure with the solve limit given (default 5 s for 1-hop and 30 s for the closure).
Writes experiments/results/selector_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from selector import LoopNestOp, analytic_cost_fn, bridge_operators, build_oc_graph, solve
from selector.select import select_reuse_pairs

ROOT_DIR = Path(__file__).resolve().parents[1]

BUDGET = 1000.0

# [CO, OH, OW, CI, KH, KW] (batch prepended below); stride/padding do not enter the loop nest.
RESNET50 = [
    [64, 112, 112, 3, 7, 7], [64, 56, 56, 64, 1, 1], [64, 56, 56, 64, 3, 3], [256, 56, 56, 64, 1, 1],
    [64, 56, 56, 256, 1, 1], [128, 28, 28, 256, 1, 1], [128, 28, 28, 128, 3, 3], [512, 28, 28, 128, 1, 1],
    [512, 28, 28, 256, 1, 1], [128, 28, 28, 512, 1, 1], [256, 14, 14, 512, 1, 1], [256, 14, 14, 256, 3, 3],
    [1024, 14, 14, 256, 1, 1], [1024, 14, 14, 512, 1, 1], [256, 14, 14, 1024, 1, 1], [512, 7, 7, 1024, 1, 1],
    [512, 7, 7, 512, 3, 3], [2048, 7, 7, 512, 1, 1], [2048, 7, 7, 1024, 1, 1], [512, 7, 7, 2048, 1, 1],
]
MOBILENETV2_K1 = [[32, 112, 112, 3, 3, 3]] + [s + [1, 1] for s in [
    [16, 112, 112, 32], [96, 112, 112, 16], [24, 56, 56, 96], [144, 56, 56, 24], [24, 56, 56, 144],
    [32, 28, 28, 144], [192, 28, 28, 32], [32, 28, 28, 192], [64, 14, 14, 192], [384, 14, 14, 64],
    [64, 14, 14, 384], [96, 14, 14, 384], [576, 14, 14, 96], [96, 14, 14, 576], [160, 7, 7, 576],
    [960, 7, 7, 160], [160, 7, 7, 960], [320, 7, 7, 960], [1280, 7, 7, 320]]]
RESNEST50_LIKE = [
    [32, 112, 112, 3, 3, 3], [32, 112, 112, 32, 3, 3], [64, 112, 112, 32, 3, 3],      # deep stem
    [64, 56, 56, 64, 1, 1], [256, 56, 56, 64, 1, 1], [64, 56, 56, 256, 1, 1],         # layer1
    [128, 56, 56, 256, 1, 1], [512, 28, 28, 128, 1, 1], [512, 28, 28, 256, 1, 1],     # layer2
    [128, 28, 28, 512, 1, 1],
    [256, 28, 28, 512, 1, 1], [1024, 14, 14, 256, 1, 1], [1024, 14, 14, 512, 1, 1],   # layer3
    [256, 14, 14, 1024, 1, 1],
    [512, 14, 14, 1024, 1, 1], [2048, 7, 7, 512, 1, 1], [2048, 7, 7, 1024, 1, 1],     # layer4
    [512, 7, 7, 2048, 1, 1],
]
BATCHES = (1, 16, 4, 64)
MOBILENETV2_K2 = [1000, 1, 1, 1280, 1, 1]
MOBILENETV2_DEP = [(960, 7), (576, 7), (576, 14), (384, 14), (192, 14), (192, 28), (144, 28),
                   (144, 56), (96, 56), (32, 112)]
BERT_BASE = [[12, 128, 128, 64], [12, 128, 64, 128], [1, 128, 768, 768], [1, 128, 3072, 768],
             [1, 128, 768, 3072]]


def paper_sets() -> dict[str, list[LoopNestOp]]:
    """The paper's ResNet-50, MobileNetV2 and BERT-Base sets at batch 1 (Table 2, Figure 6)."""
    def conv(name, s, sketch="K1"):
        ext = (1, *s)
        return LoopNestOp(name=name, type="C2D", sketch=sketch, space=ext[:4], reduction=ext[4:])
    mb = [conv(f"mb{i}", s) for i, s in enumerate(MOBILENETV2_K1)] + [conv("mb_fc", MOBILENETV2_K2, "K2")]
    mb += [LoopNestOp(name=f"dw{i}", type="DEP", sketch="K3", space=(1, c, o, o), reduction=(3, 3))
           for i, (c, o) in enumerate(MOBILENETV2_DEP)]
    return {
        "resnet50": [conv(f"r{i}", s) for i, s in enumerate(RESNET50)],
        "mobilenetv2": mb,
        "bert_base": [LoopNestOp(name=f"bmm{i}", type="BMM", sketch="K", space=tuple(e[:3]),
                                 reduction=(e[3],)) for i, e in enumerate(BERT_BASE)],
    }


def compare_solvers(ops, mode, exact_limit):
    """Heuristic vs MIP on one of the paper's sets (small enough for the MIP)."""
    hops = {"none": 0, "1hop": 1, "all": "all"}[mode]
    bridges = bridge_operators(ops, hops=hops) if hops else []
    G = build_oc_graph(ops, cost_fn=analytic_cost_fn(BUDGET), backend_cost=BUDGET, bridges=bridges)
    approx = solve(G, solver="approx", time_limit=10.0)
    exact = solve(G, solver="exact", time_limit=exact_limit)
    return {
        "bridges": mode, "operators": len(ops), "bridge_operators": len(bridges),
        "reuse_pair_edges": G.graph["candidate_pairs"],
        "approx_cost": approx.cost, "approx_seconds": round(approx.seconds, 3),
        "exact_cost": exact.cost, "exact_seconds": round(exact.seconds, 3),
        "exact_optimal": exact.optimal, "exact_bound": exact.lower_bound,
        "approx_gap_to_exact": approx.cost / exact.cost - 1,
        "baseline_cost_all_backend": BUDGET * len(ops),
    }


def conv2d_set(n_ops: int = 167) -> tuple[list[LoopNestOp], dict]:
    ops, seen, composition = [], set(), {}
    for batch in BATCHES:
        for model, shapes in (("resnet50", RESNET50), ("mobilenetv2", MOBILENETV2_K1),
                              ("resnest50", RESNEST50_LIKE)):
            for s in shapes:
                ext = (batch, *s)
                if ext in seen or len(ops) >= n_ops:
                    continue
                seen.add(ext)
                ops.append(LoopNestOp(name=f"{model}_b{batch}_{len(ops)}", type="C2D", sketch="K1",
                                      space=ext[:4], reduction=ext[4:]))
                key = f"{model}@b{batch}"
                composition[key] = composition.get(key, 0) + 1
    return ops, composition


def run_mode(ops, mode, time_limit):
    t0 = time.perf_counter()
    hops = {"none": 0, "1hop": 1, "all": "all"}[mode]
    bridges = bridge_operators(ops, hops=hops) if hops else []
    t1 = time.perf_counter()
    G = build_oc_graph(ops, cost_fn=analytic_cost_fn(BUDGET), backend_cost=BUDGET, bridges=bridges)
    t2 = time.perf_counter()
    sol = solve(G, solver="auto", time_limit=time_limit)
    t3 = time.perf_counter()
    used = [v for v in sol.nodes if G.nodes[v]["op"].bridge]
    backend = [v for u, v in sol.edges if u == "root"]
    baseline = BUDGET * len(ops)
    row = {
        "bridges": mode, "operators": len(ops), "bridge_operators": len(bridges),
        "reuse_pair_edges": G.graph["candidate_pairs"], "arcs": G.number_of_edges(),
        "seconds_bridges": round(t1 - t0, 3), "seconds_graph": round(t2 - t1, 3),
        "seconds_solve": round(t3 - t2, 3), "seconds_total": round(t3 - t0, 3),
        "solver": sol.solver, "optimal": sol.optimal, "solve_time_limit_s": time_limit,
        "plan_cost": sol.cost, "lower_bound": sol.lower_bound,
        "baseline_cost_all_backend": baseline, "cost_ratio_vs_backend": sol.cost / baseline,
        "backend_tuned": len(backend), "bridges_used": len(used),
    }
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=("ci", "small", "paper"), default="small")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="solve time limit (s); default 5 for 1-hop, 30 for the closure (3 at ci)")
    ap.add_argument("--out", default=str(ROOT_DIR / "experiments" / "results" / "selector_scale.json"))
    args = ap.parse_args(argv)
    ops, composition = conv2d_set()
    print(f"{len(ops)} conv2d operators: {composition}")
    rows = run_modes(ops, args.scale, args.time_limit)
    paper_rows = run_paper_sets(10.0 if args.scale == "ci" else 60.0)
    api_seconds = run_api(ops)
    out = {
        "experiment": "selector_scale", "scale": args.scale, "budget_per_operator": BUDGET,
        "cost_model": "selector.analytic_cost.analytic_cost (placeholder for the tuner's estimator)",
        "operator_set": {"operators": len(ops), "composition": composition, "batches": BATCHES},
        "machine": _machine(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "runs": rows,
        "paper_sets": paper_rows,
        "select_reuse_pairs_1hop_seconds": round(api_seconds, 3),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    try:
        plot(out, str(Path(args.out).with_suffix(".png")))
    except ImportError as exc:  # matplotlib is an optional extra
        print(f"no plot: {exc}")


def plot(result: dict, path: str) -> None:
    """E6's figure: per bridge mode, seconds for bridges, OC graph and solve (stacked), and the plan's
    cost against tuning everything with the backend."""
    from eto.plots import new_figure

    runs = result["runs"]
    fig = new_figure(7.0, 3.4)
    left, right = fig.subplots(1, 2)
    names = [r["bridges"] for r in runs]
    bottom = [0.0] * len(runs)
    for key, label in (("seconds_bridges", "bridges"), ("seconds_graph", "OC graph"), ("seconds_solve", "solve")):
        vals = [r[key] for r in runs]
        left.bar(names, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    left.set_ylabel("seconds")
    left.legend(fontsize=7)
    left.set_title(f"{runs[0]['operators']} conv2d: selection time", fontsize=9)
    right.bar(names, [100 * r["cost_ratio_vs_backend"] for r in runs], color="tab:green")
    right.set_ylabel("plan cost, % of all-backend")
    right.set_title("estimated tuning cost", fontsize=9)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def run_modes(ops, scale: str, time_limit) -> list[dict]:
    """:func:`run_mode` for each bridge mode of ``scale``, printing one line each."""
    rows = []
    for mode in ["1hop"] if scale == "ci" else ["none", "1hop", "all"]:
        limit = time_limit if time_limit is not None else (
            3.0 if scale == "ci" else (30.0 if mode == "all" else 5.0))
        row = run_mode(ops, mode, limit)
        rows.append(row)
        print(f"{mode:5s} bridges={row['bridge_operators']:4d} pairs={row['reuse_pair_edges']:7d} "
              f"t(bridges/graph/solve/total)={row['seconds_bridges']:.2f}/{row['seconds_graph']:.2f}/"
              f"{row['seconds_solve']:.2f}/{row['seconds_total']:.2f}s  cost={row['plan_cost']:.0f} "
              f"({100 * row['cost_ratio_vs_backend']:.1f}% of all-backend {row['baseline_cost_all_backend']:.0f}) "
              f"bound={row['lower_bound']:.0f} backend={row['backend_tuned']} "
              f"bridges used={row['bridges_used']} [{row['solver']}{', optimal' if row['optimal'] else ''}]",
              flush=True)
    return rows


def run_paper_sets(exact_limit: float) -> list[dict]:
    """:func:`compare_solvers` on each of the paper's sets and bridge modes, printing one line each."""
    paper_rows = []
    print("\nthe paper's sets (batch 1): heuristic vs MIP "
          f"(MIP limit {exact_limit:g}s; 'proven' = optimality proven)")
    for name, set_ops in paper_sets().items():
        for mode in ("none", "1hop", "all"):
            row = dict(set=name, **compare_solvers(set_ops, mode, exact_limit))
            paper_rows.append(row)
            print(f"{name:12s} {mode:5s} bridges={row['bridge_operators']:3d} pairs={row['reuse_pair_edges']:5d} "
                  f"approx={row['approx_cost']:7.0f} ({row['approx_seconds']:.2f}s) "
                  f"exact={row['exact_cost']:7.0f} ({row['exact_seconds']:.2f}s"
                  f"{', proven' if row['exact_optimal'] else ', bound %.0f' % row['exact_bound']}) "
                  f"gap={100 * row['approx_gap_to_exact']:.2f}% all-backend={row['baseline_cost_all_backend']:.0f}",
                  flush=True)
    return paper_rows


def run_api(ops) -> float:
    """The one-call API on the paper's default (1-hop), as eto will call it; returns its seconds."""
    t0 = time.perf_counter()
    plan = select_reuse_pairs(ops, backend_cost=BUDGET, bridges="1hop", time_limit=5.0)
    api_seconds = time.perf_counter() - t0
    print(f"select_reuse_pairs(bridges='1hop'): {api_seconds:.2f}s, cost {plan.total_cost:.0f}, "
          f"{len(plan.backend)} backend, {len(plan.used_bridges)} bridges to tune")
    return api_seconds


def _machine() -> dict:
    import networkx
    import numpy
    import scipy
    return {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version(),
            "networkx": networkx.__version__, "scipy": scipy.__version__,
            "numpy": numpy.__version__}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    main()
