"""What a sensor simulation (``simulator/simulate.py``) is asked to do, and why it cannot start."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pan.config.specs import Workflow
from simulator.clock import LocalTime, TimeProvider
from simulator.debs import HALF1, HALF2
from simulator.impair import ImpairProfile
from simulator.wtt import Address

if TYPE_CHECKING:
    from simulator.backpressure import FeedBrake

CONNECT_TIMEOUT_S = 2.0  # one connection attempt to a receiver
GIVE_UP_S = 10.0  # unpaced: how long a sensor waits for an unreachable receiver before counting its rows lost


class SimulateError(Exception):
    """The simulation cannot start (bad data folder, no WTT master, ...)."""


@dataclass
class SimulateOptions:
    workflow: Workflow
    data_dir: Path
    sensors: list[str] | None = None  # stream names or bare sensor ids; None = every file + INTERRUPTIONS
    #: (K, N): of the selected sensors, only every N-th by name from the K-th, INTERRUPTIONS with K = 0; the
    #: origin and the half-time break still come from every file, so N simulators on one WTT clock keep one pace.
    share: tuple[int, int] | None = None
    speedup: float = 1.0  # 0 = unpaced
    start_at_ms: int | None = None  # epoch ms on the provider's clock; None = right after connecting
    skip_halftime: bool = False
    halftime: tuple[int, int] = (HALF1[1], HALF2[0])  # at most this break; the data's own can be longer
    from_ts: int | None = None
    to_ts: int | None = None
    impair: ImpairProfile | None = None
    clock: TimeProvider = field(default_factory=LocalTime)
    wtt_master: Address | None = None
    wtt_slave: Address | None = None
    wtt_sync_timeout_s: float = 10.0
    send_log: Path | None = None
    check_period_ms: float = 10.0
    progress: bool = False
    progress_out: TextIO | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S  # one connection attempt
    give_up_s: float = GIVE_UP_S  # unpaced only: how long to wait for an unreachable receiver
    lead_ms: float = 50.0  # start this long after connecting when no start_at is given
    stop: asyncio.Event | None = None  # set to end the simulation early (Ctrl-C)
    #: Waits while the workflow is behind (`simulator/backpressure.py`); None: the feed keeps its pace and a
    #: workflow that cannot keep up loses what its buffers overwrite.
    brake: FeedBrake | None = None
