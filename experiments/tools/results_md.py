"""``experiments/RESULTS.md``: the canonical result of every experiment, written from its JSON.

Which files are canonical is the table "Which script is which experiment" at the top of
``experiments/README.md`` (its last column); this reads that table, then each named file in
``experiments/results/``, and writes one section per experiment row: what it measures, the command,
the machine and scale the JSON records, and the headline numbers. Nothing is measured or imported
from TVM: a second or less.

    python -m experiments.tools.results_md            # writes experiments/RESULTS.md
    python -m experiments.tools.results_md --check    # exit 1 when experiments/RESULTS.md is stale

``tests/test_results_md.py`` runs the check, so a changed result file or table without a regenerated
``RESULTS.md`` fails the suite. Superseded runs stay in ``results/`` while a page cites them; they are
not listed here.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent.parent          # experiments/
README = HERE / "README.md"
RESULTS = HERE / "results"
OUT = HERE / "RESULTS.md"
TABLE_HEADING = "## Which script is which experiment"
COMMAND = "python -m experiments.tools.results_md"


class ResultsError(Exception):
    """The table or a canonical file cannot be read."""


# ---- the table --------------------------------------------------------------------------------------

def experiment_rows(readme: str) -> list[dict]:
    """The rows of the README's experiment table: id, what it measures, script, command and files."""
    if TABLE_HEADING not in readme:
        raise ResultsError(f"{README.name}: no section {TABLE_HEADING!r}")
    section = readme.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"E\d+b?", cells[0]):
            continue
        files = re.findall(r"`([^`]+\.json)`", cells[4])
        if not files:
            raise ResultsError(f"{README.name}: row {cells[0]} names no result file")
        rows.append({"id": cells[0], "what": cells[1], "script": cells[2], "command": cells[3], "files": files})
    if not rows:
        raise ResultsError(f"{README.name}: the experiment table has no rows")
    return rows


# ---- number formatting ------------------------------------------------------------------------------

def x(v: float | None, digits: int = 2) -> str:
    """A ratio as ``1.23x``; ``-`` when absent."""
    return "-" if v is None else f"{v:.{digits}f}x"


