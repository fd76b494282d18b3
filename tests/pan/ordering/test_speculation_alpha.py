"""A speculative worker's ordering object and its alpha: the object's checks, raw reading, Algorithm 3's
adaptation, and the CPU busy shares that ``alpha: auto`` watches."""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path

import pytest

from pan.ordering.speculation_settings import validate_ordering_object


def test_ordering_object_is_checked() -> None:
    assert validate_ordering_object({"mode": "speculative", "alpha": 0.5}) == []
    assert validate_ordering_object({"mode": "speculative", "alpha": "auto", "max_snapshot_bytes": 10}) == []
    problems = validate_ordering_object({"mode": "fast", "alpha": 2, "extra": 1})
    assert any("ordering.mode" in p for p in problems)
    assert any("ordering.extra" in p for p in problems)
    assert validate_ordering_object({"mode": "speculative", "alpha": 1.5})
    assert validate_ordering_object({"alpha": 0.5})  # alpha only with speculative
    assert validate_ordering_object({"mode": "speculative", "max_snapshot_bytes": -1})
    assert validate_ordering_object([1])
    assert validate_ordering_object({"mode": "speculative", "input_view": "settled"}) == []
    assert any("ordering.input_view" in p for p in validate_ordering_object({"mode": "speculative", "input_view": "x"}))
    assert any("ordering.input_view" in p for p in validate_ordering_object({"input_view": "raw"}))
    assert validate_ordering_object({"mode": "speculative", "alpha": "auto", "cpu": "component"}) == []
    for wrong in ({"alpha": "auto", "cpu": 1}, {"alpha": 0.5, "cpu": "machine"}):
        assert any("ordering.cpu" in p for p in validate_ordering_object({"mode": "speculative", **wrong}))


def test_a_speculative_worker_reads_raw_unless_told_otherwise() -> None:
    from pan.components.ordered import Merge
    from pan.config.specs import WorkerSpec

    def spec(ordering: dict | None) -> WorkerSpec:
        return WorkerSpec(name="M", type="merge", host="127.0.0.1", port=1, peer="p", inputs=["A"],
                          params={"output": "X"}, ordering=ordering)

    assert Merge.reads_raw(spec({"mode": "speculative"}))
    assert not Merge.reads_raw(spec({"mode": "speculative", "input_view": "settled"}))
    assert not Merge.reads_raw(spec(None))


def test_alpha_adaptation_follows_algorithm_3() -> None:
    """Halve while there is headroom, back to 1 when busy, then halve down to the bisection line and step."""
    from pan.ordering.alpha_controller import AlphaController

    control = AlphaController(low=0.8, high=0.9, step=0.05)
    assert [control.update(0.5) for _ in range(3)] == [0.5, 0.25, 0.125]
    assert control.update(0.85) == 0.125  # inside the target zone: unchanged
    assert control.update(0.95) == 1.0 and control.last_minimum == 0.125 and control.resets == 1
    # (1 - 0.125) / 2 = 0.4375: 1 -> 0.5 halves; 0.25 would cross the line, so it steps by 0.05 from then on.
    assert control.update(0.5) == 0.5
    assert control.update(0.5) == pytest.approx(0.45)
    assert control.update(0.5) == pytest.approx(0.40)
    assert control.slow


def test_busy_share_is_the_busy_share_since_the_previous_reading() -> None:
    from pan.util.cpu_share import BusyShare

    readings = iter([(10.0, 100.0), (19.0, 110.0), (19.0, 120.0), (19.0, 120.0)])
    cpu = BusyShare(lambda: next(readings))
    assert cpu.known
    assert cpu.busy_share() == pytest.approx(0.9)  # 9 of 10 s busy
    assert cpu.busy_share() == 0.0  # idle
    assert cpu.busy_share() == 0.0  # no time passed: nothing to say
    assert BusyShare(None).busy_share() == 0.0 and not BusyShare(None).known


def test_the_loop_share_counts_a_thread_that_works_and_not_one_that_sleeps() -> None:
    """Running and waiting for a core both count as busy, so a spinning thread is busy whatever else the
    machine runs; a sleeping thread is not (the sleep is the idleness under test)."""
    from pan.util.cpu_share import BusyShare, loop_reader

    reader = loop_reader()
    if reader is None:
        pytest.skip("this kernel has no /proc/thread-self/schedstat")
    share = BusyShare(reader)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    assert share.busy_share() > 0.8  # the kernel adds a wait to the total when it ends: allow one in progress
    time.sleep(0.5)
    assert share.busy_share() < 0.5


def test_the_loop_reader_is_none_without_schedstat(tmp_path: Path) -> None:
    from pan.util.cpu_share import loop_reader

    assert loop_reader(tmp_path / "missing") is None


@pytest.mark.parametrize("signal", ["loop", "machine", "component"])
def test_alpha_auto_backs_off_when_the_cpu_is_busy_unless_told_to_watch_the_component(signal: str) -> None:
    """A starved component works little while its loop waits for a core or every core is taken: with
    ``cpu: loop`` or ``cpu: machine`` that busy share counts too, so alpha goes back to 1 instead of
    halving; with ``cpu: component`` (the default) only the component's own work does."""
    from pan.components.testing import build_component
    from pan.util.cpu_share import BusyShare

    component = build_component("merge", {"output": "X", "clock_mode": "watermark"}, ["A"],
                                ordering={"mode": "speculative", "alpha": "auto", "cpu": signal})
    if signal == "component":
        assert component._cpu_share is None
    else:
        assert component._cpu_share is not None
        busy = iter([(0.0, 0.0), (0.95, 1.0), (1.9, 2.0)])  # 95% busy
        component._cpu_share = BusyShare(lambda: next(busy))
    for _ in range(2):
        component.unit.adapt(component._busy_share(0.1))  # the component itself works 10% of the time
    assert component.unit.alpha == (Fraction(1, 4) if signal == "component" else 1)


def test_alpha_auto_watches_the_component_by_default() -> None:
    from pan.components.testing import build_component

    component = build_component("merge", {"output": "X", "clock_mode": "watermark"}, ["A"],
                                ordering={"mode": "speculative", "alpha": "auto"})
    assert component.unit.speculation.cpu == "component" and component._cpu_share is None
