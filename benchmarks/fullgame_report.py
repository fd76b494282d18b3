"""The figures of `pan bench fullgame` over its repetitions (median with min-max) and its report section."""

from __future__ import annotations

from typing import Any

from benchmarks import common, wires

PHASE_FIGURES = ("wall_s", "rows_per_s", "real_time_multiple", "tree_peak_rss_mb")
REPLAY_FIGURES = ("feed_s", "recorded_s", "rows_fed", "tuples")
#: Of a recording, in all and per stream family: bytes on disk (zstd) and of JSON, and both per minute of play.
RECORDING_FIGURES = ("bytes", "json_bytes", "bytes_per_min", "json_bytes_per_min")


def spread(values: list[float]) -> dict[str, float] | None:
    present = [v for v in values if v is not None]
    return wires.spread(present) if present else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase: every figure of the runs as median, min and max; peak RSS per process name (the processes of a
    name in a run: the largest); for the replay also its recording in all and per stream family (bytes on disk
    and of JSON, each also per minute of play)."""
    phases: dict[str, Any] = {}
    for name in runs[0]["phases"]:
        of_phase = [r["phases"][name] for r in runs]
        entry: dict[str, Any] = {key: spread([p.get(key) for p in of_phase]) for key in PHASE_FIGURES}
        names = list(dict.fromkeys(process for p in of_phase for process in p["processes"]))
        entry["processes"] = {
            process: {"peak_rss_mb": spread([p["processes"][process]["peak_rss_mb"] for p in of_phase
                                             if process in p["processes"]]),
                      "processes": max(p["processes"].get(process, {}).get("processes", 0) for p in of_phase),
                      "runs": sum(process in p["processes"] for p in of_phase)}
            for process in names}
        if "recording" in of_phase[0]:
            entry.update({key: spread([p[key] for p in of_phase]) for key in REPLAY_FIGURES})
            recordings = [p["recording"] for p in of_phase]
            entry["recording"] = {
                "streams": spread([rec["streams"] for rec in recordings]),
                **{key: spread([rec[key] for rec in recordings]) for key in RECORDING_FIGURES},
                "families": {family: {"streams": max(rec["families"].get(family, {}).get("streams", 0)
                                                     for rec in recordings),
                                      **{key: spread([rec["families"].get(family, {}).get(key, 0)
                                                      for rec in recordings]) for key in RECORDING_FIGURES}}
                             for family in dict.fromkeys(f for rec in recordings for f in rec["families"])},
            }
            entry["missed_runs"] = sum(bool(p["missed"]) for p in of_phase)
        phases[name] = entry
    return phases


def cell(s: dict[str, float] | None, digits: int = 1, scale: float = 1.0) -> str:
    """median (min-max), the bracket only when the runs differ."""
    if s is None:
        return "-"
    median, low, high = (s[k] / scale for k in ("median", "min", "max"))
    text = common.fmt(median, digits)
    return text if low == high else f"{text} ({common.fmt(low, digits)}-{common.fmt(high, digits)})"


def report(results: dict[str, Any]) -> str:
    config, phases = results["config"], results["phases"]
    reps = config["reps"]
    match = "the whole match (`pan generate --full`, both halves)" if config["whole_match"] \
        else f"{config['minutes']:g} minutes of play (`pan generate --minutes {config['minutes']:g}`)"
    rows = results["runs"][0]["rows"]
    table = common.markdown_table(
        ["Phase", "Wall s", "Input rows/s", "x real time", "Peak RSS MB, whole tree"],
        [[f"`{name}`", cell(p["wall_s"], 2), cell(p["rows_per_s"], 0), cell(p["real_time_multiple"], 2),
          cell(p["tree_peak_rss_mb"], 0)] for name, p in phases.items()])
    processes = common.markdown_table(
        ["Phase", "Process", "Peak RSS MB", "Processes"],
        [[f"`{name}`", f"`{process}`", cell(entry["peak_rss_mb"], 0),
          str(entry["processes"]) + ("" if entry["runs"] == reps else f" (in {entry['runs']} of {reps} runs)")]
         for name, p in phases.items() for process, entry in p["processes"].items()],
        "llrr")
    replay = phases["replay"]
    recording = replay["recording"]
    families = common.markdown_table(
        ["Stream family", "Streams", "MB on disk (zstd)", "MB of JSON", "On disk, MB per min of play",
         "JSON, MB per min of play"],
        [[name, streams, *(cell(f[key], 1, 1e6) for key in RECORDING_FIGURES)]
         for name, streams, f in [*((family, str(f["streams"]), f) for family, f in recording["families"].items()),
                                  ("**total**", cell(recording["streams"], 0), recording)]])
    missed = f"; {replay['missed_runs']} run(s) missed tuples" if replay["missed_runs"] else ""
    minutes = config["game_s"] / 60
    return "\n".join([
        *common.report_head("## The whole pipeline on a generated match: generate, split, replay", results),
        "",
        f"Command: `{results['command']}`. {match.capitalize()}, seed {config['seed']}: {rows:,} rows, "
        f"{config['game_s'] / 60:,.1f} minutes of game time; {reps} run(s) of the whole pipeline, each phase a "
        "child process as a user types it: `pan generate`, `pan split` (Spark, embedded `local[*]`), and an "
        f"unpaced `pan replay --compress` of both halves into `{config['workflow']}` (on free ports) recording "
        "every output stream, zstd-compressed. Figures: median (min-max) over the runs. Wall: from starting the "
        "phase's process to its exit; input rows/s: the rows of the generated match over the wall time; x real "
        "time: game time over the wall time. RSS of every process of the phase's tree sampled every "
        f"{config['sample_s']:g} s with psutil; a process's peak, and the peak of the tree's sum at one sample "
        "(pages a forked worker shares with its parent count in both).",
        "",
        table,
        "",
        "Peak RSS per process (the largest of the processes of one name in a run):",
        "",
        processes,
        "",
        f"The replay: {cell(replay['rows_fed'], 0)} rows fed (the forwarders' inputs) in "
        f"{cell(replay['feed_s'], 2)} s, the last output recorded {cell(replay['recorded_s'], 2)} s after the "
        f"first row; {cell(replay['tuples'], 0)} output tuples on {cell(recording['streams'], 0)} recorded "
        f"streams, of {results['streams_expected']} output streams in the workflow{missed}. The recording per "
        "stream family (the name up to its first `_` or digit; A1..B8 are the player averages): the bytes of its "
        "files on disk, zstd-compressed, and of its JSON lines before compression (`pan replay --json`'s "
        f"`json_bytes`), in all and per minute of play ({minutes:g} minute{'' if minutes == 1 else 's'}):",
        "",
        families,
    ]) + "\n"
