"""Figures for notebooks and experiments: a plan over its OC graph, and tuning convergence.

matplotlib is optional (``pip install 'eto[experiments]'``). Figures are built without pyplot, so
scripts save them (``fig.savefig``) on machines without a display and notebooks show them inline.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from eto.models.bench import BenchReport
    from eto.planning.planner import OperatorPlan

__all__ = ["plan_figure", "convergence_figure", "model_bench_figure", "ratio_axis"]


def new_figure(width: float, height: float) -> "Figure":
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("eto's plots need matplotlib: pip install 'eto[experiments]'") from exc
    return Figure(figsize=(width, height), layout="constrained")


def ratio_axis(ax, axis: str = "y") -> None:
    """A log-scaled axis of ratios labelled ``2x``, ``5x``, not in powers of ten."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    getattr(ax, f"set_{axis}scale")("log")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FormatStrFormatter("%gx"))
    target.set_minor_formatter(NullFormatter())


def _layout(parent: Mapping[str, str], extra: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Positions: the root on top, each operator one row below its parent (the plan's tree), children
    beside each other in tree order; OC-graph nodes outside the tree (unused bridges) on a last row."""
    from selector import ROOT

    children: dict[str, list[str]] = defaultdict(list)
    for child, p in parent.items():
        children[p].append(child)
    pos: dict[str, tuple[float, float]] = {}
    column = [0]

    def place(node: str, depth: int) -> float:
        kids = children.get(node, [])
        if not kids:
            x = float(column[0])
            column[0] += 1
        else:
            xs = [place(k, depth + 1) for k in kids]
            x = sum(xs) / len(xs)
        pos[node] = (x, -float(depth))
        return x

    place(ROOT, 0)
    depth = min((y for _, y in pos.values()), default=0.0) - 1
    for i, name in enumerate(extra):
        pos[name] = (float(i), depth)
    return pos


def plan_figure(planned: "OperatorPlan", *, candidate_edges: bool = True, title: str | None = None) -> "Figure":
    """The OC graph (every candidate reuse edge, grey) with the chosen reuse tree on it: backend
    roots in blue, reuse edges in orange, bridges as squares; edge labels are estimated seconds.

    ``candidate_edges``: also draw the edges the tree did not take (rebuilt from the plan's request,
    which calls its cost function again for each pair: cached by the estimator).
    """
    import networkx as nx

    from selector import ROOT, build_oc_graph

    plan = planned.plan
    graph = nx.DiGraph()
    if candidate_edges and plan.request is not None:
        req = plan.request
        graph = build_oc_graph(req.ops, cost_fn=req.cost_fn, backend_cost=req.backend_cost, bridges=plan.bridges)
    graph.add_edges_from((p, c) for c, p in plan.parent.items())
    parent = plan.parent
    extra = sorted(n for n in graph.nodes if n != ROOT and n not in parent)
    pos = _layout(parent, extra)
    width = max(6.0, 1.1 * (1 + max(x for x, _ in pos.values())))
    fig = new_figure(min(width, 24.0), 1.6 * (1 + max(-y for _, y in pos.values())))
    ax = fig.add_subplot()
    ax.set_axis_off()
    tree = {(p, c) for c, p in parent.items()}
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=[e for e in graph.edges if e not in tree],
                           edge_color="#cccccc", arrows=True, arrowsize=6, width=0.6)
    roots = [e for e in tree if e[0] == ROOT]
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=roots, edge_color="tab:blue", width=2, arrowsize=10)
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=[e for e in tree if e[0] != ROOT],
                           edge_color="tab:orange", width=2, arrowsize=10)
    ops = plan.operators
    bridges = [n for n in pos if n in ops and ops[n].bridge]
    nx.draw_networkx_nodes(graph, pos, ax=ax, nodelist=[n for n in pos if n not in bridges],
                           node_color=["black" if n == ROOT else "white" for n in pos if n not in bridges],
                           edgecolors="black", node_size=180)
    nx.draw_networkx_nodes(graph, pos, ax=ax, nodelist=bridges, node_shape="s", node_color="#eeeeee",
                           edgecolors="black", node_size=180)
    nx.draw_networkx_labels(graph, {n: (x, y - 0.28) for n, (x, y) in pos.items()}, ax=ax, font_size=6,
                            labels={n: n.replace("]", "]\n", 1) if len(n) > 18 else n for n in pos})
    nx.draw_networkx_edge_labels(graph, pos, ax=ax, font_size=6, label_pos=0.5,
                                 edge_labels={(p, c): f"{plan.edge_costs[(p, c)]:.0f} s" for p, c in tree})
    ax.set_title(title or f"reuse plan: {len(plan.backend)} backend, {len(plan.reuse_pairs)} reuse "
                          f"({len(plan.used_bridges)} bridges); estimated {plan.total_cost:.0f} s vs "
                          f"{plan.baseline_cost:.0f} s all-backend", fontsize=9)
    return fig


def convergence_figure(curves: Mapping[str, Sequence[tuple[float, float]]], *, title: str = "",
                       ylabel: str = "weighted latency (ms)", scale: float = 1e3) -> "Figure":
    """Best weighted latency so far against tuning seconds, one step line per run (the picture a
    user needs to choose a budget); each run's end marked with a dot. Runs named ``"method, ..."``
    share the method's colour and differ in line style."""
    fig = new_figure(6.4, 3.8)
    ax = fig.add_subplot()
    colors: dict[str, str] = {}  # "method, seed 1": one colour per method, one line style per run of it
    runs: dict[str, int] = {}
    for name, points in curves.items():
        if not points:
            continue
        method = name.split(", ")[0]
        colors.setdefault(method, f"C{len(colors)}")
        runs[method] = runs.get(method, -1) + 1
        xs = [x for x, _ in points]
        ys = [y * scale for _, y in points]
        ax.step(xs, ys, where="post", label=name, color=colors[method],
                linestyle=("-", "--", ":", "-.")[runs[method] % 4])
        ax.plot(xs[-1:], ys[-1:], "o", color=colors[method])
    ax.set_xlabel("tuning time (s)")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def model_bench_figure(report: "BenchReport", *, title: str | None = None) -> "Figure":
    """``eto bench``'s result: latency per method (median, p10-p90 bars) and tuning time per method."""
    fig = new_figure(8.0, 3.2)
    lat, tun = fig.subplots(1, 2)
    names = [r.method for r in report.results]
    med = [r.median_s * 1e3 for r in report.results]
    err = [[m - r.spread[0] * 1e3 for m, r in zip(med, report.results)],
           [r.spread[1] * 1e3 - m for m, r in zip(med, report.results)]]
    lat.bar(names, med, yerr=err, color="tab:blue", capsize=3)
    lat.tick_params(axis="x", labelrotation=25)
    lat.set_yscale("log")
    lat.set_ylabel("latency (ms, log)")
    lat.set_title("end-to-end latency")
    tuned = [(r.method, r.tuning_s / 60) for r in report.results if r.tuning_s is not None]
    tun.bar([m for m, _ in tuned], [t for _, t in tuned], color="tab:orange")
    tun.set_ylabel("tuning time (min)")
    tun.set_title("tuning time")
    fig.suptitle(title or f"{report.model} on {report.target.split(',')[0]}")
    return fig
