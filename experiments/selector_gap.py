"""Approximation gap of the selector's Steiner heuristic against the exact MIP.

Random instances of 30-60 nodes with Steiner nodes, two families:

* ``oc``: OC graphs of random operator sets -- 4-loop nests with power-of-two extents (one type,
  one sketch), their 1-hop bridges as Steiner nodes, backend budget 1000, reuse costs from the
  analytic estimate times log-normal noise (sigma 0.3; the real estimator is not analytic);
* ``random``: random digraphs, root edge to every node (1000), other arcs with probability
  0.08-0.25 and cost uniform in [20, 900], 40-60% of the nodes terminals.

For each instance: the heuristic (``solver="approx"``) and the MIP (``solver="exact"``), both
through :func:`selector.solve`; gap = approx / exact - 1 over instances the MIP proved optimal.

    python -m experiments.selector_gap --scale ci|small|paper [--time-limit S] [--seed N]

Writes experiments/results/selector_gap.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import time
import zlib
from pathlib import Path

import networkx as nx
import numpy as np

from selector import LoopNestOp, analytic_cost, bridge_operators, build_oc_graph, solve

ROOT_DIR = Path(__file__).resolve().parents[1]

SCALES = {"ci": 6, "small": 30, "paper": 200}  # instances per family
BUDGET = 1000.0


def oc_instance(rng: random.Random) -> tuple[nx.DiGraph, str, list]:
    """OC graph with 30-60 nodes (operators + 1-hop bridges)."""
    target = rng.randint(30, 60)
    values = [[1, 2, 4, 8, 16], [16, 32, 64, 128, 256], [7, 14, 28, 56], [16, 32, 64, 128, 256, 512]]
    for _ in range(1000):
        n_ops = rng.randint(8, 22)
        seen, ops = set(), []
        while len(ops) < n_ops:
            ext = tuple(rng.choice(v) for v in values)
            if ext in seen:
                continue
            seen.add(ext)
            ops.append(LoopNestOp(name=f"op{len(ops)}", type="T", sketch="K",
                                  space=ext[:3], reduction=ext[3:]))
        bridges = bridge_operators(ops)
        if abs(len(ops) + len(bridges) - target) <= 4 and 30 <= len(ops) + len(bridges) <= 60 and bridges:
            break
    noise_seed = rng.randrange(2**31)

    def cost(alpha, beta):
        # deterministic per ordered pair, log-normal factor around the analytic estimate
        r = random.Random(zlib.crc32(f"{noise_seed}|{alpha.name}|{beta.name}".encode()))
        return min(BUDGET, round(analytic_cost(alpha, beta, budget=math.inf) * math.exp(r.gauss(0, 0.3)), 1))

    G = build_oc_graph(ops, cost_fn=cost, backend_cost=BUDGET, bridges=bridges)
    return G, "root", list(G.graph["terminals"])


def random_instance(rng: random.Random) -> tuple[nx.DiGraph, str, list]:
    n = rng.randint(30, 60)
    p = rng.uniform(0.08, 0.25)
    nodes = [f"v{i}" for i in range(n)]
    G = nx.DiGraph()
    for v in nodes:
        G.add_edge("root", v, weight=BUDGET)
    for u in nodes:
        for v in nodes:
            if u != v and rng.random() < p:
                G.add_edge(u, v, weight=float(rng.randint(20, 900)))
    terminals = rng.sample(nodes, int(n * rng.uniform(0.4, 0.6)))
    return G, "root", terminals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="ci")
    ap.add_argument("--time-limit", type=float, default=60.0, help="per exact solve (s)")
    ap.add_argument("--seed", type=int, default=2022)
    ap.add_argument("--out", default=str(ROOT_DIR / "experiments" / "results" / "selector_gap.json"))
    args = ap.parse_args()
    rows = run_instances(random.Random(args.seed), SCALES[args.scale], args.time_limit)
    summary = summarize(rows)
    import networkx, scipy  # noqa: E401
    out = {
        "experiment": "selector_gap", "scale": args.scale, "seed": args.seed,
        "exact_time_limit_s": args.time_limit, "approx_time_limit_s": 10.0,
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "networkx": networkx.__version__, "scipy": scipy.__version__,
                    "numpy": np.__version__},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "summary": summary, "instances": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nwrote {args.out}")


def run_instances(rng: random.Random, per_family: int, time_limit: float) -> list[dict]:
    """Heuristic and MIP on ``per_family`` instances of each family, printing one line each."""
    rows = []
    for family, make in (("oc", oc_instance), ("random", random_instance)):
        for i in range(per_family):
            G, root, terms = make(rng)
            ap_sol = solve(G, root, terms, solver="approx", time_limit=10.0)
            ex_sol = solve(G, root, terms, solver="exact", time_limit=time_limit)
            rows.append({
                "family": family, "instance": i, "nodes": G.number_of_nodes() - 1,
                "terminals": len(terms), "steiner": G.number_of_nodes() - 1 - len(terms),
                "arcs": G.number_of_edges(),
                "approx_cost": ap_sol.cost, "approx_seconds": ap_sol.seconds,
                "exact_cost": ex_sol.cost, "exact_seconds": ex_sol.seconds,
                "exact_optimal": ex_sol.optimal, "exact_bound": ex_sol.lower_bound,
                "gap": ap_sol.cost / ex_sol.cost - 1 if ex_sol.cost > 0 else 0.0,
            })
            print(f"{family:6s} #{i:3d} n={rows[-1]['nodes']:2d} |T|={len(terms):2d} "
                  f"approx={ap_sol.cost:9.1f} ({ap_sol.seconds:6.3f}s) exact={ex_sol.cost:9.1f} "
                  f"({ex_sol.seconds:6.2f}s{'' if ex_sol.optimal else ', not proven'}) "
                  f"gap={100 * rows[-1]['gap']:5.2f}%", flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    """Per family (and ``"all"``): gaps over the instances the MIP proved optimal, and times;
    prints the table."""
    summary = {}
    print("\nfamily   n   proven  mean gap  max gap  =opt   approx s (mean/max)   exact s (mean/max)")
    for family in ("oc", "random", "all"):
        sel = [r for r in rows if family == "all" or r["family"] == family]
        proven = [r for r in sel if r["exact_optimal"]]
        gaps = [r["gap"] for r in proven]
        s = {
            "instances": len(sel), "proven_optimal": len(proven),
            "mean_gap": statistics.fmean(gaps) if gaps else None,
            "max_gap": max(gaps) if gaps else None,
            "approx_equals_opt": sum(g <= 1e-9 for g in gaps),
            "approx_seconds_mean": statistics.fmean(r["approx_seconds"] for r in sel),
            "approx_seconds_max": max(r["approx_seconds"] for r in sel),
            "exact_seconds_mean": statistics.fmean(r["exact_seconds"] for r in sel),
            "exact_seconds_max": max(r["exact_seconds"] for r in sel),
        }
        summary[family] = s
        print(f"{family:7s} {s['instances']:3d}  {s['proven_optimal']:5d}  "
              f"{100 * (s['mean_gap'] or 0):7.2f}%  {100 * (s['max_gap'] or 0):6.2f}%  "
              f"{s['approx_equals_opt']:4d}   {s['approx_seconds_mean']:7.3f} / {s['approx_seconds_max']:6.3f}"
              f"        {s['exact_seconds_mean']:6.2f} / {s['exact_seconds_max']:6.2f}")
    return summary


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
