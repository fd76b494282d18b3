"""PNG plots of the `pan bench` results, drawn from each benchmark's JSON summary.

One module so every figure looks alike and can be redrawn from a saved JSON
summary; matplotlib (a slow import, Agg backend so no display is needed) is
loaded only when a plot is drawn, because `pan` imports the benchmarks on
every start.  Each benchmark's ``--write REPORT`` saves one PNG,
``<REPORT dir>/img/<section>.png`` (`common.plot_path`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Points = Sequence[tuple[float, float | None]]


# --- building blocks --------------------------------------------------------------------


def figure(panels: int = 1) -> tuple[Figure, list[Axes]]:
    """A figure with ``panels`` side by side, rendered by Agg (no display, no pyplot state)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5 * panels, 4.2), dpi=110)
    return fig, list(fig.subplots(1, panels, squeeze=False)[0])


def save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def lines(
    ax: Axes,
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, Points],
    *,
    logx: bool = False,
    logy: bool = False,
    hline: tuple[float, str] | None = None,
    styles: dict[str, dict[str, Any]] | None = None,
) -> None:
    """One line per series (``styles``: extra `Axes.plot` arguments per label); points without a value
    (None or NaN) are left out."""
    for label, points in series.items():
        pts = [(x, y) for x, y in points if y is not None and y == y]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label,
                    **(styles or {}).get(label, {}))
    if hline is not None:
        ax.axhline(hline[0], color="grey", linestyle="--", linewidth=1, label=hline[1])
    if logx:
        ax.set_xscale("log")
        xs = sorted({x for points in series.values() for x, _ in points})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])  # the measured points, as plain numbers
        ax.minorticks_off()
    if logy:
        ax.set_yscale("log")
        plain_log_y(ax)
    decorate(ax, title, xlabel, ylabel)


