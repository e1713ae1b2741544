"""Is a retuned shape's loss its source's? (issue 16; one-off check, no search)

E7 reuses BERT-Base's feed-forward matmul BMM[1,L,768,3072] from the seq-128 database at 0.44 / 0.38
of MetaSchedule at seq 192 / 256 and at 0.90-0.99 elsewhere. MetaSchedule's own programs at 192 and
256 belong to another family than its seq-128 one: all L rows in one inner tile (level 2 of
SSRSRS), the threads splitting the 768 columns only. This applies that program's trace (the donor:
MetaSchedule's best at ``--donor-seq``) with its column and reduction tiles, and the rows whole, at
each length, and times it side by side with the source database's best at 128 (median of 3
interleaved re-measurements).

    python experiments/panel_family.py --db DB128 --donor DB_OF_MS_AT_256 --donor-seq 256 --seqs 128 192 256

``--gets SEQ``: instead, derive the family at SEQ from the source's own sketch through GetS, as a
reuse would (``tuner.reuse.search.ReuseTuner``: the sketch replayed without post-processing, then
MetaSchedule's postprocessors): β's kept tiles, and the rows whole with β's or the donor's column
and reduction tiles, at each unroll value; timed in-process (best of 2 medians of 5 calls).
"""

import argparse
import json

from eto.target import cpu_target, use_threads

use_threads()
from eto.store.database import Database  # noqa: E402
from eto.operators import Operator  # noqa: E402
from tuner.measure.apply import scheduled_module  # noqa: E402
from tuner.measure.measurer import MeasureConfig, Measurer  # noqa: E402


def matmul(seq: int) -> Operator:
    return Operator.create("BMM", B=1, M=seq, N=768, K=3072)


def with_tiles(trace_json, mod, tiles: list[list[int]]):
    """``trace_json`` replayed on ``mod`` with its B, M, N, K tile decisions replaced by ``tiles``."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    insts, decisions = trace_json
    dec = dict((d[0], d[1]) for d in decisions)
    samples = [i for i, ins in enumerate(insts) if ins[0] == "SamplePerfectTile" and i in dec]
    dec.update(zip(samples, tiles))
    sch = Schedule(mod)
    Trace.apply_json_to_schedule([insts, [[i, d] for i, d in sorted(dec.items())]], sch)
    return sch.mod


def through_gets(db: str, seq: int, target) -> None:
    from eto.shapes.instant import _time
    from tuner.measure.apply import build
    from tuner.analysis.features import TileConfig
    from tuner.reuse.search import ReuseTuner, built_candidate

    alpha = matmul(seq)
    tuner = ReuseTuner(alpha.prim_func(), Database(db, readonly=True).best(matmul(128), target).tuning_record,
                       target)
    kept, inputs = tuner.reuse.space.kept_tiles(), alpha.random_inputs(0)
    variants = [("beta's tiles kept", kept)]
    for n in (kept.space[2], (6, 4, 2, 16)):
        for k in (kept.reduction[0], (384, 8)):
            variants.append((f"rows whole, N {n}, K {k}",
                             TileConfig("cpu", (kept.space[0], (1, 1, seq, 1), tuple(n)), (tuple(k),))))
    for name, cfg in variants:
        for u, value in enumerate(tuner.unroll_values):
            cand = tuner._cand(cfg, unroll=u)
            if not built_candidate(tuner, cand):
                print(f"{name}, unroll {value}: not built")
                continue
            t = min(_time(build(cand.sch.mod, target), inputs, alpha) for _ in range(2))
            print(f"seq {seq}  {t * 1e6:8.0f} us  {t * 1e6 / seq:6.2f} us/row  {name}, unroll {value}")


def main() -> None:
    import tvm

    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True, help="the source database (seq 128)")
    ap.add_argument("--donor", help="MetaSchedule's database at --donor-seq")
    ap.add_argument("--donor-seq", type=int, default=256)
    ap.add_argument("--seqs", type=int, nargs="+", default=[128, 192, 256])
    ap.add_argument("--gets", type=int, metavar="SEQ", help="derive the family at SEQ through GetS instead")
    args = ap.parse_args()
    target = cpu_target()
    if args.gets:
        return through_gets(args.db, args.gets, target)
    donor = Database(args.donor, readonly=True).best(matmul(args.donor_seq), target, predicted=False)
    trace = json.loads(open(f"{args.donor}/database_tuning_record.json").read().splitlines()[donor.line])[1][0]
    dec = dict((d[0], d[1]) for d in trace[1])
    tiles = [dec[i] for i, ins in enumerate(trace[0]) if ins[0] == "SamplePerfectTile" and i in dec]
    print(f"donor: MetaSchedule's best at seq {args.donor_seq}, {donor.latency_s * 1e6:.0f} us, tiles {tiles}")
    names, mods = [], []
    source = Database(args.db, readonly=True).best(matmul(128), target, predicted=False)
    names.append((128, "source database's best at 128"))
    mods.append(scheduled_module(source.tuning_record))
    for seq in args.seqs:
        mine = [tiles[0], [1, 1, seq, 1], tiles[2], tiles[3]]
        names.append((seq, f"donor's family, tiles {mine}"))
        mods.append(with_tiles(trace, tvm.IRModule({"main": matmul(seq).prim_func()}), mine))
    with Measurer.local(MeasureConfig()) as m:
        lat = m.remeasure(mods, target, rounds=3)
    for (seq, name), s in zip(names, lat):
        print(f"seq {seq:4d}  {s * 1e6:8.0f} us  {s * 1e6 / seq:6.2f} us/row  {name}")


if __name__ == "__main__":
    main()
