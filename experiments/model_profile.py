"""E11 (issue 68): where a built model's latency goes, per task, against ONNX Runtime and the roofline.

For a model built in code (:mod:`eto.models.examples`, random weights, exported to ONNX), each
database given (``--db LABEL=LAYOUT:DIR``: a database ``eto tune --model --layout LAYOUT`` wrote) is
profiled with :func:`eto.models.profile.profile_model`: the model built with its programs, each task's
calls timed within whole-model runs, interleaved with ONNX Runtime's profiled runs of the same file,
each task against the measured fp32 peak of the cores in use and against the ONNX Runtime nodes of the
same layers. One result file holds every database's profile, so a change is judged by the rows
before and after it.

    python -m experiments.model_profile --model resnet50 --db NCHW=NCHW:DB1 --db NHWC=NHWC:DB2 \\
        --out experiments/results/model_profile_resnet50_N64.json
"""

from __future__ import annotations

import argparse
import os
import tempfile

from experiments._env import environment
from experiments._experiment import write_result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model of eto.models.examples (resnet50, resnet18, ...)")
    ap.add_argument("--db", action="append", required=True, metavar="LABEL=LAYOUT:DIR",
                    help="a database and the layout it was tuned in (repeatable)")
    ap.add_argument("--eto-from", choices=("onnx", "pt2"), default="onnx",
                    help="the file eto's build reads (the one its databases were tuned from); ONNX Runtime runs the "
                         "ONNX export either way")
    ap.add_argument("--scalar-erf", action="append", default=[], metavar="LABEL",
                    help="profile the database of this label with erf as the C library's scalar erff, the code "
                         "before eto.models.fast_math.vector_math, and sigmoid as scalar expf (repeatable; its GELU and "
                         "sigmoid tasks are different functions)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--note", default="", help="how the databases were made (trials, command)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from eto.models.examples import export
    from eto.models.layout import with_layout
    from eto.models.load import load_relax
    from eto.models import tasks
    from eto.models.profile import profile_model

    profiles, vector_math = {}, tasks.vector_math
    with tempfile.TemporaryDirectory(prefix="eto-e11-") as tmp:
        onnx = export(args.model, os.path.join(tmp, f"{args.model}.onnx"), onnx=True)
        source = onnx if args.eto_from == "onnx" else export(args.model, os.path.join(tmp, f"{args.model}.pt2"))
        try:
            for spec in args.db:
                label, _, rest = spec.partition("=")
                layout, _, path = rest.partition(":")
                tasks.vector_math = (lambda target: []) if label in args.scalar_erf else vector_math
                report = profile_model(with_layout(load_relax(source), layout), path, onnx=onnx, rounds=args.rounds)
                print(report.table(), flush=True)
                profiles[label] = {"layout": layout, "database": os.path.basename(os.path.normpath(path)),
                                   **report.to_json()}
        finally:
            tasks.vector_math = vector_math
    result = {"experiment": "model_profile", "model": args.model, "note": args.note,
              "command": "python -m experiments.model_profile " + " ".join(
                  [f"--model {args.model}", *(f"--db {d}" for d in args.db),
                   *(f"--scalar-erf {x}" for x in args.scalar_erf), f"--eto-from {args.eto_from}",
                   f"--rounds {args.rounds}"]),
              "environment": environment(), "profiles": profiles}
    write_result(result, args.out)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