def bars(
    ax: Axes,
    title: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    ylabel: str,
    *,
    marks: dict[str, float] | None = None,
) -> None:
    """Grouped bars (one group per x label, one bar per series), log y; ``marks``: a dash per group (targets)."""
    width = 0.8 / max(1, len(series))
    empty = set(range(len(groups)))
    for k, (label, values) in enumerate(series.items()):
        xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        pts = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None and v == v and v > 0]
        ax.bar([p[0] for p in pts], [p[1] for p in pts], width=width, label=label)
        empty -= {g for g, v in enumerate(values) if v is not None and v == v and v > 0}
    if marks:
        pts = [(g, marks[name]) for g, name in enumerate(groups) if name in marks]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="_", s=900, color="black", zorder=3,
                   label="target p50")
    ax.set_xticks(range(len(groups)), list(groups), rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    plain_log_y(ax)
    for g in sorted(empty):  # a stream with no tuples (e.g. no shot in a short match) is shown, not hidden
        ax.annotate("no data", (g, 0.02), xycoords=("data", "axes fraction"), ha="center", fontsize=8, color="grey")
    decorate(ax, title, "", ylabel)


def plain_log_y(ax: Axes) -> None:
    """Log y axis labelled 1, 2, 5, 10, 20, ... instead of 10^0, 2x10^0, ..."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def decorate(ax: Axes, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


# --- one function per benchmark ---------------------------------------------------------


def query_delay(streams: dict[str, dict[str, Any]], path: Path, targets: dict[str, float] | None = None) -> Path:
    """`pan bench query-delay`: p50 and p99 per stream ({stream: summarize_ms(...)})."""
    fig, [ax] = figure()
    names = list(streams)
    bars(ax, "Query delay per stream (real-time replay)", names,
         {q: [streams[s][f"{q}_ms"] for s in names] for q in ("p50", "p99")}, "query delay (ms)", marks=targets)
    return save(fig, path)


def distribution(results: dict[str, dict[str, Any]], path: Path) -> Path:
    """`pan bench distribution`: p50 and p99 per stream, one bar per run ({name: {peers, streams, [label]}})."""
    fig, axes = figure(2)
    names = list(dict.fromkeys(s for r in results.values() for s in r["streams"]))
    for ax, q in zip(axes, ("p50", "p99"), strict=True):
        series = {r.get("label", f"{r['peers']} peers"): [r["streams"].get(s, {}).get(f"{q}_ms") for s in names]
                  for r in results.values()}
        bars(ax, f"{q} query delay per stream, by distribution", names, series, f"{q} query delay (ms)")
    return save(fig, path)


def network(summary: dict[str, Any], path: Path) -> Path:
    """`pan bench network`: p50 and p99 per path against the added latency (phases at the base bandwidth)."""
    base = summary["config"]["bandwidth_mbit"]
    phases = [ph for ph in summary["phases"] if ph["bandwidth_mbit"] == base]
    paths = list(dict.fromkeys(p for ph in phases for p in ph["paths"]))
    series = {f"{p} {q[:3]}": [(ph["latency_ms"], ph["paths"][p][q]) for ph in phases if p in ph["paths"]]
              for p in paths for q in ("p50_ms", "p99_ms")}
    styles = {f"{p} {q}": {"color": f"C{k}", "linestyle": style}  # a colour per path, p99 dashed
              for k, p in enumerate(paths) for q, style in (("p50", "-"), ("p99", "--"))}
    fig, [ax] = figure()
    lines(ax, "Query delay vs added one-way latency per link", "added latency per proxied link (ms)",
          "query delay (ms)", series, styles=styles)
    latencies = sorted({ph["latency_ms"] for ph in phases})
    ax.set_xticks(latencies, [f"{x:g}" for x in latencies])
    return save(fig, path)


def fanout(summary: dict[str, Any], path: Path, p99_target_ms: float | None = None) -> Path:
    """`pan bench fanout`: delivered tuples/s and p99 against clients, a line per publisher count."""
    pubs = sorted({p["publishers"] for p in summary["points"]})
    systems = {f"{pub} publisher(s)": [p for p in summary["points"] if p["publishers"] == pub] for pub in pubs}
    return clients_plot("PAN fan-out", systems, path, p99_target_ms)


def redis(summary: dict[str, Any], path: Path) -> Path:
    """`pan bench redis`: the same two panels, Redis Streams and PAN measured in one run."""
    points = summary["points"]
    systems = {summary.get("redis_version", "Redis"): [{**pt["redis"], "clients": pt["clients"]} for pt in points]}
    for pub in summary["config"]["publishers"]:
        systems[f"PAN, {pub} publisher(s)"] = [{**pt[f"pan{pub}"], "clients": pt["clients"]} for pt in points]
    return clients_plot("Fan-out: PAN vs Redis Streams (same run)", systems, path)


def clients_plot(title: str, systems: dict[str, list[dict[str, Any]]], path: Path,
                 p99_target_ms: float | None = None) -> Path:
    """Delivered tuples/s and p99 delivery delay against concurrent subscribers, a line per system."""
    fig, [left, right] = figure(2)
    lines(left, f"{title}: delivered tuples/s", "concurrent subscribers", "delivered tuples/s (all clients)",
          {label: [(p["clients"], p["delivered_per_s"]) for p in pts] for label, pts in systems.items()}, logx=True)
    lines(right, f"{title}: p99 delivery delay", "concurrent subscribers", "p99 delay (ms)",
          {label: [(p["clients"], p["p99_ms"]) for p in pts] for label, pts in systems.items()}, logx=True,
          logy=True, hline=(p99_target_ms, f"target {p99_target_ms:g} ms") if p99_target_ms else None)
    return save(fig, path)


def replay(results: dict[str, Any], path: Path) -> Path:
    """`pan bench replay`: CPU seconds per process, one panel per layout ({runs: {layout: {title, processes}}})."""
    runs = list(results["runs"].values())
    fig, axes = figure(len(runs))
    for ax, run in zip(axes, runs, strict=True):
        names = [p["process"] for p in run["processes"]][::-1]  # top to bottom in table order
        ax.barh(range(len(names)), [p["cpu_s"] for p in run["processes"]][::-1], color="C0")
        ax.set_yticks(range(len(names)), names, fontsize=7)
        decorate(ax, f"CPU per process, {run['title']}: {run['cpu_total_s']:.0f} s in all, "
                 f"{run['rows_per_s']:,.0f} rows/s", "CPU seconds (user + system)", "")
    return save(fig, path)


def chaos(results: dict[str, Any], path: Path) -> Path:
    """`pan bench chaos`: slowest /health answer after each fault; colour = seed, marker = kind of fault."""
    from matplotlib.lines import Line2D

    fig, (ax,) = figure(1)
    kinds = {"pause": "o", "restart": "s", "drop": "^", "stall": "D"}
    for n, seed in enumerate(results["seeds"]):
        for kind, marker in kinds.items():
            pts = [(f["started_s"], max(f["health_s"].values())) for f in seed["faults"]
                   if f["kind"] == kind and None not in f["health_s"].values()]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=f"C{n}")
    bound = results["config"]["health_bound_s"]
    ax.axhline(bound, color="grey", linestyle="--", linewidth=1)
    ax.set_ylim(bottom=0)
    decorate(ax, "Slowest /health answer after each fault", "fault start (s after the feed started)",
             "seconds after the fault ended")
    handles = [Line2D([], [], color=f"C{n}", marker="o", linestyle="", label=f"seed {seed['seed']}")
               for n, seed in enumerate(results["seeds"])]
    handles += [Line2D([], [], color="black", marker=m, linestyle="", label=k) for k, m in kinds.items()]
    handles.append(Line2D([], [], color="grey", linestyle="--", label=f"bound {bound:g} s"))
    ax.legend(handles=handles, fontsize=8, ncol=2)
    return save(fig, path)
