"""The match dashboard's server: PAN's live view with the soccer page and what the page needs to know."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pan.live.hub import StreamHub
from pan.live.web import DELAYS, NETWORK, DelayWatch, LiveServer, network_source
from pan.repository.client import Address
from workers.debs import (
    FIRST_HALF,
    GOAL_NORTH,
    GOAL_SOUTH,
    PLAYER_NAMES,
    PLAYER_SENSORS,
    PLAYERS,
    SECOND_HALF,
    WINDOWS,
    X_MAX,
    X_MIN,
    Y_MAX,
    Y_MIN,
    sensor_stream,
)
from workers.heatmap import GRIDS, HM_WINDOWS

STATIC = Path(__file__).resolve().parent / "static"
#: The shots feed keeps this many recent shots; every other stream only its newest tuple.
SHOTS_KEPT = 20
#: An input of the network whose arrival times the query delays are measured against (a player's sensor).
DEFAULT_DELAY_REFERENCE = sensor_stream(PLAYER_SENSORS["A2"][0])


def page_config(delay_reference: str) -> dict[str, Any]:
    """What the page draws with: the pitch, the players, windows, grids and the halves."""
    return {
        "pitch": {"x_min": X_MIN, "x_max": X_MAX, "y_min": Y_MIN, "y_max": Y_MAX,
                  "goals": [{"y": g.y, "x_min": g.x_min, "x_max": g.x_max} for g in (GOAL_NORTH, GOAL_SOUTH)]},
        "players": list(PLAYERS),
        "names": PLAYER_NAMES,
        "windows": list(WINDOWS),
        "heatmap_windows": list(HM_WINDOWS),
        "grids": {name: list(size) for name, size in GRIDS.items()},
        "halves": [list(FIRST_HALF), list(SECOND_HALF)],
        "delay_reference": delay_reference,
    }


def build(repositories: Address | Sequence[Address], *, token: str | None = None, tls: ssl.SSLContext | None = None,
          delay_reference: str = DEFAULT_DELAY_REFERENCE, network_interval_s: float = 2.0) -> LiveServer:
    delays = DelayWatch(delay_reference)
    hub = StreamHub(repositories, token=token, keep=lambda s: SHOTS_KEPT if s == "SHOTS" else 1,
                    subscriber_options={"tls": tls})
    hub.sources[NETWORK] = network_source(repositories, token=token, tls=tls, interval_s=network_interval_s)
    hub.sources[DELAYS] = delays.source(hub)
    hub.on_tuples.append(delays.observe)
    return LiveServer(hub, STATIC, config=page_config(delay_reference))
