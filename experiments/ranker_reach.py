"""Does a learned ranker trained on β's programs order α's reuse candidates? (the evidence behind
``tuner.reuse.cost_model.LearnedRanker.REACH``).

For one reuse pair taken from a database (β tuned there, usually by the backend), it enumerates
every candidate Algorithm 1 could measure in rounds T and M together (each round-T slot with every
LShape of round M's window), builds them all, ranks them with a ``LearnedRanker`` trained on β's
measured programs, and measures the ``--top`` best-ranked and a random ``--sample`` of the rest.
It prints each measured candidate with its rank, and the Spearman correlation between rank and
measured time over the random sample (1: the ranker orders α perfectly; 0: no better than chance;
negative: worse than chance). With ``--warm K`` it first measures K random candidates of α and
trains the ranker on them as well, as a reuse's random batches do before the ranker knows α's shape:
does a handful of α's own programs make its order worth following?

With ``--reuse`` it then derives α from β by the reuse tuner twice, as a run would (β's best
program, its runner-ups as leads, the ranker trained on β's programs, 4 candidates a batch): once
following the ranker's order whatever α's size (``reach`` infinite) and once as eto does by default
(random batches when the ranker has not seen α's size), and prints each one's candidates and best
time, against the best program of α in ``--reference`` (a MetaSchedule run's database) if given.

    python experiments/ranker_reach.py --db experiments/work/set_bench_bert_base_N200_leads/seed2/eto \\
        --source 'BMM(B=1,M=128,N=64,K=128)' --alpha 'BMM(B=1,M=128,N=768,K=3072)'

Costs: building a few thousand candidates (about 6 s), ranking them (5 s), measuring
``top + sample`` candidates (about 0.5 s each for a 0.6 GFLOP matmul).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation of two equally long lists (ties broken by position)."""
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=v.__getitem__)
        out = [0.0] * len(v)
        for r, i in enumerate(order):
            out[i] = float(r)
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="a database folder holding β's measured programs")
    ap.add_argument("--source", required=True, help="β, e.g. 'BMM(B=1,M=128,N=64,K=128)'")
    ap.add_argument("--alpha", required=True, help="α, e.g. 'BMM(B=1,M=128,N=768,K=3072)'")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--sample", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", type=int, default=0,
                    help="first measure this many random candidates of α and train the ranker on them too")
    ap.add_argument("--reuse", action="store_true", help="also reuse-tune α with and without the ranker's order")
    ap.add_argument("--reference", help="a database holding α's MetaSchedule programs, for --reuse")
    ap.add_argument("--skip-sample", action="store_true", help="only --reuse")
    ap.add_argument("--out", help="write the measured rows as JSON here")
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")

    from eto.store.database import Database
    from eto.operators import Operator
    from eto.target import parse_target
    from tuner.analysis.intrinsics import register_tensor_intrinsics
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tuner.reuse.search import ReuseTuner

    target = parse_target(args.target)
    register_tensor_intrinsics(target)  # the intrinsics MetaSchedule's rules use
    db = Database(args.db, readonly=True)
    beta, alpha = Operator.parse(args.source), Operator.parse(args.alpha)
    progs = db.programs(target=target, op=beta)
    if not progs:
        raise SystemExit(f"{args.db} holds no program of {beta.name} on {target}")
    source = min(progs, key=lambda p: p.latency_s)
    out: dict = {"alpha": alpha.key, "source": beta.key, "db": args.db}
    if args.reuse:
        out["reuse"] = compare_reuse(args, db, target, alpha, beta, source, progs)
    if args.skip_sample:
        _write(args.out, out)
        return 0
    ranker = LearnedRanker(target)
    ranker.observe_records([p.tuning_record for p in progs])
    tuner = ReuseTuner(alpha.prim_func(), source.tuning_record, target)
    space = tuner.reuse.space
    configs = []
    for bs, t in space.t_slots():
        first = space.tshape(t, bs, space.lshape(bs))
        if first is None:
            continue
        for cfg in [first] + [space.config(bs, first.thread_counts, ls) for ls in space.m_lshapes(first)]:
            if cfg not in configs:
                configs.append(cfg)
    t0 = time.perf_counter()
    built = []
    for cfg in configs:
        cand = tuner._cand(cfg)
        cand.sch = tuner.schedule(cand)
        if cand.sch is not None:
            built.append(cand)
    build_s = time.perf_counter() - t0
    rng = random.Random(args.seed)
    with Measurer.local(MeasureConfig()) as measurer:
        warm = rng.sample(range(len(built)), min(args.warm, len(built)))
        if warm:  # α's own programs first, as a reuse's random batches would give the ranker
            got = measurer.measure([built[i].sch.mod for i in warm], target)
            ranker.observe(tuner.alpha_mod, [built[i].sch for i in warm], [r.median for r in got])
            out["warm_ms"] = sorted(r.median * 1e3 for r in got)
        warm_set = set(warm)
        left = [i for i in range(len(built)) if i not in warm_set]
        t0 = time.perf_counter()
        ranked = ranker.rank(tuner.alpha_mod, [built[i].sch for i in left]) or list(range(len(left)))
        order = [left[i] for i in ranked]
        rank_s = time.perf_counter() - t0
        rank_of = {i: r for r, i in enumerate(order)}
        top = order[: args.top]
        rest = order[args.top:]
        sample = rng.sample(rest, min(args.sample, len(rest)))
        results = measurer.measure([built[i].sch.mod for i in top + sample], target)
    rows = [{"rank": rank_of[i], "ms": r.median * 1e3, "random": n >= len(top),
             "space": built[i].cfg.space, "reduction": built[i].cfg.reduction}
            for n, (i, r) in enumerate(zip(top + sample, results))]
    print(f"{alpha.name} from {beta.name}: {len(configs)} candidates, {len(built)} built in {build_s:.1f} s, "
          f"ranked in {rank_s:.1f} s by a ranker trained on {ranker.samples} programs "
          f"({len(warm)} of them α's, best {min(out.get('warm_ms', [math.inf])):.3f} ms); "
          f"knows α's shape: {ranker.knows(tuner.alpha_mod)}")
    for row in sorted(rows, key=lambda r: r["ms"]):
        print(f"  rank {row['rank']:5d} {'random' if row['random'] else 'top   '} {row['ms']:9.3f} ms "
              f"{row['space']} {row['reduction']}")
    sampled = [r for r in rows if r["random"] and r["ms"] < float("inf")]
    rho = spearman([r["rank"] for r in sampled], [r["ms"] for r in sampled])
    best_top = min(r["ms"] for r in rows if not r["random"])
    best_random = min((r["ms"] for r in sampled), default=float("inf"))
    print(f"Spearman(rank, time) over the random sample: {rho:+.2f}; best of the top {len(top)}: "
          f"{best_top:.3f} ms, best of {len(sampled)} random: {best_random:.3f} ms")
    out.update({"candidates": len(built), "ranker_samples": ranker.samples, "spearman_random": rho,
                "best_top_ms": best_top, "best_random_ms": best_random, "rows": rows})
    _write(args.out, out)
    return 0


