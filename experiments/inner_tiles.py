"""Is a reuse's quality lost in its outer tiles (B, T, M) or in the inner tiles it keeps from β?

Every candidate of Algorithm 1 keeps β's best program's inner (register and vector) tiles
(``ReuseSpace.config``). For one pair, this builds round T twice, once with β's inner tiles and
once with the inner tiles of α's best program in a reference database (a MetaSchedule run), the
block, thread and reduction choices the same reuse search makes in both, measures a random
``--sample`` of each (same slots) beside the reference program itself, and prints the best of each
against the reference's recorded time.
If round T with the reference's inner tiles comes near the reference, the loss is in the inner tiles
a small β hands down, not in B/T/M.

    python experiments/inner_tiles.py --db experiments/work/set_bench_bert_base_N200_perloop/seed0/eto \\
        --reference experiments/work/set_bench_bert_base_N200_perloop/seed0/metaschedule \\
        --source 'BMM(B=1,M=128,N=64,K=128)' --alpha 'BMM(B=1,M=128,N=768,K=3072)'

Costs: one design space, 2 x ``--sample`` + 1 builds and runs (about a minute for a 0.6 GFLOP matmul).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="the database holding β's programs")
    ap.add_argument("--reference", required=True, help="a database holding α's programs (e.g. MetaSchedule's)")
    ap.add_argument("--source", required=True)
    ap.add_argument("--alpha", required=True)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--sample", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")

    from eto.store.database import Database
    from eto.operators import Operator
    from eto.target import parse_target
    from tuner.analysis.intrinsics import register_tensor_intrinsics
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tuner.reuse.search import ReuseTuner, config_of

    target = parse_target(args.target)
    register_tensor_intrinsics(target)  # the intrinsics MetaSchedule's rules use
    beta, alpha = Operator.parse(args.source), Operator.parse(args.alpha)
    source = Database(args.db, readonly=True).best(beta, target)
    ref = Database(args.reference, readonly=True).best(alpha, target)
    if source is None or ref is None:
        raise SystemExit(f"need {beta.name} in {args.db} and {alpha.name} in {args.reference}")
    tuner = ReuseTuner(alpha.prim_func(), source.tuning_record, target)
    ref_cfg = config_of(ref.tuning_record, tuner)
    if ref_cfg is None:
        raise SystemExit(f"the reference program of {alpha.name} is not a multi-level tiling of β's sketch")
    rounds = {"beta_inner": tuner.reuse.space.t_round(), "reference_inner": tuner.reuse.space.t_round(like=ref_cfg)}
    slots = random.Random(args.seed).sample(range(len(rounds["beta_inner"])), min(args.sample, len(rounds["beta_inner"])))
    built: dict[str, list] = {}
    for name, configs in rounds.items():
        cands = [tuner._cand(configs[i]) for i in slots if configs[i] is not None]
        for c in cands:
            c.sch = tuner.schedule(c)
        built[name] = [c for c in cands if c.sch is not None]
    from tvm.s_tir import Schedule

    ref_sch = Schedule(ref.tuning_record.workload.mod)
    ref.tuning_record.trace.apply_to_schedule(ref_sch, remove_postproc=False)
    with Measurer.local(MeasureConfig()) as measurer:
        mods = [c.sch.mod for name in built for c in built[name]] + [ref_sch.mod]
        res = measurer.measure(mods, target)
    # the reference as recorded by its own run, and as re-measured here (a replayed program can run
    # at another speed in another runner process: README, "Whole sets")
    ref_ms, ref_here_ms = ref.latency_s * 1e3, res[-1].median * 1e3
    out = {"alpha": alpha.key, "source": beta.key, "reference_ms": ref_ms, "reference_here_ms": ref_here_ms,
           "reference_tiles": [ref_cfg.space, ref_cfg.reduction], "beta_tiles": [tuner.beta_cfg.space, tuner.beta_cfg.reduction],
           "slots": len(rounds["beta_inner"]), "sampled": len(slots)}
    k = 0
    print(f"{alpha.name} from {beta.name}: reference {ref_ms:.3f} ms (here {ref_here_ms:.3f} ms) {ref_cfg.space} {ref_cfg.reduction}; "
          f"β {tuner.beta_cfg.space} {tuner.beta_cfg.reduction}; round T {len(rounds['beta_inner'])} slots, {len(slots)} sampled")
    for name in built:
        times = [r.median * 1e3 for r in res[k:k + len(built[name])]]
        k += len(built[name])
        best = min(times, default=float("inf"))
        out[name] = {"built": len(times), "best_ms": best, "median_ms": sorted(times)[len(times) // 2] if times else None,
                     "throughput_vs_reference": ref_ms / best}
        print(f"  round T with {name:16s}: {len(times)} built, best {best:.3f} ms ({ref_ms / best:.2f} of the reference)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
