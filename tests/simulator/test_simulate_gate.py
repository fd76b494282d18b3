"""The simulator's event-time gate: unpaced sensors advance together, one slice (or one skipped break) a round."""

from __future__ import annotations

import asyncio

from simulator.debs import HALF1, HALF2
from simulator.simulate_pacing import UNPACED_SLICE_PS, EventTimeGate
from tests.simulator.split_folders import PS, T0


async def test_no_sensor_passes_the_limit_before_every_sensor_has_reached_it() -> None:
    """The gate's round ends when its last sensor arrives, or finishes: not one sensor earlier."""
    gate = EventTimeGate(T0, UNPACED_SLICE_PS, participants=3)
    first = [asyncio.create_task(gate.arrive(False)) for _ in range(2)]
    for _ in range(5):  # let both run up to their wait
        await asyncio.sleep(0)
    assert not any(task.done() for task in first) and gate.limit_ts == T0 + UNPACED_SLICE_PS
    await asyncio.wait_for(gate.arrive(False), 10)  # the third: the round is over for all three
    await asyncio.wait_for(asyncio.gather(*first), 10)
    assert gate.limit_ts == T0 + 2 * UNPACED_SLICE_PS
    waiting = asyncio.create_task(gate.arrive(False))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    await gate.arrive(True)  # a sensor out of rows leaves: two are left, one of them waits
    assert not waiting.done()
    await asyncio.wait_for(gate.arrive(True), 10)  # the last other one leaves too: the waiting one goes on
    await asyncio.wait_for(waiting, 10)
    assert gate.limit_ts == T0 + 3 * UNPACED_SLICE_PS


async def test_an_unpaced_replay_steps_over_a_skipped_break_in_one_round() -> None:
    """Walked through in 50 ms slices, a generated match's ~39-minute break took every sensor ~46,000 rounds
    (an attached full-game replay stalled there for minutes)."""
    end1, start2 = HALF1[0] + 16 * PS, HALF2[0] - 5 * PS
    gate = EventTimeGate(HALF1[0], UNPACED_SLICE_PS, participants=2, gap=(end1, start2))
    limits = []
    while gate.limit_ts <= start2 + 3 * UNPACED_SLICE_PS:
        limits.append(gate.limit_ts)
        await asyncio.wait_for(asyncio.gather(gate.arrive(False), gate.arrive(False)), 10)
    assert not [limit for limit in limits if end1 < limit < start2]
    assert start2 in limits and limits == sorted(set(limits))
    assert len(limits) <= (end1 - HALF1[0]) // UNPACED_SLICE_PS + 5


async def test_without_a_break_to_skip_the_gate_moves_one_slice_a_round() -> None:
    gate = EventTimeGate(T0, UNPACED_SLICE_PS, participants=1)
    seen = [gate.limit_ts]
    for _ in range(3):
        await asyncio.wait_for(gate.arrive(False), 10)
        seen.append(gate.limit_ts)
    assert seen == [T0 + k * UNPACED_SLICE_PS for k in range(1, 5)]
