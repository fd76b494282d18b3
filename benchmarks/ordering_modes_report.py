"""The Markdown section and the K plot of `pan bench ordering-modes` (between the ``ordering_modes`` markers)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.ordering_modes_recovery import PS
from benchmarks.ordering_modes_replay import Run

SECTION = "ordering_modes"
#: The units drawn in the plot (the others' K stays near 0 in both modes).
PLOTTED = ("Active ball", "Ball hits", "Average team A", "Players possession")


def kseries(run: Run) -> dict[str, list[tuple[float, float]]]:
    """Per plotted unit: (event seconds after the first row, K in ms), one point per sample."""
    return {u: [((s["clk"] - run.origin_ts) / PS, s["k"] / 1e9) for s in run.samples[u]
                if s["clk"] is not None and s["clk"] < run.origin_ts + 10**6 * PS]
            for u in PLOTTED if u in run.samples}


def plot(series: dict[str, dict[str, list[tuple[float, float]]]],
         windows: dict[str, list[tuple[float, float]]], path: Path) -> Path:
    from benchmarks import plots

    fig, axes = plots.figure(len(series))
    balls = {w for s, ws in windows.items() if s in ("SENSOR4", "SENSOR8", "SENSOR10", "SENSOR12") for w in ws}
    players = {w for s, ws in windows.items() for w in ws} - balls
    end = max((p[0] for units in series.values() for pts in units.values() for p in pts), default=0.0)
    for ax, (mode, units) in zip(axes, series.items(), strict=True):
        for label, spans, colour in (("ball outages", balls, "tab:orange"), ("player outages", players, "tab:green")):
            for n, (a, b) in enumerate(w for w in sorted(spans) if w[0] < end):
                ax.axvspan(a, b, color=colour, alpha=0.15, label=label if n == 0 else None)
        for unit, pts in units.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=unit, linewidth=1.2)
        plots.decorate(ax, f"K over time, {mode} mode", "event time since the first row (s)", "K (ms)")
    return plots.save(fig, path)


def _cell(s: dict[str, float], scale: float = 1.0, digits: int = 1, pct: bool = False) -> str:
    if s["median"] != s["median"]:
        return "-"
    f = (lambda v: f"{v * 100:.3f}%") if pct else (lambda v: common.fmt(v * scale, digits))
    return f"{f(s['median'])} ({f(s['min'])} to {f(s['max'])})"


def report(summary: dict[str, Any], machine: dict[str, Any], args: argparse.Namespace, reps: int) -> str:
    modes = summary["modes"]
    rows = []
    for mode, m in modes.items():
        rows.append([mode, _cell(m["late_fraction"], pct=True), _cell(m["worst_unit_late_fraction"], pct=True),
                     f"{m['recoveries_ok']} / {m['recoveries']}", _cell(m["recovery_worst_ratio"], digits=2),
                     _cell(m["noise_worst_ratio"], digits=2), str(m["recoveries_beyond_noise"]),
                     *[_cell(m["k_ms"][u]["median"]) for u in PLOTTED],
                     _cell(m["elapsed_s"], digits=0)])
    table = common.markdown_table(
        ["mode", "late fraction, all units", "worst unit", "K back < 2x in one window", "worst K after / before",
         "worst K ratio without an outage", "above 2x and above that",
         *[f"median K {u} (ms)" for u in PLOTTED], "replay (s)"], rows)
    loads = "; ".join(f"{mode}: " + ", ".join(f"{a[0]:.1f}→{b[0]:.1f}" for a, b in
                                              zip(m["load_start"], m["load_end"], strict=True))
                      for mode, m in modes.items())
    length = "20 s" if args.quick else f"{args.minutes:g} min"
    match = f"`{args.data}`" if args.data else f"{length} of play, the first half of a generated realistic match"
    return "\n".join([
        "## Watermark and max mode under impairments (`pan bench ordering-modes`)",
        "",
        f"{summary['date']}. {common.machine_line(machine)}",
        f"Command: `{summary['command']}`. {match}, replayed at speedup {args.speedup:g} into "
        f"`full_game_3_peers.json` (watermark) and `full_game_3_peers_max.json` (max), {reps} replays per mode, "
        f"interleaved, with `{Path(args.impair).name}`: jitter, reordering inside packets, 0.2% packet loss and "
        "drop outages (connection closed, rows lost, reconnect) of all balls and of half of the players "
        "(shaded in the plot).",
        "Each cell is the median over the replays, with the smallest and largest value in brackets. Late fraction "
        "= late events / events pushed into the units (`late`, `pushed` of `/streams`). Recovery: K one K "
        "window (`window` = 10,000 measurements) after the reconnect against K just before the outage, for "
        "each unit fed by a sensor that was out. "
        f"Load average (1 min) at the start → end of each replay: {loads}.",
        "",
        table,
        "",
        common.image_link(SECTION, "K over time in watermark and max mode"),
        "",
        "The plot shows the replay with the median late fraction of each mode.",
    ])
