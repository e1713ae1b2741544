"""Serving a stream of sequence lengths with eto's program cache (issue 16's example).

A server sees an attention matmul at whatever length each request has. ``ProgramCache.get``
answers every request at once: the database's program for that length if it has one, else an
instant program derived from the nearest stored length (no measurement, checked against numpy);
lengths without a tuned program are tuned by reuse in a background thread, and the next request
of that length gets the tuned program. Everything lands in the database, so the second pass
(a restarted server) serves tuned programs straight away.

    python examples/serve_stream.py --db /tmp/serve_db                      # tunes seq 128 first if needed
    python examples/serve_stream.py --db /tmp/serve_db --lengths 40,200,40,96,200 --trials 32
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="database directory (created and tuned at --known if empty)")
    ap.add_argument("--op", default="BMM(B=12,M=128,N=128,K=64)", help="the operator at its known length")
    ap.add_argument("--params", default="M,N", help="the parameters that follow the sequence length")
    ap.add_argument("--lengths", default="40,96,40,200,96,40", help="the request stream")
    ap.add_argument("--trials", type=int, default=32, help="backend trials for the known length, if not stored")
    ap.add_argument("--search", default="evolutionary", choices=("evolutionary", "light"))
    args = ap.parse_args(argv)

    from eto.cli import main as eto
    from eto.store.database import Database
    from eto.operators import Operator
    from eto.shapes.serve import ProgramCache
    from tuner.measure.apply import run_once

    known = Operator.parse(args.op)
    params = [p.strip() for p in args.params.split(",") if p.strip()]
    lengths = [int(v) for v in args.lengths.split(",")]
    if Database(args.db).best(known, "cpu") is None:  # the known length, tuned once by MetaSchedule
        print(f"tuning {known.name} with {args.trials} trials first", flush=True)
        code = eto(["tune", "--op", known.key, "--db", args.db, "--method", "ansor", "--trials", str(args.trials),
                    "--search", args.search, "--seed", "0", "--quiet"])
        if code:
            return code

    def serve(cache: ProgramCache, label: str) -> None:
        print(f"\n{label}\n{'length':>6}  {'served':<8} {'from':<22} {'get ms':>7} {'run us':>8}")
        for n in lengths:
            op = known.replace(**{p: n for p in params})
            t0 = time.perf_counter()
            served = cache.get(op)
            get_ms = (time.perf_counter() - t0) * 1e3
            x = op.random_inputs(0)
            np.testing.assert_allclose(run_once(served.function, x, op.output_shape), op.reference(*x),
                                       rtol=1e-3, atol=1e-3)
            p = served.program
            print(f"{n:>6}  {'tuned' if served.tuned else 'instant':<8} {p.source or p.op.key:<22.22} "
                  f"{get_ms:>7.1f} {p.latency_s * 1e6:>8.1f}", flush=True)

    with ProgramCache(Database(args.db), "cpu", log=lambda m: print(f"  [background] {m}", flush=True)) as cache:
        serve(cache, "first pass: every new length answered at once, tuned in the background")
        cache.wait()
    serve(ProgramCache(Database(args.db), "cpu", tune=False), "a restarted server: the database's tuned programs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
