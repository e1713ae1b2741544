"""Where should a new shape's growth go in an instant program? (issue 16; one-off check, no search)

For each ``ALPHA<-BETA`` pair, β's best program in ``DB`` is kept on α's loops two ways
(:meth:`tuner.reuse.space.ReuseSpace.kept_tiles`): the growth in the outermost factor (``kept``, growth
"outer") or, where the loop has room, in level 1 of MetaSchedule's parallel loop (``level1``,
growth "parallel"); each is built and timed in this process (best of 3 medians of 5 calls), twice,
interleaved. Prints one block per pair.

    python experiments/instant_growth.py DB 'BMM(B=1,M=384,N=768,K=768)<-BMM(B=1,M=128,N=768,K=768)' ...
"""

import sys

from eto.target import cpu_target, use_threads

use_threads()
from eto.store.database import Database  # noqa: E402
from eto.shapes.instant import _time  # noqa: E402
from eto.operators import Operator  # noqa: E402
from tuner.measure.apply import build  # noqa: E402
from tuner.reuse.search import ReuseTuner, built_candidate  # noqa: E402


def main() -> None:
    db, target = Database(sys.argv[1], readonly=True), cpu_target()
    for pair in sys.argv[2:]:
        a, b = pair.split("<-")
        alpha, beta = Operator.parse(a), Operator.parse(b)
        src = db.best(beta, target, predicted=False)
        tuner = ReuseTuner(alpha.prim_func(), src.tuning_record, target)
        inputs = alpha.random_inputs(0)
        out = []
        for name, growth in (("kept", "outer"), ("level1", "parallel")) * 2:
            cfg = tuner.reuse.space.kept_tiles(growth=growth)
            cand = tuner._cand(cfg)
            if not built_candidate(tuner, cand):
                out.append(f"{name}: not built")
                continue
            lib = build(cand.sch.mod, target)
            out.append(f"{name} {cfg.space} {min(_time(lib, inputs, alpha) for _ in range(3)) * 1e6:.0f} us")
        print(f"{alpha.name} <- {beta.name}: beta {tuner.beta_cfg.space} recorded {src.latency_s * 1e6:.0f} us, "
              f"flop ratio {alpha.flops / beta.flops:.2f}", *out, sep="\n   ", flush=True)


if __name__ == "__main__":
    main()