def compare_reuse(args, db, target, alpha, beta, source, progs) -> list[dict]:
    """α reuse-tuned from β's best twice: the ranker's order followed always, then eto's default."""
    import math

    from eto.store.database import Database
    from eto.planning.lead_sources import runner_ups
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tuner.reuse.search import reuse_tune

    reference = None
    if args.reference:
        ref = Database(args.reference, readonly=True).best(alpha, target)
        reference = ref.latency_s if ref is not None else None
    leads = runner_ups(beta, source, db, target)
    rows = []
    with Measurer.local(MeasureConfig()) as measurer:
        for name, reach in (("ranker's order", math.inf), ("default", LearnedRanker.REACH)):
            ranker = LearnedRanker(target, reach=reach)
            res = reuse_tune(alpha.prim_func(), source.tuning_record, target, measurer, ranker=ranker,
                             history=[p.tuning_record for p in progs], alternates=leads)
            row = {"order": name, "candidates": res.candidates, "seconds": res.seconds, "best_ms": res.latency_s * 1e3,
                   "rounds": dict(res.rounds)}
            if reference:
                row["throughput_vs_reference"] = reference / res.latency_s
            rows.append(row)
            print(f"reuse, {name}: {res.candidates} candidates {dict(res.rounds)}, {res.seconds:.1f} s, "
                  f"best {res.latency_s * 1e3:.3f} ms" + (f", {reference / res.latency_s:.2f} of the reference's "
                                                           f"{reference * 1e3:.3f} ms" if reference else ""), flush=True)
    return rows


def _write(path: str | None, data: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
