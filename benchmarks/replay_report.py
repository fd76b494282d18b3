"""The Markdown section and the plot data of `pan bench replay` (between the ``replay-throughput`` markers)."""

from __future__ import annotations

from typing import Any

from benchmarks import common
from benchmarks.replay_cpu import PROFILE_AFTER_S, SAMPLE_S
from benchmarks.replay_measure import TARGET_ROWS_PER_S

SECTION = "replay-throughput"


def plot_runs(results: dict[str, Any]) -> dict[str, Any]:
    """One CPU panel per layout and wire (the medians), in the shape `plots.replay` draws."""
    return {"runs": {f"{layout}-{wire}": {"title": f"{entry['title']}, {wire}", "processes": s["processes"],
                                          "cpu_total_s": s["cpu_total_s_median"], "rows_per_s": s["rows_per_s_median"]}
                     for layout, entry in results["runs"].items() for wire, s in entry["wires"].items()}}


def spread_cell(s: dict[str, float], digits: int = 1) -> str:
    return f"{common.fmt(s['min'], digits)} - {common.fmt(s['max'], digits)}"


def report(results: dict[str, Any]) -> str:
    runs = results["runs"]
    config = results["config"]
    wire_names = config["wires"]
    rows = []
    for entry in runs.values():
        for wire, s in entry["wires"].items():
            ratio = entry.get("over_json", {}).get(wire)
            rows.append([entry["title"], s["peers"], wire, s["reps"], common.fmt(s["input_rows"]),
                         f"{s['feed_s']['median']:.1f} s", common.fmt(s["rows_per_s"]["median"]),
                         spread_cell(s["rows_per_s"], 0),
                         f"{common.fmt(s['end_to_end_rows_per_s']['median'])} "
                         f"({spread_cell(s['end_to_end_rows_per_s'], 0)})",
                         f"{ratio:.2f}" if ratio is not None else "",
                         f"{s['real_time_multiple']['median']:.2f}x",
                         "met" if s["target_met"] else "**missed**", f"{s['cpu_total_s']['median']:.1f} s",
                         f"{s['driver_cpu_s']['median']:.1f} s", f"{s['wall_s']['median']:.1f} s"])
    loads_before = [r["load_avg_before"][0] for e in runs.values() for s in e["wires"].values() for r in s["runs"]]
    loads_after = [r["load_avg_after"][0] for e in runs.values() for s in e["wires"].values() for r in s["runs"]]
    event_s = next(iter(next(iter(runs.values()))["wires"].values()))["event_time_s"]
    lines = [
        "## Full-game replay throughput, JSON and Arrow pages (issues 5 and 13)",
        "",
        f"{results['date']}. {common.machine_line(results['machine'], results['load_avg_at_end'])}",
        f"Command: `{results['command']}`; workflow `{config['workflow']}`, {config['match']} "
        f"({event_s:.1f} s of event time), `pan replay` unpaced (speedup 0, sensors in lockstep), every output "
        "stream recorded, all processes on this machine.",
        f"Wire formats {', '.join(wire_names)}: {config['reps']} run(s) each, alternating, with `PAN_WIRE` set for "
        "every process of the run (checked: the replay driver with its recorder, the launcher, the repository and "
        "every peer). Load average (1 min) before each run: "
        f"{min(loads_before):.2f} - {max(loads_before):.2f}, after: {min(loads_after):.2f} - {max(loads_after):.2f}.",
        "",
        "Rows/s = input rows sent / feed time (the simulator's run); multiple of real time = event-time span of "
        f"the data / feed time; medians over the runs, rows/s with min - max. Target (issue 5): "
        f"{TARGET_ROWS_PER_S:,} rows/s, 10x real time, judged end to end. CPU = user + system seconds of every "
        "process of the replay, "
        f"sampled every {SAMPLE_S:g} s with psutil over the whole run (start-up, feed, and the quiet period after "
        "the data before the replay stops: the wall time); driver = the simulator and the recorder. End to end = "
        "input rows / the time from the first row fed until every output stream had ended and was recorded: the "
        "feed may run ahead of the workflow, whose ingest buffers what it has not processed yet.",
        "",
        common.markdown_table(["Processes", "Peers", "Wire", "Runs", "Input rows", "Feed time", "Rows/s",
                               "Min - max", "Rows/s end to end (min - max)", "End to end / JSON",
                               "Multiple of real time",
                               f"Target {TARGET_ROWS_PER_S:,} rows/s", "CPU total", "Driver CPU", "Wall time"],
                              rows, align="lrlrrrrrrrrlrrr"),
        "",
        "Every run recorded the same bytes (sha256 over all output streams), over either format: "
        + ("**yes**." if results["recordings_identical"] else "**no**: the outputs differ between runs."),
    ]
    for entry in runs.values():
        summaries = entry["wires"]
        first = next(iter(summaries.values()))
        cpu_rows = []
        for n, p in enumerate(first["processes"]):
            cells = [p["process"], ", ".join(p["workers"]) or "-"]
            for s in summaries.values():
                cpu = s["processes"][n]["cpu_s"]
                cells += [f"{cpu:.1f}", f"{cpu / (s['cpu_total_s_median'] or float('nan')):.0%}"]
            cpu_rows.append(cells)
        header = ["Process", "Workers"]
        for wire in summaries:
            header += [f"CPU s {wire}", f"Share {wire}"]
        lines += ["", f"CPU per process, {entry['title']} ({first['peers']} peers), medians over the runs:", "",
                  common.markdown_table(header, cpu_rows, align="ll" + "rr" * len(summaries))]
    fixed_rows = [[entry["title"], wire, s["fixed"]["runs"], f"{s['fixed']['cpu_total_s']['median']:.1f} s",
                   f"{s['fixed']['driver_cpu_s']['median']:.1f} s", f"{s['per_row']['cpu_total_s']:.1f} s",
                   f"{s['per_row']['driver_cpu_s']:.1f} s", f"{s['per_row']['driver_share']:.0%}"]
                  for entry in runs.values() for wire, s in entry["wires"].items() if "fixed" in s]
    if fixed_rows:
        lines += ["", "What a replay costs without a row (the same command with `--to` before the first row: every "
                  "process starts, the recorder subscribes to every output, every input ends at once, the ends are "
                  "recorded, everything stops), and what is left to the rows: the medians above less it.", "",
                  common.markdown_table(["Processes", "Wire", "Runs without rows", "CPU without rows",
                                         "Driver without rows", "CPU of the rows", "Driver CPU of the rows",
                                         "Driver's share of the rows' CPU"], fixed_rows, align="llrrrrrr")]
    if "floor" in results:
        floor = results["floor"]
        parts = [f"{s['fraction_of_floor']:.0%} of it {e['title']} over {wire}"
                 for e in runs.values() for wire, s in e["wires"].items()]
        lines += ["", f"Floor (`pan bench floor` on the same data, {len(floor['runs'])} runs: every component in one "
                  f"process, no network): {common.fmt(floor['rows_per_s_median'])} rows/s median "
                  f"({common.fmt(floor['rows_per_s_min'])} - {common.fmt(floor['rows_per_s_max'])}); the replay "
                  "reaches, end to end, " + ", ".join(parts) + "."]
    lines += [
        "",
        "The replay driver is the simulator plus the recorder (one subscriber per output stream; over JSON it reads "
        "line pages and writes each tuple's bytes as they come, over Arrow it decodes each page and writes every "
        "tuple as a JSON line); the launcher only watches its children.",
    ]
    for entry in runs.values():
        ratios = entry.get("lines_over_decoded")
        if ratios:
            lines += ["", f"{entry['title']}: the recorder writing line pages' bytes against decoding every tuple "
                      f"and encoding it again (`--recorder lines,decoded`), medians: rows/s {ratios['rows_per_s']}x, "
                      f"end to end {ratios['end_to_end_rows_per_s']}x, driver CPU {ratios['driver_cpu_s']}x, "
                      f"CPU total {ratios['cpu_total_s']}x."]
    if {"pulls_batched", "pulls_per_stream"} <= set(runs) and "json" in runs["pulls_batched"]["wires"]:
        batched, per_stream = (runs[layout]["wires"]["json"]["rows_per_s_median"]
                               for layout in ("pulls_batched", "pulls_per_stream"))
        lines += ["", "Batched pulls (a worker's pages of one publisher asked for in one loop round share a "
                  "`POST /pages`) against one `/data` "
                  f"long poll per input, JSON rows/s medians: {batched / per_stream:.2f}x. Over Arrow both pull per "
                  "stream (a batched answer is JSON), so their Arrow rows differ only by chance."]
    if "by_worker" in runs:
        lines.append("With one worker per process the totals differ from the workflow's own layout: workers of one "
                     "peer pull from each other in-process (`pan/input/local.py`), whereas one worker per process "
                     "pulls "
                     "every input over HTTP, so that run does more work (and has more processes to share "
                     f"{results['machine']['cores']} cores).")
    for entry in runs.values():
        for wire, s in entry["wires"].items():
            if s.get("profile"):
                lines += ["", f"Profile over {wire} (a run of its own after the measured ones):", "",
                          *profile_report(s["profile"])]
    lines += ["", common.image_link(SECTION, "CPU seconds per process")]
    return "\n".join(lines)


def profile_report(profile: dict[str, Any]) -> list[str]:
    areas = [[f"`{a['frame']}`", a["what"], f"{a['share']:.0%}"] for a in profile["areas"]]
    functions = [[f"`{f['function']}`", f"{f['share']:.1%}"] for f in profile["self"]]
    return [
        f"Where the peers' time goes: py-spy (`--nonblocking`, {profile['rate_hz']} Hz) on every peer for "
        f"{profile['seconds']:g} s from {PROFILE_AFTER_S:g} s into the replay, {profile['samples']:,} samples pooled "
        "over the peers (this run's command includes `--profile`). An area's share counts the samples with its frame "
        "anywhere on the stack; in-process pulls serve their page inside `InputChannel.pull`, so areas can overlap.",
        "",
        common.markdown_table(["Frame", "Work", "Share of samples"], areas, align="llr"),
        "",
        "Functions with the most self time (the innermost frame; C calls such as orjson's count in their caller):",
        "",
        common.markdown_table(["Function", "Share of samples"], functions, align="lr"),
    ]
