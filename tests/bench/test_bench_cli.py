"""Smoke tests of every `pan bench` benchmark (its --help, and a tiny real run in its quickest mode), and of the
plots and reports: structure, not numbers."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks import (
    cli,
    common,
    distribution,
    floor_bench,
    network,
    ordering_bench,
    plots,
    pyspy,
    query_delay,
    replay_bench,
    replay_cpu,
    replay_measure,
    replay_report,
    replay_workflows,
)
from pan.cli import build_parser
from pan.launch.lifeline import shared_lifeline

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str, timeout: float = 120) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "pan", "bench", *args], cwd=ROOT, capture_output=True, timeout=timeout, check=False,
        **shared_lifeline().spawn_options(),  # a killed pytest leaves no benchmark behind
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return orjson.loads(result.stdout)


POINT_KEYS = {"clients", "delivered_per_s", "p50_ms", "p99_ms", "client_p99_worst_ms", "server_cpu", "client_cpu",
              "demand_fraction", "missed"}


@pytest.mark.process
def test_bench_group_lists_its_benchmarks() -> None:
    out = subprocess.run([sys.executable, "-m", "pan", "bench", "--help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    for name in ("fanout", "redis", "network", "cluster", "query-delay", "distribution", "replay", "chaos",
                 "ordering-modes", "policies", "runtime", "ordering", "ball", "simulation", "simulate"):
        assert name in out


@pytest.mark.parametrize("name", list(cli.BENCHMARKS))
def test_every_benchmark_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """In process, on the parser `pan` builds (the group's own subprocess test above runs `pan bench --help`)."""
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["bench", name, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: pan bench {name}")
    assert "--write" in out or (name == "policies" and "--out" in out)  # policies writes JSON only


def test_make_bench_runs_every_benchmark() -> None:
    """`make bench` refreshes every report: each `pan bench` subcommand has a line in its recipe."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\nbench:"):].split("\n\n", 1)[0]
    ran = set(re.findall(r"pan bench ([a-z-]+)", recipe))
    assert ran == set(cli.BENCHMARKS), f"missing: {set(cli.BENCHMARKS) - ran}, unknown: {ran - set(cli.BENCHMARKS)}"


def test_no_benchmark_is_a_script_of_its_own() -> None:
    """Every benchmark runs through `pan bench`; `python -m benchmarks.X` is left to the benchmarks' own children."""
    children = {"chaos_recorder", "cluster_parts", "delay_proxy", "fanout_parts", "ingest_parts", "network_parts",
                "observer", "runtime_worker"}
    scripts = {path.stem for path in (ROOT / "benchmarks").glob("*.py") if "if __name__ == " in path.read_text()}
    assert scripts == children


@pytest.mark.process
def test_ordering_tiny_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "ordering.md"
    summary = bench("ordering", "--events", "8000", "--streams", "8", "--reps", "2", "--write", str(report))
    assert summary["benchmark"] == "ordering" and summary["config"]["reps"] == 2
    rates = summary["events_per_s"]
    assert len(rates) == 5 and all(rate > 0 for rate in rates.values())
    assert {ordering_bench.ROW_LISTS, ordering_bench.ROW_ARRAYS} <= set(rates)  # row ids both ways, side by side
    assert all(low <= rates[label] <= high for label, (low, high) in summary["events_per_s_range"].items())
    assert summary["ratio_unit_vs_baseline"] > 0 and summary["ratio_arrays_vs_lists"] > 0
    text = report.read_text()
    assert "<!-- ordering-bench:start -->" in text and "| Min - max |" in text
    assert "Row ids as arrays / as lists" in text


@pytest.mark.process
def test_ball_on_a_few_seconds_of_a_generated_match(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pan", "generate", "--minutes", "0.2", "--seed", "5", "--out",
                    str(tmp_path / "match")], cwd=ROOT, check=True, capture_output=True, timeout=120,
                   **shared_lifeline().spawn_options())
    report = tmp_path / "benchmarks.md"
    summary = bench("ball", str(tmp_path / "match"), "--seconds", "3", "--write", str(report))
    assert list(summary["components"]) == ["active_ball", "ball_hits", "player_possession", "team_possession",
                                           "shots"]
    assert summary["ball_rows"] > 0 and all(c["events"] > 0 and c["per_cpu_s"] > 0
                                            for c in summary["components"].values())
    assert "<!-- ball-bench:start -->" in report.read_text() and "`active_ball`" in report.read_text()


@pytest.mark.process
def test_simulate_into_a_forwarder_counts_every_row(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("simulate", "--rows", "5000", "--write", str(report))
    assert summary["benchmark"] == "simulate" and summary["sink"] == "forwarder"
    assert summary["sent"] == summary["received_by_forwarder"] == summary["rows"] > 0
    assert summary["simulator_cpu_s"] > 0 and "<!-- simulate-bench:start -->" in report.read_text()


@pytest.mark.slow
def test_runtime_quick_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("runtime", "--quick", "--reps", "1", "--write", str(report), timeout=300)
    assert summary["machine"]["aiohttp"] and summary["config"]["reps"] == 1
    assert summary["throughput"]["raw_http"]["median_tuples_per_s"] > 0
    assert summary["latency_worker_process"]["stream_subscriber"]["samples"] > 0
    assert summary["memory"]["filled_worker_rss_mb"] > summary["memory"]["empty_worker_rss_mb"] > 0
    assert "<!-- runtime-bench:start -->" in report.read_text()


@pytest.mark.heavy
def test_simulation_splits_a_short_match_both_ways(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("simulation", "--minutes", "0.2", "--reps", "1", "--write", str(report), timeout=600)
    [size] = summary["sizes"]
    assert size["agree"] and size["rows"] > 0 and size["spark_s"] > 0 and size["python_s"] > 0
    assert "<!-- simulation-bench:start -->" in report.read_text()


@pytest.mark.process
def test_fanout_quick_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n\n<!-- other:start -->\nkept\n<!-- other:end -->\n")
    summary = bench("fanout", "--quick", "--write", str(report))
    assert summary["benchmark"] == "fanout" and summary["machine"]["cores"] >= 1
    [point] = summary["points"]
    assert set(point) >= POINT_KEYS and point["publishers"] == 1 and point["clients"] == 4
    assert point["delivered_per_s"] > 0 and not point["crashed"]
    text = report.read_text()
    assert "kept" in text and "<!-- fanout-bench:start -->" in text and "<!-- fanout-bench:end -->" in text
    assert is_png(tmp_path / "img" / "fanout-bench.png") and "](img/fanout-bench.png)" in text


@pytest.mark.process
def test_redis_quick_compares_in_one_run() -> None:
    summary = bench("redis", "--quick", timeout=300)
    if "skipped" in summary:
        pytest.skip(summary["skipped"])
    [point] = summary["points"]
    assert set(point["redis"]) >= POINT_KEYS and set(point["pan1"]) >= POINT_KEYS
    assert set(point["ratio_pan1"]) == {"delivered", "p99", "delivered_target_met"}
    assert point["redis"]["delivered_per_s"] > 0 and point["pan1"]["delivered_per_s"] > 0


def test_network_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(network, "can_run", lambda: "needs root (test)")
    parser = argparse.ArgumentParser()
    network.add_arguments(parser)
    assert network.run(parser.parse_args(["--quick"])) == 0
    out = capsys.readouterr()
    assert orjson.loads(out.out) == {"benchmark": "network", "skipped": "needs root (test)"}
    assert "skipped: needs root (test)" in out.err


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_network_quick_in_namespaces() -> None:
    summary = bench("network", "--quick", timeout=300)
    if "skipped" in summary:
        pytest.skip(summary["skipped"])
    assert [phase["latency_ms"] for phase in summary["phases"]] == [0, 20]
    for phase in summary["phases"]:
        assert set(phase["paths"]) == set(network.PATHS)
        assert all(d["count"] > 0 and d["p50_ms"] is not None for d in phase["paths"].values())
    assert set(summary["fit"]) == set(network.PATHS)


def test_write_section_replaces_only_its_own(tmp_path: Path) -> None:
    path = tmp_path / "b.md"
    common.write_section(path, "a", "one")
    common.write_section(path, "b", "two")
    common.write_section(path, "a", "three")
    text = path.read_text()
    assert "three" in text and "two" in text and "one" not in text
    assert text.index("three") < text.index("two")


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    """A real PNG: signature, IHDR first, non-empty image, IEND last."""
    data = path.read_bytes()
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and width > 100 and height > 100 \
        and data[-8:-4] == b"IEND"


def test_plots_draw_valid_pngs_from_results(tmp_path: Path) -> None:
    delays = {"SENSOR105": common.summarize_ms([30.0, 41.0, 200.0]), "B2": common.summarize_ms([90.0, 120.0]),
              "SHOTS": common.summarize_ms([])}
    point = {"clients": 20, "delivered_per_s": 1000, "p99_ms": 12.0, "publishers": 1}
    drawn = [
        plots.query_delay(delays, tmp_path / "qd.png", query_delay.TARGETS_MS),
        plots.distribution({"full_game_3_peers": {"peers": 3, "streams": delays},
                            "full_game_14_peers": {"peers": 14, "streams": delays}}, tmp_path / "dist.png"),
        plots.fanout({"points": [point, {**point, "clients": 100, "p99_ms": None}]}, tmp_path / "fan.png", 100.0),
        plots.redis({"config": {"publishers": [1]}, "points": [{"clients": 20, "redis": point, "pan1": point}]},
                    tmp_path / "redis.png"),
        plots.network({"config": {"bandwidth_mbit": 100}, "phases": [
            {"latency_ms": lat, "bandwidth_mbit": 100, "paths": {"direct": delays["B2"]}} for lat in (0, 20)]},
            tmp_path / "net.png"),
        plots.replay({"runs": {layout: {"title": layout, "cpu_total_s": 3.0, "rows_per_s": 9000.0, "processes": [
            {"process": "replay driver", "cpu_s": 1.0}, {"process": "peer1", "cpu_s": 2.0}]}
            for layout in ("by_peer", "by_worker")}}, tmp_path / "replay.png"),
    ]
    assert all(is_png(path) for path in drawn)


def test_write_report_links_its_plot(tmp_path: Path) -> None:
    report = tmp_path / "docs" / "benchmarks.md"
    common.write_report(report, "x-bench", "## X\n\n" + common.image_link("x-bench", "x"),
                        lambda png: plots.query_delay({"B2": common.summarize_ms([1.0, 2.0])}, png))
    assert "<!-- x-bench:start -->" in report.read_text() and "![x](img/x-bench.png)" in report.read_text()
    assert is_png(tmp_path / "docs" / "img" / "x-bench.png")


@pytest.mark.heavy
def test_distribution_quick_on_one_workflow(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    results = bench("distribution", "--quick", "--workflows", "workflows/full_game_3_peers.json", "--reps", "1",
                    "--write", str(report), timeout=480)
    assert results["config"]["wires"] == ["json", "arrow"] and results["config"]["reps"] == 1
    assert list(results["workflows"]) == ["full_game_3_peers"]
    per_wire = results["workflows"]["full_game_3_peers"]
    assert list(per_wire) == ["json", "arrow"]
    for result in per_wire.values():
        assert result["peers"] == 3 and list(result["streams"]) == query_delay.STREAMS
        assert len(result["runs"]) == 1 and len(result["runs"][0]["load_avg_before"]) == 3
        for stream in ("SENSOR105", "B2", "BP_wholeGame_A"):
            s = result["streams"][stream]
            assert set(s) == {"count", "received", "p50_ms", "p90_ms", "p99_ms", "max_ms", "p50_ms_min", "p50_ms_max",
                              "p99_ms_min", "p99_ms_max"}
            assert s["received"] >= s["count"] > 0 and s["p50_ms"] <= s["p99_ms"] <= s["max_ms"]
    text = report.read_text()
    assert f"<!-- {distribution.SECTION}:start -->" in text and f"](img/{distribution.SECTION}.png)" in text
    assert "p50 ms arrow" in text and "p50 arrow / json" in text
    assert is_png(tmp_path / "img" / f"{distribution.SECTION}.png")


@pytest.mark.heavy
def test_query_delay_quick_writes_table_and_plot(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    results = bench("query-delay", "--quick", "--reps", "2", "--write", str(report), timeout=360)
    assert results["config"]["reps"] == 2 and len(results["runs"]) == 2
    assert list(results["streams"]) == query_delay.STREAMS
    for stream, s in results["streams"].items():
        per_run = [r["streams"][stream] for r in results["runs"]]
        assert s["count"] == min(r["count"] for r in per_run)
        if stream != "SHOTS":  # 20 s of match may hold no shot
            p50s = [r["p50_ms"] for r in per_run]
            assert s["p50_ms_min"] == min(p50s) <= s["p50_ms"] <= max(p50s) == s["p50_ms_max"]
    assert results["streams"]["SENSOR105"]["count"] > 0
    assert f"](img/{query_delay.SECTION}.png)" in report.read_text()
    assert is_png(tmp_path / "img" / f"{query_delay.SECTION}.png")
    kept = orjson.loads((tmp_path / "results" / f"{query_delay.SECTION}.json").read_bytes())
    assert kept["results"] == results and kept["benchmark"] == query_delay.SECTION


def test_replay_bench_names_processes_and_puts_every_worker_on_its_own_peer(tmp_path: Path) -> None:
    pan = [sys.executable, "-m", "pan"]
    peer = [*pan, "peer", "wf.json", "--name", "Heat maps team A"]
    assert replay_cpu.classify(peer) == ("peer", "Heat maps team A")
    assert replay_cpu.classify([*pan, "replay", "wf.json", "--data", "d"]) == ("driver", "replay driver")
    assert replay_cpu.classify([*pan, "run", "wf.json"])[0] == "launcher"
    assert replay_cpu.classify([*pan, "repository", "--port", "1"])[0] == "repository"
    assert replay_cpu.classify(["/usr/bin/java", "-jar", "x"]) == ("other", "java")
    source = ROOT / "workflows" / "full_game_3_peers.json"
    split = replay_workflows.workers_by_peer(replay_workflows.one_worker_per_peer(source, tmp_path / "wf.json"))
    names = [w for workers in replay_workflows.workers_by_peer(source).values() for w in workers]
    assert split == {name: [name] for name in names} and len(names) > 3
    from pan.workflow.parser import load_workflow

    assert load_workflow(source).pulls == "batched"
    per_stream = load_workflow(common.with_pulls(source, tmp_path / "per_stream.json", "per_stream"))
    assert per_stream.pulls == "per_stream" and sorted(w.name for w in per_stream.workers) == sorted(names)
    assert common.parse_pulls("batched,per_stream") == ["batched", "per_stream"]
    for bad in ("", "sometimes", "batched,batched"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.parse_pulls(bad)


@pytest.mark.heavy
def test_floor_quick_runs_every_rep_and_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("floor", "--quick", "--reps", "2", "--write", str(report), timeout=600)
    assert summary["benchmark"] == "floor" and len(summary["runs"]) == 2 and summary["rows"] > 0
    assert all(r["rows"] == summary["rows"] and r["seconds"] > 0 for r in summary["runs"])
    assert summary["rows_per_s_min"] <= summary["rows_per_s_median"] <= summary["rows_per_s_max"]
    assert len(summary["load_avg_at_end"]) == 3
    assert f"<!-- {floor_bench.SECTION}:start -->" in report.read_text()


@pytest.mark.process
def test_floor_refuses_zero_reps() -> None:
    done = subprocess.run([sys.executable, "-m", "pan", "bench", "floor", "--reps", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "--reps must be >= 1" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.heavy
def test_replay_quick_writes_section_and_plot(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("replay", "--quick", "--reps", "1", "--profile", "2", "--floor-reps", "1", "--fixed-reps", "1",
                    "--recorder",
                    "lines,decoded", "--wires", "json,auto,arrow", "--write", str(report), timeout=900)
    assert summary["benchmark"] == "replay" and summary["machine"]["cores"] >= 1
    assert summary["config"]["wires"] == ["json", "auto", "arrow"] and summary["config"]["reps"] == 1
    [entry] = summary["runs"].values()
    assert list(entry["wires"]) == ["json", "json, recorder decodes", "auto", "arrow"]
    assert set(entry["over_json"]) == {"json, recorder decodes", "auto", "arrow"}
    assert min(entry["over_json"].values()) > 0
    assert set(entry["lines_over_decoded"]) == {"rows_per_s", "end_to_end_rows_per_s", "driver_cpu_s", "cpu_total_s"}
    assert summary["recordings_identical"] is True  # both formats and both recorders recorded the same bytes
    for name, run in entry["wires"].items():
        assert set(run) >= {"peers", "input_rows", "event_time_s", "feed_s", "rows_per_s", "real_time_multiple",
                            "target_met", "cpu_total_s", "driver_cpu_s", "processes", "runs", "end_to_end_rows_per_s"}
        [one] = run["runs"]
        assert name.startswith(one["wire"]) and len(one["load_avg_before"]) == len(one["load_avg_after"]) == 3
        assert run["rows_per_s"]["min"] <= run["rows_per_s"]["median"] <= run["rows_per_s"]["max"]
        assert 0 < one["end_to_end_rows_per_s"] <= one["rows_per_s"]  # the feed cannot end after the recording
        if name in ("json", "arrow"):  # profiled once per wire
            profile = run["profile"]  # py-spy attached to the three real peer processes
            assert profile["samples"] > 0 and profile["self"]
            assert [a["frame"] for a in profile["areas"]] == [frame for frame, _ in replay_measure.PROFILE_AREAS]
            assert all(0 <= a["share"] <= 1 for a in profile["areas"])
            assert sum(a["share"] for a in profile["areas"]) > 0
        assert run["input_rows"] > 0 and run["feed_s"]["median"] > 0 and run["event_time_s"] > 0
        assert run["fixed"]["runs"] == 1 and 0 < run["per_row"]["driver_cpu_s"] < run["per_row"]["cpu_total_s"]
        kinds = [p["kind"] for p in run["processes"]]
        assert kinds[:3] == ["driver", "launcher", "repository"] and kinds.count("peer") == run["peers"] == 3
        assert all(p["workers"] for p in run["processes"] if p["kind"] == "peer")
        assert abs(sum(p["cpu_s"] for p in run["processes"]) - run["cpu_total_s"]["median"]) < 0.1
    text = report.read_text()
    assert f"<!-- {replay_report.SECTION}:start -->" in text and f"](img/{replay_report.SECTION}.png)" in text
    assert "Where the peers' time goes" in text and "| arrow |" in text and "| json |" in text
    assert "| json, recorder decodes |" in text and "`--recorder lines,decoded`" in text
    floor = summary["floor"]  # the same data through every component in one process
    assert floor["rows"] == entry["wires"]["json"]["input_rows"] and len(floor["runs"]) == 1
    for run in entry["wires"].values():
        assert run["fraction_of_floor"] == pytest.approx(run["end_to_end_rows_per_s_median"]
                                                         / floor["rows_per_s_median"], rel=0.01)
    assert "Floor (`pan bench floor`" in text
    assert is_png(tmp_path / "img" / f"{replay_report.SECTION}.png")


@pytest.mark.process
@pytest.mark.parametrize("args", [["--wires", "json,xml"], ["--wires", ""], ["--wires", "json,json"],
                                  ["--reps", "0"]])
def test_replay_and_distribution_refuse_bad_wires_and_reps(args: list[str]) -> None:
    for name in ("replay", "distribution"):
        done = subprocess.run([sys.executable, "-m", "pan", "bench", name, *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert ("--wires" in done.stderr) or ("--reps" in done.stderr)


def test_pyspy_profile_folds_collapsed_stacks_by_function(tmp_path: Path) -> None:
    env = "/work/.venv/lib/python3.11/site-packages"
    (tmp_path / "a.txt").write_text(
        f"run (pan/components/ordered.py:129);process (workers/hits.py:90) 3\n"
        f"run (pan/components/ordered.py:129);process (workers/hits.py:95) 1\n"
        f"_run_once (asyncio/base_events.py:1922);select ({env}/selectors.py:468) 4\n"
        "garbage line\n"
    )
    (tmp_path / "b.txt").write_text("run (pan/components/ordered.py:130) 2\n")
    profile = pyspy.Profile()
    for name in ("a.txt", "b.txt", "missing.txt"):
        profile.add_file(tmp_path / name)
    assert profile.samples == 10
    assert profile.share(profile.self_time, 2) == [("process (workers/hits.py)", 0.4),
                                                   ("select (selectors.py)", 0.4)]
    assert profile.share_of("run") == 0.6 and profile.share_of("process") == 0.4 and profile.share_of("nothing") == 0


@pytest.mark.heavy
def test_policies_writes_a_row_per_loss_policy_and_output(tmp_path: Path) -> None:
    out = tmp_path / "policies.json"
    result = subprocess.run([sys.executable, "-m", "pan", "bench", "policies", "--minutes", "0.5", "--seeds", "3",
                             "--loss", "0.05", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                            timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    report = orjson.loads(out.read_bytes())
    lines = {(line["loss"], line["policy"], line["output"]) for line in report["table"]}
    assert lines == {(0.05, policy, output) for policy in ("best_effort", "nfp")
                     for output in ("hits", "possession", "shots")}
    assert len(report["records"]) == 2 and report["machine"]
    assert "nfp" in result.stdout and "precision" in result.stdout


@pytest.mark.process
def test_wire_tiny_compares_json_arrow_lines_and_columns_from_both_buffers(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("wire", "--quick", "--reps", "1", "--pages", "500,2000", "--write", str(report), timeout=300)
    assert summary["config"]["reps"] == 1 and set(summary["buffers"]) == {"columns", "json"}
    for by_page in summary["buffers"].values():
        assert list(by_page) == ["500", "2000"]
        for per_wire in by_page.values():
            assert all(per_wire[wire]["median_tuples_per_s"] > 0 for wire in ("json", "arrow", "lines", "columns"))
            assert set(per_wire["ratio_over_json"]) == {"arrow", "lines", "columns"}
            assert min(per_wire["ratio_over_json"].values()) > 0 and per_wire["page_bytes"]["columns"] > 0
    text = report.read_text()
    assert "<!-- wire-bench:start -->" in text and "| columns | 2000 | arrow |" in text
    assert "| json | 2000 | lines |" in text and "| columns | 500 | columns |" in text


@pytest.mark.process
@pytest.mark.parametrize("name", ["floor", "replay"])
def test_a_data_folder_that_is_not_a_split_is_a_clear_error(name: str, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no sensor files here")
    for data in (tmp_path / "missing", tmp_path):
        done = subprocess.run([sys.executable, "-m", "pan", "bench", name, "--data", str(data)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode != 0 and "not a folder written by `pan split`" in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr


@pytest.mark.process
def test_security_tiny_reads_every_variant_whole(tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    summary = bench("security", "--quick", "--reps", "1", "--write", str(report), timeout=300)
    variants = summary["variants"]
    assert set(variants) == {"open", "token", "tls", "token+tls"}
    assert variants["open"]["ratio_to_open"] == 1.0
    assert all(v["median_tuples_per_s"] > 0 for v in variants.values())
    assert all(cost > 0 for cost in summary["auth_us"].values())
    assert "<!-- security-bench:start -->" in report.read_text() and "| token+tls |" in report.read_text()


def test_replay_recorders_vary_only_json_runs() -> None:
    assert replay_bench.variants(["json", "arrow"], ["lines", "decoded"]) == [
        ("json", "json", False), ("json, recorder decodes", "json", True), ("arrow", "arrow", False)]
    assert replay_bench.variants(["arrow"], ["decoded"]) == [("arrow", "arrow", False)]
    for bad in ("", "lines,lines", "xml"):
        with pytest.raises(argparse.ArgumentTypeError):
            replay_bench.parse_recorders(bad)



FORKING_BENCHMARK = """
import argparse, multiprocessing, os, signal
from benchmarks.cli import run_benchmark

def terminated():
    os.kill(os.getpid(), signal.SIGTERM)  # as a pool ends its workers

def run(args):
    child = multiprocessing.get_context("fork").Process(target=terminated)
    child.start()
    child.join(120)
    print(child.exitcode, flush=True)
    return 0

raise SystemExit(run_benchmark(run, argparse.Namespace(benchmark="forks", max_load=float("inf"), write=None)))
"""


@pytest.mark.process
def test_the_sigterm_of_a_benchmark_is_not_its_forked_childrens() -> None:
    """A benchmark turns SIGTERM into Ctrl-C (to clean up), but a forked child still dies by it at once, as a
    multiprocessing pool's workers must when the pool ends them (with the benchmark's handler they hung in their
    queue, and `pan bench distribution` with them while generating its match)."""
    done = subprocess.run([sys.executable, "-c", FORKING_BENCHMARK], cwd=ROOT, capture_output=True, timeout=300,
                          check=False)
    assert done.returncode == 0 and done.stdout == b"%d\n" % -signal.SIGTERM, (done.stdout, done.stderr[-2000:])
