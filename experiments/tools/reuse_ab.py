"""Does a reuse-search feature pay? Each reuse pair tuned with it and without it, side by side.

``--switch`` picks the feature: ``set-safe``, round T's lead whose register rows do not collide in
L1 (:mod:`tuner.reuse.cachesets`), ``vector``, round T's lead with a native-width vector tile
(:func:`tuner.reuse.leads.vector_tiles`), ``register``, round T's lead with the register block a
register model prefers (:mod:`tuner.reuse.registers`), ``kept``, β's kept tiles as round T's lead also where round T
holds them (:meth:`tuner.reuse.space.ReuseSpace.kept_lead`; off: left to round T's rank, as before), or
``stage``, the round that tries round T's best on α's sibling write-stage sketches
(:meth:`tuner.reuse.search.ReuseTuner._stage_round`). For each ``--pair ALPHA BETA``,
or every reuse an eto database recorded (``--reuses-of DB``: α and the source it was derived from),
the reuse tuner derives α twice from β's best program in ``--db``, as ``eto tune`` does (ranked, the
ranker trained on β's records): with the feature and with it switched off. Both results and, where
``--reference`` holds α, its MetaSchedule program are then re-measured side by side (interleaved
rounds). Pairs the feature does not apply to run the same search twice: they show the noise of a
reuse's result (``--applying-only`` skips them).

    python -m experiments.tools.reuse_ab --switch stage \\
        --db experiments/work/set_bench_resnet50_N100_screened/seed0/eto \\
        --reuses-of experiments/work/set_bench_resnet50_N100_screened/seed0/eto \\
        --reference experiments/work/set_bench_resnet50_N100_screened/seed0/metaschedule \\
        --out experiments/results/reuse_ab_stage_resnet50_seed0.json

Costs: two reuses per pair (5-40 s each on 2 cores) and the re-measurement.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from experiments._experiment import ab_parser, ab_target, write_json

SWITCHES = ("set-safe", "vector", "register", "kept", "stage")
#: the round T leads (tuner.reuse.leads) a switch turns off
LEADS = {"set-safe": "set_safe_tiles", "vector": "vector_tiles", "register": "register_tiles"}


def applies(switch: str, tuner) -> bool:
    """Whether the feature can change this pair's search (else both runs are the same search)."""
    import tuner.reuse.leads as leads

    if switch in LEADS:
        name, on = LEADS[switch], leads.lead_tiles(tuner.space)
        lead, _ = getattr(leads, name), setattr(leads, name, lambda space, **kw: None)
        try:
            return leads.lead_tiles(tuner.space) != on
        finally:
            setattr(leads, name, lead)
    if switch == "kept":
        return tuner.space.kept_lead() is not None and tuner.space.kept_in_t_round()
    return bool(tuner.siblings)


def _kept_only_outside_t_round(space):
    """``kept`` switched off: β's kept tiles lead round T only where round T does not hold them."""
    kept = space.kept_tiles()
    return None if space.kept_in_t_round() or not space.valid(kept) else kept


def tune_pair(func, beta_records, target, measurer, *, switch: str, on: bool) -> dict:
    """One ranked reuse of α from β's best, with the feature ``switch`` on or off."""
    import tuner.reuse.leads as leads
    import tuner.reuse.search as reuse
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.analysis.sketch import Sketch
    from tuner.reuse.space import ReuseSpace

    stage_round, kept_lead = reuse.ReuseTuner._stage_round, ReuseSpace.kept_lead
    lead = getattr(leads, LEADS.get(switch, ""), None)
    if not on and switch in LEADS:
        setattr(leads, LEADS[switch], lambda space, **kw: None)
    if not on and switch == "stage":
        reuse.ReuseTuner._stage_round = lambda self, run, measured: []
    if not on and switch == "kept":
        ReuseSpace.kept_lead = _kept_only_outside_t_round
    try:
        res = reuse.reuse_tune(func, beta_records[0], target, measurer, ranker=LearnedRanker(target),
                               history=beta_records)
    finally:
        reuse.ReuseTuner._stage_round, ReuseSpace.kept_lead = stage_round, kept_lead
        if lead is not None:
            setattr(leads, LEADS[switch], lead)
    won, beta = (Sketch(res.record.trace) if res.record is not None else None), Sketch(beta_records[0].trace)
    other_stage = won is not None and won.stageless == beta.stageless and won.signature != beta.signature
    return {"res": res, "candidates": res.candidates, "seconds": res.seconds, "recorded_s": res.latency_s,
            "rounds": res.rounds, "other_write_stage": other_stage,
            "config": None if res.config is None else [res.config.space, res.config.reduction]}


