"""Two revisions of eto's code, the same ``eto tune`` run with each, interleaved by seed.

Where a change should cut eto's own time (its builds, say), comparing with an earlier run of the
set benchmark puts a day's machine noise between the two; this runs both revisions in one session,
one seed after the other (old, new, old, new, ...), each from its own git worktree, and reads where
each run's seconds went from its database (``eto_meta.json``: the roots' and reuses' seconds and
build phases, the reuses' cut or failed builds). Latencies are the runs' own; re-measure the
databases side by side with ``compare_dbs.py`` to compare quality.

    python -m experiments.tools.code_ab --revs 1dde2a4 HEAD --opset bert_base --trials 100 --seeds 3 \\
        --work /tmp/ab --out experiments/results/code_ab_<name>.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def summarize(db: str) -> dict:
    """Where one run's seconds went, from its database's results."""
    with open(os.path.join(db, "eto_meta.json")) as f:
        recs = [json.loads(line) for line in f if line.strip()]

    def total(rows, key=None):
        return round(sum((r.get("phases") or {}).get(key, 0.0) if key else r["seconds"] for r in rows), 2)

    roots = [r for r in recs if r["method"] == "backend"]
    reuses = [r for r in recs if r["method"] == "reuse"]
    return {"seconds": total(recs), "roots_s": total(roots), "roots_build_s": total(roots, "build_s"),
            "reuses_s": total(reuses), "reuses_build_s": total(reuses, "build_s"),
            "reuses_failed": sum(r.get("failed") or 0 for r in reuses),
            "candidates": sum(r["candidates"] for r in recs), "operators": len(recs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--revs", nargs=2, required=True, metavar=("OLD", "NEW"), help="git revisions")
    ap.add_argument("--opset", required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--work", required=True, help="worktrees and databases (finished runs are kept)")
    ap.add_argument("--out")
    args = ap.parse_args()
    from experiments._env import environment
    from experiments._experiment import write_json

    names = ("old", "new")
    trees = {}
    for name, rev in zip(names, args.revs):
        trees[name] = os.path.join(args.work, f"tree_{name}")
        if not os.path.isdir(trees[name]):
            subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", trees[name], rev], check=True)
    commits = {n: subprocess.run(["git", "-C", trees[n], "rev-parse", "--short", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip() for n in names}
    runs = []
    for seed in range(args.seeds):
        for name in names:
            db = os.path.join(args.work, name, f"seed{seed}")
            if not os.path.exists(os.path.join(db, "eto_meta.json")):
                env = {**os.environ, "PYTHONPATH": trees[name], "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS", "2")}
                cmd = [sys.executable, "-m", "eto", "tune", "--opset", args.opset, "--trials", str(args.trials),
                       "--seed", str(seed), "--db", db]
                print(f"seed {seed}, {name} ({commits[name]})", flush=True)
                subprocess.run(cmd, env=env, cwd=args.work, check=True, stdout=subprocess.DEVNULL)
            runs.append({"seed": seed, "code": name, "commit": commits[name], **summarize(db)})
            print(json.dumps(runs[-1]), flush=True)
    summary = {n: {k: statistics.median(r[k] for r in runs if r["code"] == n)
                   for k in ("seconds", "roots_s", "roots_build_s", "reuses_s", "reuses_build_s", "reuses_failed")}
               for n in names}
    print(json.dumps(summary, indent=1))
    write_json({"experiment": "code_ab", "revs": dict(zip(names, args.revs)), "commits": commits, "opset": args.opset,
                "trials": args.trials, "seeds": args.seeds, "environment": environment(), "runs": runs,
                "median": summary}, args.out)


if __name__ == "__main__":
    main()
