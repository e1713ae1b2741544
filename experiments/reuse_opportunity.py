"""E1, reuse opportunity (paper section 3): do good programs of α fall in the B/T/M windows around β's best?

For every reuse pair (α, β) of a backend database's operators (same type and sketch set, one loop
nest dominating the other: Definition 2), the programs of α within ``t`` = 90% of α's best
(G_α(90%)) are compared with β's best program S*_β by the features the reuse tuner searches
(:mod:`tuner.analysis.features`; on CPU B = parallel tasks, T = B x sub-tasks, M = bytes staged per cache
block x B):

    Φ_B = {S_α in G_α : B(S_α) / B(S*_β) in [r1, r2]},  Φ_T and Φ_M with the window [1, r2],

r1 = |I(rL_β)| / |I(rL_α)|, r2 = |I(L_α)| / |I(L_β)| (a window is read between its two ends, so
that pairs with a smaller α count too). The paper found |Φ| > 0 for 87% (B), 92% (T) and 89% (M)
of 106 conv2d pairs on a P100; if the same holds here, searching inside the windows loses little.

    python -m experiments.reuse_opportunity --scale small --db DB [--opset resnet50]
    python -m experiments.reuse_opportunity --scale ci --work /tmp/e1 --out /tmp/e1.json

Without ``--db`` the set is first tuned with MetaSchedule (``--trials`` per operator, every measured
program kept), which is what scale ``ci`` does on three small batch matmuls. Writes the result
JSON (per pair and summary) and a PNG next to it.
"""

from __future__ import annotations

import math
import os
import sys

from experiments._bench import add_search_option, backend_search
from experiments._env import environment
from experiments._experiment import CI_SET, parser, setup, write_outputs

SCALES = {
    "ci": dict(opset=CI_SET, trials=8),
    "small": dict(opset="resnet50", trials=100),
    "paper": dict(opset="resnet50", trials=1000),
}
#: G_α(t): α's programs at least this fraction of its best's performance (the paper's t)
T_PERF = 0.9


def within(x: float, lo: float, hi: float, tol: float = 1e-9) -> bool:
    lo, hi = min(lo, hi), max(lo, hi)
    return lo * (1 - tol) <= x <= hi * (1 + tol)


def pair_row(alpha, beta, programs: dict) -> dict:
    """Φ_B, Φ_T, Φ_M of one ordered pair, from α's good programs and β's best."""
    a_progs, (_, b_feat) = programs[alpha], programs[beta][0]
    best_lat = a_progs[0][0].latency_s
    good = [(p, f) for p, f in a_progs if p.latency_s <= best_lat / T_PERF]
    r1 = math.prod(beta.reduction) / math.prod(alpha.reduction)
    r2 = math.prod(alpha.extents) / math.prod(beta.extents)
    cfg_b, nest_b = b_feat
    counts = {"B": 0, "T": 0, "M": 0}
    best_ratios = None
    for p, (cfg, nest) in good:
        ratios = {"B": cfg.B / cfg_b.B, "T": cfg.T / cfg_b.T, "M": cfg.M(nest) / cfg_b.M(nest_b)}
        best_ratios = best_ratios or ratios  # α's best program (first: sorted by latency)
        counts["B"] += within(ratios["B"], r1, r2)
        counts["T"] += within(ratios["T"], 1.0, r2)
        counts["M"] += within(ratios["M"], 1.0, r2)
    return {"alpha": alpha.name, "beta": beta.name, "r1": r1, "r2": r2, "good": len(good),
            "phi": counts, "alpha_best_ratios": best_ratios,
            "alpha_best_in_window": {"B": within(best_ratios["B"], r1, r2), "T": within(best_ratios["T"], 1.0, r2),
                                     "M": within(best_ratios["M"], 1.0, r2)}}