def r(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def pct(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{100 * v:.{digits}f}%"


def s(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} s"


def spread(agg: dict | None, fmt: Callable = x) -> str:
    """``median (min-max)`` of an aggregate, or the one value where n = 1."""
    if not agg:
        return "-"
    if agg.get("n", 1) == 1 or agg.get("min") == agg.get("max"):
        return fmt(agg["median"])
    return f"{fmt(agg['median'])} ({fmt(agg['min'])}-{fmt(agg['max'])})"


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


# ---- machine and scale ------------------------------------------------------------------------------

def _target(text: str | None) -> dict:
    try:
        return json.loads(text) if text and text.startswith("{") else {}
    except json.JSONDecodeError:
        return {}


def machine(d: dict) -> str:
    """The machine a result records: its environment, the selector's machine, or the target alone."""
    env = d.get("environment")
    if env:
        where = env.get("gpu") or f"{env.get('cpu')} (`{env.get('mcpu')}`), {env.get('cores')} cores"
        return f"{where}, TVM_NUM_THREADS={env.get('TVM_NUM_THREADS')}, tvm {env.get('tvm')}"
    if d.get("machine"):
        m = d["machine"]
        return f"{m.get('cpu')}, {m.get('cores')} cores (TVM-free)"
    target = _target(d.get("target"))
    if not target and d.get("sizes"):
        target = _target(d["sizes"][0].get("bench", {}).get("target"))
    if target:
        return f"CPU `{target.get('mcpu')}`, {target.get('num-cores')} threads (target only)"
    return "not recorded in this file (see its inputs)"


def scale(d: dict) -> str:
    parts = []
    for key, label in (("scale", ""), ("opset", "set"), ("model", "model"), ("trials_N", "N ="),
                       ("trials", "trials"), ("budget_per_operator", "budget per operator")):
        value = d.get(key)
        if value is not None:
            text = f"{value:g}" if isinstance(value, float) else f"`{value}`" if isinstance(value, str) else str(value)
            parts.append(f"{label} {text}".strip())
    if d.get("seeds"):
        parts.append(f"{len(d['seeds'])} seed{'s' if len(d['seeds']) > 1 else ''}")
    if d.get("control_trials"):
        parts.append(f"control at {d['control_trials']} trials")
    if isinstance(d.get("inputs"), list) and all(isinstance(i, str) for i in d["inputs"]):
        parts.append("over the results " + ", ".join(f"`{i}`" for i in d["inputs"]))
    if d.get("vary"):
        parts.append(f"vary {d['vary']}")
    summary = d.get("summary") if isinstance(d.get("summary"), dict) else {}
    if summary.get("trials_per_task"):
        parts.append(f"{summary['trials_per_task']} trials per task")
    return ", ".join(parts) or "-"


# ---- headline numbers, one function per kind of result ----------------------------------------------

def reuse_opportunity(d: dict) -> list[str]:
    sm = d["summary"]
    rows = [["good program of α in the window (Φ non-empty)"] + [pct(sm["share_phi_nonempty"][k]) for k in "BTM"],
            ["α's best program in the window"] + [pct(sm["share_alpha_best_in_window"][k]) for k in "BTM"],
            ["the paper (P100, Ansor, 1,000 trials)"] + [pct(sm["paper_share_phi_nonempty"][k]) for k in "BTM"]]
    return [f"{sm['pairs']} ordered reuse pairs.", ""] + table(["share of pairs", "B", "T", "M"], rows)


def reuse_pairs(d: dict) -> list[str]:
    out = []
    for strategy, by_type in d["summary"].items():
        rows = []
        for kind, v in sorted(by_type.items(), key=lambda kv: kv[0] != "all"):
            rows.append([kind, str(v["pairs"]), r(v["median_candidates"], 0), r(v["median_throughput"]),
                         x(v["median_speedup"], 1), x(v["median_speedup_vs_total"], 1)])
        out += [f"Strategy `{strategy}`, medians per operator type:", ""]
        out += table(["type", "pairs", "candidates", "throughput vs MetaSchedule",
                      "speed-up vs its time to best", "vs its whole run"], rows)
        a = by_type["all"]
        out += ["", f"Trial estimator: actual / estimated candidates {r(a['actual_over_estimate_mean'])} (mean), "
                    f"seconds {r(a.get('actual_over_estimated_seconds_mean'))}.", ""]
    return out[:-1]


def set_bench(d: dict) -> list[str]:
    a = d["aggregate"]
    rows = [["less tuning time than MetaSchedule, total", spread(a["speedup_total"])],
            ["... to MetaSchedule's best", spread(a["speedup_best"])],
            ["weighted throughput vs MetaSchedule", spread(a["throughput"], r)],
            ["eto's seconds", spread(a["seconds_eto_total"], s)],
            ["MetaSchedule's seconds", spread(a["seconds_metaschedule_total"], s)]]
    est = a.get("estimator") or {}
    if est.get("reused"):
        rows.append([f"plan against actual ({est['reused']} reuses): candidates, seconds",
                     f"{x(est['mean_actual_over_estimate'])}, {x(est['mean_actual_over_estimated_seconds'])}"])
    c = d.get("control")
    if c:
        rows.append([f"control, MetaSchedule twice at {c['trials']} trials: time, latency",
                     f"{x(c['time_ratio_a_over_b'])}, {x(c['latency_ratio_a_over_b'])}"])
    seeds = len(d.get("seeds") or [])
    out = table([f"median (min-max) over {seeds} seed{'s' if seeds != 1 else ''}", "eto"], rows)
    if a.get("variants"):
        vrows = [["eto", x(d["speedup"]["total"]), r(d["throughput_eto_vs_metaschedule"]), "1.00", "1.00"]]
        for name, v in a["variants"].items():
            vrows.append([name, spread(v["speedup_total"]), spread(v["throughput"], r),
                          spread(v["vs_plain_eto_throughput"], r), spread(v["vs_plain_eto_seconds"], r)])
        out += ["", "Variants, each against MetaSchedule and against plain eto in the same runs:", ""]
        out += table(["arm", "less time than MetaSchedule", "throughput vs MetaSchedule",
                      "throughput vs eto", "seconds vs eto"], vrows)
    return out


def estimate_accuracy(d: dict) -> list[str]:
    rows = []
    for name, v in d["summary"].items():
        c, t = v["candidates"], v["seconds"]
        rows.append([name, str(c["n"]), f"{r(c['median'])} ({r(c['min'])}-{r(c['max'])})", pct(c["within_0.67_1.5"]),
                     f"{r(t['median'])} ({r(t['min'])}-{r(t['max'])})", pct(t["within_0.67_1.5"])])
    return table(["inputs", "reuses", "candidates: actual / estimate", "within 0.67-1.5",
                  "seconds: actual / estimate", "within 0.67-1.5"], rows)


def selector_scale(d: dict) -> list[str]:
    rows = [[v["bridges"], f"{v['bridge_operators']:,}", f"{v['arcs']:,}", f"{v['seconds_total']:.1f} s",
             v["solver"] + (" (optimal)" if v["optimal"] else ""), r(v["cost_ratio_vs_backend"], 3),
             str(v["backend_tuned"]), str(v["bridges_used"])] for v in d["runs"]]
    head = f"{d['operator_set']['operators']} conv2d operators; plan cost against tuning all by the backend:"
    return [head, ""] + table(["bridges", "bridge operators", "arcs", "planning", "solver",
                               "plan cost / all backend", "backend-tuned", "bridges used"], rows)


def selector_gap(d: dict) -> list[str]:
    rows = [[fam, str(v["instances"]), str(v["proven_optimal"]), pct(v["mean_gap"], 1), pct(v["max_gap"], 1),
             str(v["approx_equals_opt"]), f"{v['approx_seconds_mean']:.2f} s", f"{v['exact_seconds_mean']:.2f} s"]
            for fam, v in d["summary"].items()]
    return table(["instances", "n", "proven optimal", "heuristic's mean gap", "max gap", "heuristic = optimum",
                  "heuristic (mean)", "exact MIP (mean)"], rows)


def retune_bench(d: dict) -> list[str]:
    m = d["median"]
    out = [f"Medians over the sizes: reuse tuning {x(m['time_ratio_metaschedule_over_eto'], 1)} less time than "
           f"MetaSchedule from scratch at {r(m['throughput_eto_vs_metaschedule'])} of its weighted throughput; "
           f"instant programs {x(m['time_ratio_metaschedule_over_instant'], 0)} at "
           f"{r(m['throughput_instant_vs_metaschedule'])}.", ""]
    cold = m.get("cold")  # files since eto's retune timed as --timing says and re-measured both ways
    if cold:
        out[0] = (f"eto's candidates timed {d.get('timing', 'hot')}. " + out[0][:-1] + " (re-measured hot); "
                  f"re-measured cold, reuse at {r(cold['throughput_eto_vs_metaschedule'])}, instant programs at "
                  f"{r(cold['throughput_instant_vs_metaschedule'])}. Geometric means over operators, hot / cold: reuse "
                  f"{r(m['geomean_eto_vs_metaschedule'])} / {r(cold['geomean_eto_vs_metaschedule'])}, instant "
                  f"{r(m['geomean_instant_vs_metaschedule'])} / {r(cold['geomean_instant_vs_metaschedule'])}.")
    best = m.get("time_ratio_metaschedule_best_over_eto") is not None  # files since MetaSchedule's time to best
    if best:
        out[0] = out[0].replace(" less time than MetaSchedule from scratch",
                                f" less time than MetaSchedule from scratch ({x(m['time_ratio_metaschedule_best_over_eto'], 1)}"
                                " less than its time to its best)")
    rows = [[str(v["value"]), s(v["seconds"]["eto"]), s(v["seconds"]["metaschedule"]),
             x(v["time_ratio_metaschedule_over_eto"], 1)]
            + ([x(v["time_ratio_metaschedule_best_over_eto"], 1)] if best else [])
            + [r(v["throughput_eto_vs_metaschedule"]),
               x(v["time_ratio_metaschedule_over_instant"], 0), r(v["throughput_instant_vs_metaschedule"])]
            + ([r(v["cold"]["throughput_eto_vs_metaschedule"]), r(v["cold"]["throughput_instant_vs_metaschedule"])]
               if cold else []) for v in d["shapes"]]
    return out + table(["size", "eto", "MetaSchedule", "less time"] + (["vs its time to best"] if best else [])
                       + ["throughput vs MetaSchedule", "instant: less time", "instant: throughput"]
                       + (["cold: eto", "cold: instant"] if cold else []), rows)


def model_retune(d: dict) -> list[str]:
    rows = []
    for size in d["sizes"]:
        v, lat = size["summary"], size["summary"]["latency_ms"]
        ms = "-" if v["metaschedule_s"] is None else (
            f"{s(v['metaschedule_s'])}, {lat['metaschedule']:.2f} ms: eto {x(v['time_speedup'], 1)} less time "
            f"at {x(v['retuned_vs_metaschedule'])} its speed")
        rows.append([str(v["size"]), f"{v['instant_s']:.1f} s", f"{v['retune_s']:.1f} s",
                     f"{lat['instant']:.2f} / {lat['eto']:.2f} ms", ms,
                     f"{lat['pytorch']:.2f} ms (eto {x(v['retuned_vs_pytorch'])})"])
    return [f"Model `{d['model']}`, dimension `{d['dim']}`, from a database tuned at one size:", ""] + table(
        ["size", "instant programs", "then retune", "instant / retuned model", "MetaSchedule from scratch",
         "PyTorch eager"], rows)


def symbolic_bench(d: dict) -> list[str]:
    rows = []
    for op in d["ops"]:
        o = op["dispatch_over"]
        buckets = "; ".join(f"{b['from']}-{b['to'] or ''}: {b['candidate']}" for b in op["buckets"])
        rows.append([f"`{op['op']}`", buckets] + [x(o[k]["median"]) for k in ("per_size", "padded", "tuned", "tvm")])
    return ["One dispatch function's throughput over other ways of serving every size (medians over sizes):",
            ""] + table(["operator", "buckets", "per-size instant", "next stored size, padded",
                         "tuned at that size", "TVM, no schedule"], rows)


def vendor_roofline(d: dict) -> list[str]:
    sm = d["summary"]
    lat, vs, roof = sm["weighted_latency_s"], sm["throughput_vs_pytorch"], sm["median_share_of_roofline"]
    rows = [[k, f"{1e3 * lat[k]:.1f} ms", x(vs.get(k)) if k != "pytorch" else "1.00x", pct(roof[k])]
            for k in lat]
    return [f"Peak {d['peak_gflops']:.0f} GFLOP/s, {d['bandwidth_gbs']:.0f} GB/s ({d['threads']} threads).",
            ""] + table(["programs", "weighted latency", "throughput vs PyTorch", "median share of roofline"], rows)


def model_bench(d: dict) -> list[str]:
    sm = d["summary"]
    lat = sm["latency_ms"]
    vs = {"metaschedule": sm.get("eto_vs_metaschedule_throughput"), "pytorch": sm.get("eto_vs_pytorch_throughput"),
          "onnxruntime": sm.get("eto_vs_onnxruntime_throughput")}
    rows = [[k, f"{v:,.2f} ms", x(vs.get(k)) if k in vs else "-"] for k, v in lat.items()]
    plan = ", ".join(f"{k} {n}" for k, n in (sm.get("eto_plan") or {}).items())
    return [f"Tuning: eto {s(sm['eto_tune_wall_s'])} (wall, `eto tune --model`) against MetaSchedule's "
            f"{s(sm['metaschedule_s'])}: **{x(sm['tuning_speedup_wall'])}** less time; eto's plan: {plan}, "
            f"{sm.get('eto_bridges', 0)} bridges; its programs cover {pct(sm['eto_applied_flops_share'])} of the "
            f"tunable FLOPs.", ""] + table(["built model", "latency (median)", "eto's speed against it"], rows)


def layout_probe(d: dict) -> list[str]:
    layouts = [k for k in ("NCHW", "NHWC") if all(k in r["gflops"] for r in d["rows"])]
    both = len(layouts) == 2
    rows = [[f"`{r['conv']}`", f"{r['gflop']:.3f}", *(f"{r['gflops'][k]:.0f}" for k in (*layouts, "ort", "pytorch")),
             *([x(r["gflops"]["NHWC"] / r["gflops"]["NCHW"])] if both else []),
             x(r["gflops"][layouts[-1]] / r["gflops"]["ort"])] for r in d["rows"]]
    weights = "packed as eto packs a model's" if d.get("packed_weights") else "read as stored"
    return [f"One convolution tuned by MetaSchedule ({d['trials']} trials) in {' and in '.join(layouts)}, weights "
            f"{weights}, timed side by side with ONNX Runtime's and PyTorch's kernels (GFLOP/s):", ""] + table(
        ["N,CI,H,W,CO,K,stride,pad", "GFLOP", *layouts, "ONNX Runtime", "PyTorch", *(["NHWC/NCHW"] if both else []),
         f"{layouts[-1]}/ONNX Runtime"], rows)


def model_profile(d: dict) -> list[str]:
    lines = [d["note"], ""] if d.get("note") else []
    for label, p in d["profiles"].items():
        ort = p.get("ort_model_seconds")
        vs = f"; ONNX Runtime {1e3 * ort:.2f} ms, **eto/ORT {p['model_seconds'] / ort:.2f}x**" if ort else ""
        lines += [f"`{label}` ({p['layout']}): eto {1e3 * p['model_seconds']:.2f} ms per inference{vs}; fp32 peak "
                  f"{p['peak']['flops'] / 1e9:.0f} GFLOP/s ({p['peak']['how']}). The five tasks with the largest "
                  "share (eto/ORT: eto's time over ONNX Runtime's for the same layers, above 1: ONNX Runtime "
                  "faster):", ""]
        rows = [[f"`{t['task']}`", str(t["calls"]), f"{1e3 * t['seconds']:.2f}", pct(t["share"]),
                 "-" if t["gflops"] is None else f"{t['gflops']:.0f}",
                 "-" if t["peak_fraction"] is None else pct(t["peak_fraction"]),
                 "-" if t.get("ort_seconds") is None else f"{1e3 * t['ort_seconds']:.2f}",
                 "-" if t.get("ratio") is None else x(t["ratio"])] for t in p["rows"][:5]]
        head = ["task", "calls", "ms", "share", "GFLOP/s", "of peak", "ORT ms", "eto/ORT"]
        if p.get("in_model"):  # each task's time alone: the latency the database recorded while tuning it
            rows = [r + ["-" if t.get("in_model") is None else f"{1e3 * t['alone_seconds']:.2f}",
                         "-" if t.get("in_model") is None else x(t["in_model"])] for r, t in zip(rows, p["rows"])]
            head += ["alone ms", "in model / alone"]
        lines += table(head, rows) + [""]
        if p.get("in_model"):
            lines += [f"The tasks running a tuned program took {x(p['in_model'])} their time alone in the model.", ""]
    return lines


def _round_ratios(other: list[float] | None, eto: list[float] | None, rounds: int) -> list[float]:
    """``other``'s median over eto's, per timing round (each round times every build side by side, so a
    round's ratio is free of the machine's drift between rounds); [] if the samples do not split."""
    if not other or not eto or len(other) % rounds or len(eto) % rounds:
        return []
    a, b = len(eto) // rounds, len(other) // rounds
    return [statistics.median(other[i * b:(i + 1) * b]) / statistics.median(eto[i * a:(i + 1) * a])
            for i in range(rounds)]


def _paired_rounds(d: dict) -> str:
    """MetaSchedule's best build and ONNX Runtime over eto's last, per timing round: the ranges, or ''."""
    sm, samples, rounds = d["summary"], d.get("samples_ms") or {}, d.get("rounds")
    if not (sm.get("points") and rounds and d.get("eto")):
        return ""
    eto = samples.get(f"eto@{d['eto'][-1]['budget_s']:g}")
    text = ""
    if sm.get("metaschedule") and (ratios := _round_ratios(
            samples.get(f"metaschedule@{sm['metaschedule'][-1]['trials_per_task']}"), eto, rounds)):
        text += (f" Per timing round, MetaSchedule's best ({sm['metaschedule'][-1]['trials_per_task']} trials/task) "
                 f"over eto's last budget: {min(ratios):.2f}-{max(ratios):.2f} (above 1: eto faster).")
    if ratios := _round_ratios(samples.get("onnxruntime"), eto, rounds):
        text += f" ONNX Runtime over eto's last budget, per round: {min(ratios):.2f}-{max(ratios):.2f}."
    return text


def time_curve(d: dict) -> list[str]:
    sm = d["summary"]
    spread = {k: f" ({min(v):.2f}-{max(v):.2f})" for k, v in (d.get("samples_ms") or {}).items() if v}
    lines_ms = ", ".join(f"{k} {v:.2f} ms{spread.get(k, '')}" for k, v in sm["lines_ms"].items())
    def reached(p: dict) -> str:  # operators not reached, and how many of them ran instant programs
        return str(p.get("pending", "-")) + (f" ({p['instant']} instant)" if p.get("instant") else "")

    rows = [[s(p["tuning_s"]), f"{p['eto_ms']:.2f}", reached(p), "-" if p["metaschedule_within_ms"]
             is None else f"{p['metaschedule_within_ms']:.2f}", x(p["eto_vs_onnxruntime"])] for p in sm["points"]]
    ms_rows = ", ".join(f"{p['trials_per_task']} trials/task: {s(p['tuning_s'])}, {p['ms']:.2f} ms"
                        for p in sm["metaschedule"])
    reach = sm.get("time_ratio_to_metaschedule_best")
    ms_text = (f" MetaSchedule `tune_relax`: {ms_rows}. eto reached MetaSchedule's best latency "
               + (f"in **{x(reach)}** less time." if reach else "at none of its budgets.")) if ms_rows else (
        " MetaSchedule: not run beside it.")
    return [f"Without tuning (median, min-max over the timing rounds): {lines_ms}.{ms_text}"
            + _paired_rounds(d), ""] + table(
        ["eto's tuning time", "eto ms", "operators not reached (instant programs, else default schedules)",
         "MetaSchedule's best within that time, ms", "eto vs ONNX Runtime"], rows)


#: (test, renderer): the first whose test holds for a result file renders it
def corpus(d: dict) -> list[str]:
    sm = d["summary"]
    lines = [f"- {sm['models']} models, {sm['rows']} rows (model x importer x layout): **{sm['ok']} built and matched "
             f"PyTorch**, {sm['failed']} failed ({sm['internal_errors']} internal errors); the check processes took "
             f"{s(d.get('wall_s'))} in all", ""]
    failed = [r for r in d["rows"] if not r.get("ok")]
    rows = [[f"`{r['model']}`", r["importer"], r["layout"], r.get("stage", "-"), (r.get("error") or "-")[:160]]
            for r in failed]
    partial = [r for r in d["rows"] if r.get("ok") and r.get("left_as_written")]
    rows += [[f"`{r['model']}`", r["importer"], r["layout"], "layout", "ok; " + r["left_as_written"][:150]]
             for r in partial]
    if rows:
        lines += table(["model", "importer", "layout", "stage", "error or region left as written"], rows)
    return lines


def corpus_bench(d: dict) -> list[str]:
    sm = d["summary"]
    rows = [[f"`{r['model']}`", f"{r['layout']['resolved']} ({len(r['layout']['winograd'])})", s(r["tune_s"]),
             f"{r['eto']['median_ms']:.2f}", f"{r['onnxruntime']['median_ms']:.2f}", f"{r['pytorch']['median_ms']:.2f}",
             f"{x(r['vs_onnxruntime'])} ({x(r['vs_onnxruntime_rounds'][0])}-{x(r['vs_onnxruntime_rounds'][1])})",
             x(r["vs_pytorch"])] for r in d["rows"]]
    return [f"- eto's built model (`eto tune --model`, no `--layout`, `--time-budget {d['budget_s']:g}`) against ONNX "
            f"Runtime and PyTorch eager, each in processes of its own, {d['rounds']} rounds: geomean "
            f"**{x(sm['geomean_vs_onnxruntime'])}** ONNX Runtime's speed, {x(sm['geomean_vs_pytorch'])} PyTorch's, over "
            f"{sm['models']} models", ""] + table(
        ["model", "layout (Winograd convs)", "tuning", "eto ms", "ONNX Runtime ms", "PyTorch ms",
         "vs ONNX Runtime (per round)", "vs PyTorch"], rows)


def zoo_bench(d: dict) -> list[str]:
    rows = []
    for r in d["rows"]:
        if not r["priors"]:
            rows.append([r["family"], f"`{r['model']}`", "-", s(r["alone_s"]), "(first)", "-", "-", "-", "-"])
            continue
        rows.append([r["family"], f"`{r['model']}`", str(len(r["priors"])), s(r["alone_s"]),
                     f"{s(r['zoo_s'])} ({r['time_ratio']:.2f})",
                     f"{r['same_in_prior']} + {r['reused_from_prior']} of {r['tasks']}", f"{r['alone_ms']:.2f}",
                     f"{r['zoo_ms']:.2f}", f"{x(r['zoo_speed'])} ({x(r['zoo_speed_rounds'][0])}-"
                     f"{x(r['zoo_speed_rounds'][1])})"])
    totals = "; ".join(f"{f}: {s(c['alone_s'])} alone, {s(c['zoo_s'])} with priors"
                       for f, c in d["summary"]["cumulative"].items())
    busy = d["summary"].get("busy_cores_max")
    quiet = "" if busy is None else (f"; other processes took at most {busy:.2f} cores' worth of CPU during the "
                                     f"{d['summary'].get('busy_runs', '')} tuning runs that measured it (`busy`)")
    out = [f"- each model tuned alone and with every earlier model's database as `--prior` (`eto tune --model "
           f"--trials {d['trials']}`), both builds timed in processes of their own, {d['rounds']} rounds; "
           f"cumulative tuning time: {totals}{quiet}", ""] + table(
        ["family", "model", "priors", "tuning alone", "with priors (ratio)", "tasks from a prior (same + reused)",
         "alone ms", "with priors ms", "speed with priors (per round)"], rows)
    budgeted = [r for r in d["rows"] if "budget_s" in r]
    if budgeted:
        out += ["", "With the same priors and `--time-budget` a share of the alone run's time (`--budget-share`), "
                    "built and timed beside the other two (the rows above are from that same timing):", ""] + table(
            ["family", "model", "budget (share of alone)", "wall time (share of alone)", "candidates", "tasks on instant programs",
             "tasks on TVM's default schedules", "ms", "speed vs alone (per round)"],
            [[r["family"], f"`{r['model']}`", f"{s(r['budget_given_s'])} ({r['budget_share']:.2f})",
              f"{s(r['budget_s'])} ({r['budget_s'] / r['alone_s']:.2f})",
              str(r["budget_candidates"]), str(r["budget_instant"]), str(r.get("budget_default", "-")),
              f"{r['budget_ms']:.2f}",
              f"{x(r['budget_speed'])} ({x(r['budget_speed_rounds'][0])}-{x(r['budget_speed_rounds'][1])})"]
             for r in budgeted])
    mixed = [r for r in d["rows"] if "interleaved" in r]
    if mixed:
        def speed(r: dict, label: str) -> str:
            i = r["interleaved"]
            return (f"{label} {x(i[f'{label}_speed'])} ({x(i[f'{label}_speed_rounds'][0])}-"
                    f"{x(i[f'{label}_speed_rounds'][1])})" if f"{label}_speed" in i else "")
        out += ["", "The same builds timed interleaved, all loaded in one process and run in turn, one process a "
                    "round (a slow stretch of the machine falls on all of them alike), speed against the alone "
                    "build, median (per round): " + "; ".join(
                        f"`{r['model']}`: " + ", ".join(t for t in (speed(r, k) for k in ("zoo", "budget", "control")) if t)
                        for r in mixed)]
    controls = [r for r in d["rows"] if "control_speed" in r]
    if controls:
        out += ["", "Noise floor: the alone build timed once more as a build of its own, in the same rounds "
                    "(`control`): its speed against itself, median (per round): " + "; ".join(
                        f"`{r['model']}` {x(r['control_speed'])} ({x(r['control_speed_rounds'][0])}-"
                        f"{x(r['control_speed_rounds'][1])})" for r in controls)]
    return out


def timing_ab(d: dict) -> list[str]:
    r = d["row"]
    how = (f"both retuned from `{r['source']}`'s database (`--prior`, tuned cold)" if r.get("source")
           else "both from empty databases")
    return [f"- `{r['model']}` tuned twice with `eto tune --model --trials {r['trials']}`, {how}: candidates timed "
            f"cold (the CPU default) and hot (MetaSchedule's way); both builds timed in processes of their own, "
            f"alternating, {d['rounds']} rounds", ""] + table(
        ["model", "tuning cold", "tuning hot", "cold ms", "hot ms", "cold's speed over hot's (per round)"],
        [[f"`{r['model']}`", s(r["cold_s"]), s(r["hot_s"]), f"{r['cold_ms']:.2f}", f"{r['hot_ms']:.2f}",
          f"{x(r['cold_speed'])} ({x(r['cold_speed_rounds'][0])}-{x(r['cold_speed_rounds'][1])})"]])


KINDS: list[tuple[Callable[[dict], bool], Callable[[dict], list[str]]]] = [
    (lambda d: "share_phi_nonempty" in (d.get("summary") or {}), reuse_opportunity),
    (lambda d: d.get("benchmark") == "reuse_pairs", reuse_pairs),
    (lambda d: d.get("benchmark") == "set_bench", set_bench),
    (lambda d: str(d.get("experiment", "")).startswith("E5"), estimate_accuracy),
    (lambda d: d.get("experiment") == "selector_scale", selector_scale),
    (lambda d: d.get("experiment") == "selector_gap", selector_gap),
    (lambda d: d.get("benchmark") == "retune_bench", retune_bench),
    (lambda d: "dim" in d and "sizes" in d, model_retune),
    (lambda d: d.get("benchmark") == "symbolic_bench", symbolic_bench),
    (lambda d: str(d.get("experiment", "")).startswith("E8"), vendor_roofline),
    (lambda d: "eto_tune_wall_s" in (d.get("summary") or {}), model_bench),
    (lambda d: d.get("experiment") == "layout_probe", layout_probe),
    (lambda d: d.get("experiment") == "model_profile", model_profile),
    (lambda d: d.get("experiment") == "time_curve", time_curve),
    (lambda d: d.get("experiment") == "corpus", corpus),
    (lambda d: d.get("experiment") == "corpus_bench", corpus_bench),
    (lambda d: d.get("experiment") == "zoo_bench", zoo_bench),
    (lambda d: d.get("experiment") == "timing_ab", timing_ab),
]


# ---- the page ---------------------------------------------------------------------------------------

def file_section(name: str) -> list[str]:
    path = RESULTS / name
    if not path.is_file():
        raise ResultsError(f"results/{name}, named in {README.name}'s table, does not exist")
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ResultsError(f"results/{name}: not JSON ({e})") from None
    render = next((f for test, f in KINDS if test(d)), None)
    if render is None:
        raise ResultsError(f"results/{name}: no summary for this kind of result (add one to {__name__}.KINDS)")
    png = path.with_suffix(".png")
    plot = f", plot [`{png.name}`](results/{png.name})" if png.is_file() else ""
    return [f"**[`{name}`](results/{name})**{plot}", "",
            f"- machine: {machine(d)}", f"- scale: {scale(d)}", ""] + render(d) + [""]


def render_page(readme_text: str) -> str:
    lines = ["# Results of the experiments", "",
             f"Generated by `{COMMAND}` from the canonical result files named in the table at the top of",
             "[README.md](README.md) (which also says how to run each experiment); do not edit by hand.",
             f"`{COMMAND} --check` fails when this page is stale. Ratios are eto's against the baseline",
             "named (above 1: eto better); superseded runs are not listed.", ""]
    for row in experiment_rows(readme_text):
        lines += [f"## {row['id']}: {row['what']}", "", f"Script {row['script']}; command: {row['command']}", ""]
        for name in row["files"]:
            lines += file_section(name)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help=f"exit 1 when {OUT.name} differs from what this writes")
    args = p.parse_args(argv)
    try:
        page = render_page(README.read_text())
    except ResultsError as e:
        print(f"results_md: {e}", file=sys.stderr)
        return 1 if args.check else 2
    if args.check:
        if OUT.is_file() and OUT.read_text() == page:
            return 0
        print(f"results_md: experiments/{OUT.name} is stale; run `{COMMAND}` and commit it", file=sys.stderr)
        return 1
    OUT.write_text(page)
    print(f"wrote experiments/{OUT.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
