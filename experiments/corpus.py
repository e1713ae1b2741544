"""The corpus check: every corpus architecture (:mod:`eto.models.corpus`) through both importers and every
layout, imported, planned, built and checked against PyTorch.

    python -m experiments.corpus [--scale ci|small] [--models a,b] [--importers onnx,pt2]
                                 [--layouts auto,NHWC,NHWC-winograd,NCHW] [--db DB] [--out FILE]

For each model and importer (ONNX: ``torch.onnx.export``, TorchScript exporter, opset 17, or the
``torch.export``-based one at opset 18 where the first lacks an operator; ``pt2``:
``torch.export``), in a process of its own (a crash or a segfault inside TVM is a row, not the end of
the run): the module is read as ``eto tune --model`` reads it; for each layout, the fused tasks are
extracted, the plan ``eto tune`` would tune is made (default options), and the model is built with
the database's programs (``--db``; TVM's default schedules elsewhere) and run on the example input;
its output is compared with PyTorch eager's. A layout that compiles to the same module as one before
it (a model without convolutions; ``auto`` choosing no Winograd or all of it) is not built twice: its
row says which it equals. The table: model, importer, layout, tasks, planned operators, the layout's
conversion (convolutions channels last of all, transposes left, Winograd convolutions), the largest
error relative to the output's scale, seconds, and the error (first line) where one was raised.
Results go to ``experiments/results/corpus_<scale>_<cpu>.json`` (``--out``), rewritten after each
model; the rows also go to ``experiments/work/corpus_<scale>_<cpu>.jsonl`` as they finish, so an
interrupted run goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
LAYOUTS = ("auto", "NHWC", "NHWC-winograd", "NCHW")
IMPORTERS = ("onnx", "pt2")
#: The largest error accepted, relative to the largest magnitude of PyTorch's output (fp32; Winograd's
#: F(4, 3) transforms round more than a direct convolution).
TOLERANCE = 2e-3


def _numpy(value) -> list:
    import numpy as np

    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _numpy(v)]
    return [np.asarray(value.detach().numpy() if hasattr(value, "detach") else value)]


def _import(module, inputs, importer: str, name: str):
    from eto.models.corpus import onnx_bytes
    from eto.models.load import onnx_to_relax, torch_to_relax

    if importer == "pt2":
        return torch_to_relax(module, inputs, name=name)
    return onnx_to_relax(onnx_bytes(module, inputs), name=name)


def check_model(name: str, importer: str, layouts: list[str], scale: str, db_path: str | None) -> list[dict]:
    """The rows of one model through one importer, every layout of ``layouts``."""
    import numpy as np
    import torch
    import tvm_ffi

    from eto.models.build import build_model
    from eto.models.corpus import corpus
    from eto.models.layout import with_layout
    from eto.models.tasks import model_tasks
    from eto.options import TuneOptions
    from eto.planning.budget import plan_run
    from eto.store.database import Database
    from eto.target import parse_target

    (entry,) = corpus(scale, [name])
    target = parse_target("cpu")
    db = Database(db_path, readonly=True) if db_path else None
    base = {"model": name, "family": entry.family, "importer": importer, "scale": scale}
    try:
        module, inputs = entry.make(scale)
        with torch.no_grad():
            want = _numpy(module(*inputs))
            other = _numpy(module(*[torch.randn_like(i) if i.dtype.is_floating_point else (i + 1) % 1000
                                    for i in inputs]))
    except Exception as exc:  # noqa: BLE001 -- the row says what failed
        return [{**base, "layout": layout, "stage": "make", "error": _line(exc)} for layout in layouts]
    ref_scale = max(float(np.abs(w).max()) for w in want) or 1.0
    base["input_dependence"] = max(float(np.abs(w - o).max()) for w, o in zip(want, other)) / ref_scale
    if base["input_dependence"] < 1e-3:  # a build that computed nothing would match: no check at all
        return [{**base, "layout": layout, "stage": "make", "ok": False,
                 "error": "PyTorch's output does not depend on the input: the comparison would prove nothing"}
                for layout in layouts]
    start = time.perf_counter()
    try:
        relax_model = _import(module, inputs, importer, name)
    except Exception as exc:  # noqa: BLE001 -- the row says what failed
        return [{**base, "layout": layout, "stage": "import", "error": _line(exc)} for layout in layouts]
    imported_s = time.perf_counter() - start
    rows, seen = [], {}
    for layout in layouts:
        row = {**base, "layout": layout, "import_s": round(imported_s, 1)}
        rows.append(row)
        stage, start = "layout", time.perf_counter()
        try:
            model = with_layout(relax_model, layout)
            tasks = model_tasks(model, target)
            choice = tasks.layout
            conv = choice.conversion
            row.update(tasks=len(tasks.tasks), tunable=len(tasks.catalogue) + len(tasks.backend_only),
                       left_alone=len(tasks.left_alone), resolved=choice.resolved,
                       convolutions=conv.convolutions if conv else None, channels_last=conv.converted if conv else 0,
                       transposes=conv.transposes if conv else None, winograd=len(choice.winograd),
                       left_as_written=conv.left_as_written if conv else "")
            stage = "plan"
            planned = plan_run(tasks.opset, TuneOptions.of(), database=db, target=target)
            row.update(planned=len(tasks.opset), plan_estimate_s=round(planned.seconds, 1))
            key = tvm_ffi.structural_hash(tasks.bound)
            if key in seen:
                same = seen[key]
                row.update(same_as=same["layout"], max_rel_error=same.get("max_rel_error"), ok=same.get("ok"),
                           error=same.get("error", ""))
                continue
            seen[key] = row
            stage = "build"
            built = build_model(model, db, target, tasks=tasks)
            stage = "run"
            got = built.run([i.numpy() for i in inputs])
            scale_ = ref_scale
            shapes_match = len(got) == len(want) and all(g.shape == w.shape for g, w in zip(got, want))
            err = max(float(np.abs(g - w).max()) for g, w in zip(got, want)) / scale_ if shapes_match else None
            row.update(max_rel_error=err, ok=err is not None and err <= TOLERANCE, applied=len(built.applied),
                       error="" if shapes_match else f"output shapes {[g.shape for g in got]} != {[w.shape for w in want]}")
        except Exception as exc:  # noqa: BLE001 -- the row says what failed and where
            row.update(ok=False, stage=stage, error=_line(exc))
            if os.environ.get("ETO_CORPUS_TRACEBACK"):
                traceback.print_exc()
        row["seconds"] = round(time.perf_counter() - start, 1)
    return rows


def _line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]


def _rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return list({(r["model"], r["importer"], r["layout"]): r for r in rows}.values())  # a row checked twice: the last


def write_result(out: str, rows: list[dict], *, scale: str, layouts: list[str], importers: list[str],
                 wall_s: float) -> None:
    """The canonical result file: the environment, the rows so far and their summary (``wall_s``: the
    check processes' seconds, added up over every run that made the rows)."""
    from experiments._env import environment

    failed = [r for r in rows if not r.get("ok")]
    result = {"experiment": "corpus", "environment": environment(), "scale": scale, "layouts": layouts,
              "importers": importers, "wall_s": round(wall_s), "summary": {
                  "models": len({r["model"] for r in rows}), "rows": len(rows), "ok": len(rows) - len(failed),
                  "failed": len(failed), "internal_errors": sum("InternalError" in r.get("error", "") for r in failed)},
              "rows": rows}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    head = ("model", "importer", "layout", "tasks", "conv. channels last", "transposes", "Winograd", "rel. error",
            "ok", "s", "error / note")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        err = r.get("max_rel_error")
        conv = "-" if r.get("convolutions") in (None, 0) else f"{r.get('channels_last', 0)}/{r['convolutions']}"
        note = r.get("error") or (f"same module as {r['same_as']}" if r.get("same_as") else "") or \
            r.get("left_as_written", "")
        lines.append("| " + " | ".join(str(v) for v in (
            r["model"], r["importer"], r["layout"], r.get("tasks", "-"), conv, r.get("transposes", "-"),
            r.get("winograd", "-"), "-" if err is None else f"{err:.1e}", "yes" if r.get("ok") else "NO",
            r.get("seconds", "-"), note.replace("|", "/"))) + " |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    models = sorted({r["model"] for r in rows})
    failed = [r for r in rows if not r.get("ok")]
    internal = [r for r in failed if "InternalError" in r.get("error", "")]
    return (f"{len(models)} models, {len(rows)} rows (model x importer x layout): {len(rows) - len(failed)} ok, "
            f"{len(failed)} failed ({len(internal)} internal errors)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", choices=("ci", "small"), default="small")
    p.add_argument("--models", help="comma-separated corpus model names (default: the scale's)")
    p.add_argument("--importers", default=",".join(IMPORTERS))
    p.add_argument("--layouts", default=",".join(LAYOUTS[:3]))
    p.add_argument("--db", help="a database whose programs the builds use (default: TVM's default schedules)")
    p.add_argument("--out", help="the result file (default experiments/results/corpus_<scale>_<cpu>.json)")
    p.add_argument("--redo", action="store_true", help="check the models again even where the log has their rows "
                   "(the new rows replace the old)")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "IMPORTER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    layouts = args.layouts.split(",")
    if args.one:
        print(json.dumps(check_model(args.one[0], args.one[1], layouts, args.scale, args.db)))
        return 0
    from eto.models.corpus import corpus
    from eto.target import cpu_info

    tag = f"corpus_{args.scale}_{cpu_info().mcpu}"
    out = args.out or os.path.join(HERE, "results", f"{tag}.json")
    log = os.path.join(HERE, "work", f"{tag}.jsonl")  # one row per line as it finishes: a rerun goes on from it
    os.makedirs(os.path.dirname(log), exist_ok=True)
    importers = args.importers.split(",")
    rows = _rows(log)
    done, started = {(r["model"], r["importer"]) for r in rows}, time.perf_counter()
    wall = sum({(r["model"], r["importer"]): r.get("process_s") or 0 for r in rows}.values())
    for entry in corpus(args.scale, args.models.split(",") if args.models else None):
        for importer in importers:
            done |= {(r["model"], r["importer"]) for r in _rows(log)}  # another run may share the log
            if (entry.name, importer) in done and not args.redo:
                continue
            rows = _rows(log)
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "experiments.corpus", "--one", entry.name, importer, "--scale", args.scale,
                   "--layouts", args.layouts, *(["--db", args.db] if args.db else [])]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(HERE))
            try:
                new = json.loads(proc.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                new = [{"model": entry.name, "family": entry.family, "importer": importer, "layout": layout,
                        "scale": args.scale, "ok": False, "error": f"the check's process exited {proc.returncode}"}
                       for layout in layouts]
            new = [{**r, "process_s": round(time.perf_counter() - t0)} for r in new]
            with open(log, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in new)
            rows += new
            write_result(out, rows, scale=args.scale, layouts=layouts, importers=importers,
                         wall_s=wall + time.perf_counter() - started)
            print(f"{entry.name} ({importer}): {sum(bool(r.get('ok')) for r in new)}/{len(new)} ok, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    write_result(out, rows, scale=args.scale, layouts=layouts, importers=importers,
                 wall_s=wall + time.perf_counter() - started)
    print(table(rows))
    print(summary(rows) + f"; this run {time.perf_counter() - started:.0f} s")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
