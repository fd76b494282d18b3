"""The debugging stream receiver (`pan receive`): seed §5.1 spread statistics."""

from __future__ import annotations

import asyncio
import json
import math
import sys

import pytest

from pan.http.addresses import free_port
from pan.ingest.server import send_lines
from simulator.receiver import DebugReceiver, spread_stats
from tests.conftest import ROOT, sensor_row, wait_until

PS = 10**12
T = 10_629_342_490_369_879  # a realistic ts (ps): floats alone would lose the milliseconds


def test_spread_of_two_groups_20_s_apart() -> None:
    latest = {f"SENSOR{i}": T + (20 * PS if i > 3 else 0) for i in range(1, 7)}
    s = spread_stats(latest)
    assert s["sensors"] == 6
    assert s["std_ms"] == pytest.approx(10_000 * math.sqrt(6 / 5))  # sample std (n - 1), as in the seed
    assert s["median_diff_ms"] == pytest.approx(10_000) and s["range_ms"] == pytest.approx(20_000)
    assert s["mean_ts"] == T + 10 * PS


def test_spread_keeps_millisecond_precision_and_handles_few_sensors() -> None:
    s = spread_stats({"SENSOR1": T, "SENSOR2": T + 3 * 10**9})
    assert s["std_ms"] == pytest.approx(3 / math.sqrt(2)) and s["median_diff_ms"] == pytest.approx(1.5)
    assert spread_stats({"SENSOR1": T})["std_ms"] == 0.0
    assert spread_stats({})["std_ms"] is None


async def test_receiver_takes_csv_and_json_lines_and_counts_bad_ones() -> None:
    receiver = DebugReceiver(window=3)
    await receiver.start()
    try:
        lines = [sensor_row(4, T), sensor_row(4, T + 5 * 10**9), sensor_row(8, T + 1 * 10**9),
                 f'{{"stream":"INTERRUPTIONS","ts":{T + 99 * PS},"event":"begin"}}', "not a row"]
        await send_lines("127.0.0.1", receiver.port, [line.encode() for line in lines])
        await wait_until(lambda: receiver.stats()["rows"] == 4)
        assert receiver.latest == {"SENSOR4": T + 5 * 10**9, "SENSOR8": T + 10**9, "INTERRUPTIONS": T + 99 * PS}
        stats = receiver.stats()
        assert stats["sensors"] == 2 and stats["streams"] == 3 and stats["malformed"] == 1
        assert stats["median_diff_ms"] == pytest.approx(2.0)  # INTERRUPTIONS is not a sensor: left out
        first = receiver.report()
        await send_lines("127.0.0.1", receiver.port, [sensor_row(8, T + 5 * 10**9).encode()])
        await wait_until(lambda: receiver.stats()["std_ms"] == 0.0)
        second = receiver.report()
        assert second["std_ms_avg"] == pytest.approx(first["std_ms"] / 2)  # moving average of the reports
    finally:
        await receiver.stop()


@pytest.mark.process
async def test_cli_prints_json_lines() -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pan", "receive", "--port", str(port), "--every", "0.5", "--count", "3",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async def listening() -> bool:
            try:
                await send_lines("127.0.0.1", port, [sensor_row(4, T).encode(), sensor_row(8, T + PS).encode()])
            except OSError:
                return False
            return True

        await wait_until(listening, timeout_s=30, interval_s=0.1)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    reports = [json.loads(line) for line in out.decode().splitlines()]
    assert len(reports) == 3
    assert reports[-1]["sensors"] == 2 and reports[-1]["median_diff_ms"] == pytest.approx(500.0)
    assert reports[-1]["std_ms_avg"] is not None