def analyse(db, opset, target) -> list[dict]:
    """Every ordered reuse pair of the set's operators that the database has programs for."""
    from selector import is_reuse_pair
    from tuner.analysis.features import program_features
    from tuner.analysis.kinds import kind_of

    from eto.planning.nodes import loop_nest_op

    kind = kind_of(target)
    programs = {}
    for e in opset:
        progs = sorted((p for p in db.programs(target=target, op=e.op) if p.method == "backend"),
                       key=lambda p: p.latency_s)
        feats = []
        for p in progs:
            try:
                feats.append((p, program_features(p.tuning_record, kind)))
            except (ValueError, KeyError):  # a sketch without multi-level tiling: no B/T/M
                continue
        if feats:
            node = loop_nest_op(e.op.name, e.op, e.frequency, False)
            programs[node] = feats
    return [pair_row(a, b, programs) for a in programs for b in programs if a is not b and is_reuse_pair(a, b)]


def summary(rows: list[dict]) -> dict:
    n = len(rows)
    share = {k: (sum(r["phi"][k] > 0 for r in rows) / n if n else None) for k in ("B", "T", "M")}
    best_in = {k: (sum(r["alpha_best_in_window"][k] for r in rows) / n if n else None) for k in ("B", "T", "M")}
    return {"pairs": n, "share_phi_nonempty": share, "share_alpha_best_in_window": best_in,
            "paper_share_phi_nonempty": {"B": 0.87, "T": 0.92, "M": 0.89}}


def plot(result: dict, path: str) -> None:
    from eto.plots import new_figure

    fig = new_figure(6.4, 3.4)
    ax = fig.add_subplot()
    keys = ["B", "T", "M"]
    s = result["summary"]
    xs = range(len(keys))
    ax.bar([x - 0.27 for x in xs], [100 * (s["share_phi_nonempty"][k] or 0) for k in keys], 0.27, label="|Φ| > 0 (here)")
    ax.bar(list(xs), [100 * (s["share_alpha_best_in_window"][k] or 0) for k in keys], 0.27,
           label="α's best in the window (here)")
    ax.bar([x + 0.27 for x in xs], [100 * s["paper_share_phi_nonempty"][k] for k in keys], 0.27,
           label="|Φ| > 0 (paper, P100)", color="#bbbbbb")
    ax.set_xticks(list(xs), keys)
    ax.set_ylabel("% of reuse pairs")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, loc="upper center", ncols=3, bbox_to_anchor=(0.5, -0.1))
    ax.set_title(f"E1 reuse opportunity: {result['opset']}, {s['pairs']} ordered pairs, {result['target_kind']}",
                 fontsize=9)
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = parser(__doc__, SCALES, "reuse_opportunity")
    ap.add_argument("--db", help="a MetaSchedule run's eto database of the set (default: tune one into --work)")
    ap.add_argument("--trials", type=int, help="MetaSchedule trials per operator when tuning")
    add_search_option(ap)
    args = ap.parse_args(argv)
    cfg, opset, target, work, out = setup(args, SCALES, "reuse_opportunity")
    from eto.store.database import Database
    from eto.runs.tuning import tune_with_backend
    from tuner.measure.options import BackendOptions
    from tuner.analysis.kinds import kind_of

    trials = args.trials or cfg["trials"]
    if args.db:
        db = Database(args.db, readonly=True)
    else:
        db = Database(os.path.join(work, "metaschedule"))
        # resumes: tuned operators are kept
        tune_with_backend(opset, target, db, BackendOptions(trials=trials, seed=0, search=backend_search(args)))
    rows = analyse(db, opset, target)
    result = {"experiment": "E1 reuse opportunity (paper section 3)", "scale": args.scale, "opset": opset.name,
              "db": args.db, "trials": None if args.db else trials,
              "search": None if args.db else args.search, "t": T_PERF, "target": str(target),
              "target_kind": kind_of(target), "environment": environment(), "summary": summary(rows), "pairs": rows}
    write_outputs(result, out, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