def pairs_of(args, target) -> list[tuple]:
    """(α, β, α's function): ``--pair`` given, then every reuse ``--reuses-of`` recorded (its best
    program's source; α's function from its record, so a model's fused tasks are paired too)."""
    from eto.store.database import Database
    from eto.operators import Operator

    pairs = [(a, Operator.parse(b), a.prim_func()) for a, b in ((Operator.parse(a), b) for a, b in args.pair or ())]
    if args.reuses_of:
        for p in Database(args.reuses_of, readonly=True).best_programs(target, predicted=False):
            if p.method == "reuse" and p.source:
                pairs.append((p.op, Operator.parse(p.source), p.tuning_record.workload.mod["main"]))
    if not pairs:
        raise SystemExit("no pair: give --pair ALPHA BETA or --reuses-of DB")
    return pairs


def main(argv=None) -> int:
    ap = ab_parser(__doc__)
    ap.add_argument("--switch", choices=SWITCHES, required=True, help="the feature switched on and off")
    ap.add_argument("--db", required=True, help="database holding β's programs (all of them rank)")
    ap.add_argument("--reference", help="database holding α's programs to compare with (e.g. MetaSchedule's)")
    ap.add_argument("--pair", nargs=2, action="append", metavar=("ALPHA", "BETA"))
    ap.add_argument("--reuses-of", metavar="DB", help="also every reuse pair this eto database recorded")
    ap.add_argument("--applying-only", action="store_true", help="skip the pairs the feature does not apply to")
    args = ap.parse_args(argv)
    target = ab_target(args)

    from eto.store.database import Database
    from tuner.measure.apply import scheduled_module
    from tuner.measure.measurer import Measurer
    from tuner.reuse.search import ReuseTuner

    db = Database(args.db, readonly=True)
    ref_db = Database(args.reference, readonly=True) if args.reference else None
    rows = []
    with Measurer.local() as measurer:
        for alpha, beta, func in pairs_of(args, target):
            progs = sorted(db.programs(target=target, op=beta), key=lambda p: p.latency_s)
            beta_records = [p.tuning_record for p in progs]  # best first; all of them train the ranker
            if not beta_records:
                raise SystemExit(f"{beta.name}: no program in {args.db}")
            row = {"alpha": alpha.name, "beta": beta.name,
                   "applies": applies(args.switch, ReuseTuner(func, beta_records[0], target))}
            if args.applying_only and not row["applies"]:
                continue
            t0 = time.perf_counter()
            runs = {k: tune_pair(func, beta_records, target, measurer, switch=args.switch, on=k == "with")
                    for k in ("with", "without")}
            mods = {k: scheduled_module(r.pop("res").record) for k, r in runs.items()}
            ref = ref_db.best(alpha, target) if ref_db is not None else None
            if ref is not None:
                mods["reference"] = scheduled_module(ref.tuning_record)
            lat = dict(zip(mods, measurer.remeasure(list(mods.values()), target, rounds=args.rounds)))
            row.update(runs, latency_s=lat, wall_s=time.perf_counter() - t0,
                       with_over_without=lat["without"] / lat["with"])
            if "reference" in lat:
                row["throughput_vs_reference"] = {k: lat["reference"] / lat[k] for k in runs}
            rows.append(row)
            print(f"{alpha.name} <- {beta.name}: applies {row['applies']}; "
                  + ", ".join(f"{k} {runs[k]['candidates']} cands {runs[k]['seconds']:.1f} s {lat[k] * 1e6:.1f} us"
                              for k in runs)
                  + (f", reference {lat['reference'] * 1e6:.1f} us" if "reference" in lat else ""), flush=True)
    out = {"experiment": f"reuse A/B: {args.switch}", "switch": args.switch, "db": args.db,
           "reference": args.reference, "rows": rows, "summary": summary(rows)}
    write_json(out, args.out)
    print(json.dumps(out["summary"], indent=1))
    return 0


def summary(rows: list[dict]) -> dict:
    """Medians over the pairs the feature applies to: latency without over with, candidates, seconds,
    and each arm's throughput against the reference."""
    on = [r for r in rows if r["applies"]]

    def med(values):
        values = list(values)
        return statistics.median(values) if values else None

    out = {"pairs": len(rows), "applies": len(on),
           "median_with_over_without": med(r["with_over_without"] for r in on),
           "other_write_stage_won": sum(r["with"]["other_write_stage"] for r in on)}
    for k in ("with", "without"):
        out[f"median_candidates_{k}"] = med(r[k]["candidates"] for r in on)
        out[f"median_seconds_{k}"] = med(r[k]["seconds"] for r in on)
        out[f"median_throughput_vs_reference_{k}"] = med(r["throughput_vs_reference"][k] for r in on
                                                         if "throughput_vs_reference" in r)
    return out


if __name__ == "__main__":
    sys.exit(main())
