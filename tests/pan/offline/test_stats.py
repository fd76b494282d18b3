"""`pan stats delays`: delay profiles from arrival logs, and starting ordering units from them."""

from __future__ import annotations

import asyncio
import csv
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from pan.cli import main
from pan.http.addresses import free_port
from pan.offline.stats import delay_profile
from pan.ordering.settings import OrderingSettings, k_from_profile, load_profile
from pan.ordering.unit import OrderingUnit
from pan.repository.server import RepositoryServer
from tests.conftest import HOST, WorkerGroup, forwarder, get_json, make_workflow, wait_until

PS_PER_MS = 10**9
HEADER = "arrival_ns,stream,ts"


def write_log(path: Path, rows: list[str], header: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{r}\n" for r in ([HEADER] if header else []) + rows))
    return path


# One ordering unit, every stream a clock stream.  Delays (clk - ts) by hand:
UNIT1 = [
    "1000,A,100",  # clk 100, d 0
    "1000,A,130",  # clk 130, d 0
    "1000,A,120",  # same arrival: file order says after 130, so d 10
    "2000,B,90",  # d 40
    "2000,B,140",  # clk 140, d 0
    "3000,A,135",  # d 5
    "3000,B,100",  # d 40
    "4000,A,200",  # clk 200, d 0
]


@pytest.mark.process
def test_every_statistic_of_a_hand_made_log(spark: Any, tmp_path: Path) -> None:
    write_log(tmp_path / "logs" / "unit1.csv", UNIT1)
    profile = delay_profile(spark, tmp_path / "logs")
    a, b = profile["streams"]["A"], profile["streams"]["B"]
    # A: delays 0, 0, 10, 5, 0
    assert (a["count"], a["events"], a["unmeasured"]) == (5, 5, 0)
    assert a["mean_ps"] == pytest.approx(3.0) and a["std_ps"] == pytest.approx(4.0)  # population std
    assert (a["min_ps"], a["max_ps"]) == (0, 10)
    assert a["p50_ps"] == pytest.approx(0.0) and a["p99_ps"] == pytest.approx(9.8)  # exact, interpolated
    assert (a["first_arrival_ns"], a["last_arrival_ns"]) == (1000, 4000)
    assert a["arrival_rate_hz"] == pytest.approx(4 / 3e-6)
    assert (a["first_ts"], a["last_ts"], a["files"]) == (100, 200, 1)
    # B: delays 40, 0, 40
    assert (b["count"], b["min_ps"], b["max_ps"]) == (3, 0, 40)
    assert b["mean_ps"] == pytest.approx(80 / 3) and b["std_ps"] == pytest.approx(math.sqrt(3200 / 9))
    assert b["p50_ps"] == pytest.approx(40.0) and b["p99_ps"] == pytest.approx(40.0)
    assert profile["source"]["malformed"] == 0 and profile["source"]["files"]["unit1.csv"]["clock"] == ["A", "B"]
    assert isinstance(profile["generated"], str)
    # What the unit would learn from these arrivals with lambda 0: the largest delay, 40.
    assert k_from_profile(profile, ["A", "B"]) == 40 == replay_k(UNIT1, OrderingSettings(lam=0, window=10**6))


# Two ordering units (files) with their own clocks, and a third without any clock stream.
UNIT_F1 = ["10,A,100", "20,B,95", "20,B,105", "30,A,110", "40,A,108", "50,B,120"]
UNIT_F2 = ["10,C,50", "20,A,60", "30,A,40", "40,C,70", "50,A,65"]
UNIT_F3 = ["10,D,5", "20,D,3"]


@pytest.fixture
def three_units(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    for name, rows in (("f1.csv", UNIT_F1), ("f2.csv", UNIT_F2), ("f3.csv", UNIT_F3)):
        write_log(logs / name, rows)
    return logs


def test_files_are_separate_units_with_their_own_clock(spark: Any, three_units: Path) -> None:
    streams = delay_profile(spark, three_units)["streams"]
    # f1: A 0,0,2  B 5,0,0   f2: C 0,0  A 0,20,5   f3: D 0,2
    assert (streams["A"]["count"], streams["A"]["max_ps"], streams["A"]["files"]) == (6, 20, 2)
    assert streams["A"]["mean_ps"] == pytest.approx(27 / 6)
    assert (streams["B"]["max_ps"], streams["B"]["mean_ps"]) == (5, pytest.approx(5 / 3))
    assert streams["C"]["max_ps"] == 0  # a shared clock across files would make C50 ~60 late
    assert streams["D"]["max_ps"] == 2


def test_clock_option_measures_others_at_the_next_clock_event(spark: Any, three_units: Path) -> None:
    profile = delay_profile(spark, three_units, clock=["A"])
    s = profile["streams"]
    # f1: A 0,0,2; B95 and B105 wait for A110 (clk 110): 15, 5; B120 comes after the last A: unmeasured.
    # f2: C50 waits for A60: 10; A 0,20; C70 waits for A65, clk stays 65: 0; A65: 0.
    assert (s["A"]["count"], s["A"]["max_ps"], s["A"]["mean_ps"]) == (6, 20, pytest.approx(22 / 6))
    assert (s["B"]["events"], s["B"]["count"], s["B"]["unmeasured"]) == (3, 2, 1)
    assert (s["B"]["min_ps"], s["B"]["max_ps"], s["B"]["p50_ps"]) == (5, 15, pytest.approx(10.0))
    assert (s["C"]["min_ps"], s["C"]["max_ps"]) == (0, 10)
    files = profile["source"]["files"]
    assert files["f1.csv"]["clock"] == ["A"] and files["f3.csv"]["clock"] == ["D"]  # no A there: all streams
    assert s["D"]["max_ps"] == 2
    assert k_from_profile(profile, ["A", "B", "C"], clock=["A"]) == 20
    # The same arrivals through a real unit with clock A give the same largest delay per file.
    settings = OrderingSettings(clock=("A",), lam=0, window=10**6)
    assert replay_k(UNIT_F1, settings) == 15 and replay_k(UNIT_F2, settings) == 20


@pytest.mark.process
def test_malformed_lines_are_counted_not_fatal(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    rows = ["1000,A,100", "garbage", "1,2", "x,A,5", "2000,,7", "", "2000,A,90", "3000,B,95", "4000,A"]
    write_log(tmp_path / "logs" / "m.csv", rows)
    out = tmp_path / "profile.json"
    assert main(["stats", "delays", str(tmp_path / "logs"), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "skipped 5 malformed" in captured.err and "garbage" in captured.err
    assert json.loads(captured.out)["malformed"] == 5
    profile = load_profile(out)
    assert profile["source"]["malformed"] == 5 and profile["source"]["files"]["m.csv"]["malformed"] == 5
    assert profile["streams"]["A"]["max_ps"] == 10 and profile["streams"]["B"]["max_ps"] == 5


@pytest.mark.process
def test_no_logs_is_a_clear_error(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    out = str(tmp_path / "p.json")
    assert main(["stats", "delays", str(tmp_path / "empty"), "--out", out]) == 2
    assert "no arrival logs" in capsys.readouterr().err
    assert main(["stats", "delays", str(tmp_path / "missing"), "--out", out]) == 2
    assert "no such directory" in capsys.readouterr().err
    write_log(tmp_path / "bad" / "x.csv", ["nonsense", "1,2"])
    assert main(["stats", "delays", str(tmp_path / "bad"), "--out", out]) == 2
    assert "no valid arrival rows" in capsys.readouterr().err
    assert not Path(out).exists()


def replay_k(rows: list[str], settings: OrderingSettings) -> int:
    """K of a real OrderingUnit fed the logged batches (same arrival_ns and stream = one push)."""
    parsed = [(int(r[0]), r[1], int(r[2])) for r in csv.reader(rows)]
    unit = OrderingUnit(settings, sorted({s for _, s, _ in parsed}))
    batch: list[tuple[int, str, int]] = []
    for row in [*parsed, None]:
        if batch and (row is None or row[:2] != batch[0][:2]):
            unit.push(batch[0][1], [{"ts": ts} for _, _, ts in batch])
            batch = []
        if row is not None:
            batch.append(row)
    return unit.k


# --------------------------------------------------------------------------- end to end


def merge(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "type": "merge", "host": HOST, "port": free_port(), "inputs": ["A", "B"],
            "params": {"output": "X", "clock": ["A"], **params}}


async def feed(producer: Any, seconds: float, delay_ms: int, step_ms: int = 2) -> None:
    """Real time: A on time, B ``delay_ms`` behind it (B(t) is appended with A(t + delay))."""
    started = time.monotonic()
    t, end = 0, seconds * 1000
    while t < end:
        now_ms = (time.monotonic() - started) * 1000
        while t <= now_ms and t < end:
            producer.outputs["A"].append({"ts": (t + delay_ms) * PS_PER_MS})
            producer.outputs["B"].append({"ts": t * PS_PER_MS})
            t += step_ms
        await asyncio.sleep(0.002)


@pytest.mark.process
async def test_learnt_delays_become_the_initial_k_of_a_new_unit(
    spark: Any, repository: RepositoryServer, workers: WorkerGroup, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    delay_ms = 50
    log_path = tmp_path / "arrivals" / "m1.csv"
    producer, first = await workers.start(make_workflow(repository.port, [
        forwarder("F", ["A", "B"], buffer_size=100_000), merge("M1", arrival_log=str(log_path))]))
    await feed(producer, 1.5, delay_ms)
    await wait_until(lambda: first.component.unit.pushed_count == 1500)
    live_k = first.component.unit.k
    await workers.stop_all()  # closes the arrival log

    profile_path = tmp_path / "profile.json"
    assert main(["stats", "delays", str(log_path.parent), "--clock", "A", "--out", str(profile_path)]) == 0
    capsys.readouterr()
    profile = load_profile(profile_path)
    a, b = profile["streams"]["A"], profile["streams"]["B"]
    assert a["events"] == b["events"] == 750 and a["min_ps"] == 0
    assert delay_ms * PS_PER_MS <= b["p50_ps"] <= b["max_ps"] < (delay_ms + 100) * PS_PER_MS
    learnt = k_from_profile(profile, ["A", "B"], clock=["A"])
    assert learnt == b["max_ps"]
    # The offline numbers are the unit's own: a lambda-0 replay of the log learns the same K.
    rows = log_path.read_text().splitlines()[1:]
    assert replay_k(rows, OrderingSettings(clock=("A",), lam=0, window=10**6)) == learnt
    assert live_k >= delay_ms * PS_PER_MS
    print(json.dumps({"learnt_k_ms": learnt / PS_PER_MS, "live_k_ms": live_k / PS_PER_MS,
                      "b_p50_ms": b["p50_ps"] / PS_PER_MS}))

    # A new unit started from the profile holds K = the learnt delay before any input arrives.
    # Its producer F is declared but not started, so nothing can arrive.
    specs = [forwarder("F", ["A", "B"]), merge("M2", delay_profile=str(profile_path))]
    (second,) = await workers.start(make_workflow(repository.port, specs), names=["M2"])
    _, info = await get_json(f"http://{HOST}:{second.server.port}/streams")
    ordering = info["component"]["ordering"]
    assert ordering["pushed"] == 0 and ordering["k"] == learnt
