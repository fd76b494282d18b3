"""Write the DEBS 2013 workflow files in workflows/ from one description.

The full game is one set of workers; the 3-, 6-, 8- and 14-peer files only
differ in which peer (OS process) each worker runs in, so results must be
identical across them.  Each full game also comes in ``max`` mode
(``full_game_<n>_peers_max.json``): the same workers with clock-stream
ordering (adaptive K-slack) instead of watermarks.
Run: `.venv/bin/python scripts/make_workflows.py`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workers.debs import BALLS, PLAYER_SENSORS, PLAYERS, REFEREE_SENSORS

OUT = Path(__file__).resolve().parents[1] / "workflows"
HOST = "127.0.0.1"
MS = 10**9  # ps

#: Ordering settings of every DEBS component: each sensor stream is in ts order, so the
#: slowest stream's progress (the watermark) orders exactly; K covers disorder inside a stream.
ORDERING: dict[str, Any] = {"clock_mode": "watermark", "lambda": 1.0}

#: Max (clock-stream) mode: clk is the largest ts (or promise) of a unit's clock streams, K the learnt
#: delay of the rest (docs/ordering.md, "Max mode in the full game"). Per component type, its clock
#: streams: None = every input, where all inputs are of one kind or from one producer and so share
#: their delays; a derived input is named alone where it is the slowest one, so the faster raw
#: inputs wait for it without K having to learn its lag, and its producer's promises move clk on
#: when it is sparse (BALLHITS) or quiet.
MAX_CLOCKS: dict[str, list[str] | None] = {
    "active_ball": None,  # the balls: one kind, one forwarder
    "ball_hits": ["ACTIVEBALL"],  # players' sensors arrive before the derived ball
    "player_possession": ["BALLHITS"],  # a hit comes after the ball rows around it
    "shots": ["BALLHITS"],
    "team_possession": ["BALLHITS"],  # same inputs and state machine as player_possession
    "player_average": None,  # raw sensors of one kind, one forwarder
    "running": None,  # player averages from one producer
    "heatmap": None,
}

TEAM_A = [p for p in PLAYERS if p.startswith("A")]
TEAM_B = [p for p in PLAYERS if p.startswith("B")]


def sensors(players: list[str]) -> list[str]:
    return [f"SENSOR{sid}" for p in players for sid in PLAYER_SENSORS[p]]


def max_mode(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same workers with clock-stream ordering (``MAX_CLOCKS``) instead of watermarks."""
    out = []
    for worker in workers:
        params = worker.get("params")
        if params is not None and params.get("clock_mode") == "watermark":
            clock = MAX_CLOCKS[worker["type"]]
            params = {**params, "clock_mode": "max", **({"clock": clock} if clock else {})}
            worker = {**worker, "params": params}
        out.append(worker)
    return out


def full_game_workers(min_k_ms: int = 0, mode: str = "watermark") -> list[dict[str, Any]]:
    """(name, type, params, extra) of every worker of the full game, in start order."""
    ordering = {**ORDERING, "min_k": min_k_ms * MS}
    workers = [
        {"name": "Forwarder balls", "type": "forwarder",
         "inter_pan_inputs": [f"SENSOR{b}" for b in BALLS] + ["INTERRUPTIONS"], "buffer_size": 400_000},
        {"name": "Forwarder team A", "type": "forwarder", "inter_pan_inputs": sensors(TEAM_A), "buffer_size": 100_000},
        {"name": "Forwarder team B", "type": "forwarder",
         "inter_pan_inputs": sensors(TEAM_B) + [f"SENSOR{s}" for s in REFEREE_SENSORS], "buffer_size": 100_000},
        {"name": "Active ball", "type": "active_ball", "params": dict(ordering), "buffer_size": 400_000},
        {"name": "Ball hits", "type": "ball_hits", "params": dict(ordering)},
        {"name": "Players possession", "type": "player_possession", "params": dict(ordering)},
        {"name": "Teams possession", "type": "team_possession", "params": dict(ordering)},
        {"name": "Shots", "type": "shots", "params": dict(ordering), "buffer_size": 50_000},
        {"name": "Average team A", "type": "player_average", "params": {**ordering, "players": TEAM_A},
         "buffer_size": 100_000},
        {"name": "Average team B", "type": "player_average",
         "params": {**ordering, "players": [*TEAM_B, "REFEREE"]}, "buffer_size": 100_000},
        {"name": "Running team A", "type": "running", "params": {**ordering, "players": TEAM_A}},
        {"name": "Running team B", "type": "running", "params": {**ordering, "players": TEAM_B}},
        {"name": "Heat maps team A", "type": "heatmap", "params": {**ordering, "players": TEAM_A}, "buffer_size": 120},
        {"name": "Heat maps team B", "type": "heatmap", "params": {**ordering, "players": TEAM_B}, "buffer_size": 120},
    ]
    return max_mode(workers) if mode == "max" else workers


#: worker name -> peer, per distribution. 14 peers = one worker per process.
DISTRIBUTIONS: dict[int, list[list[str]]] = {
    3: [
        ["Forwarder balls", "Active ball", "Ball hits", "Players possession", "Teams possession", "Shots"],
        ["Forwarder team A", "Average team A", "Running team A", "Heat maps team A"],
        ["Forwarder team B", "Average team B", "Running team B", "Heat maps team B"],
    ],
    6: [
        ["Forwarder balls", "Active ball", "Ball hits"],
        ["Players possession", "Teams possession", "Shots"],
        ["Forwarder team A", "Average team A"],
        ["Forwarder team B", "Average team B"],
        ["Running team A", "Heat maps team A"],
        ["Running team B", "Heat maps team B"],
    ],
    8: [
        ["Forwarder balls", "Active ball"],
        ["Ball hits", "Shots"],
        ["Players possession", "Teams possession"],
        ["Forwarder team A", "Average team A"],
        ["Forwarder team B", "Average team B"],
        ["Running team A", "Running team B"],
        ["Heat maps team A"],
        ["Heat maps team B"],
    ],
}


def place(workers: list[dict[str, Any]], peers: list[list[str]], base_port: int) -> list[dict[str, Any]]:
    peer_of = {name: f"peer{n + 1}" for n, names in enumerate(peers) for name in names}
    placed = []
    for n, worker in enumerate(workers):
        spec = {"name": worker["name"], "type": worker["type"], "host": HOST, "port": base_port + 1 + n,
                "peer": peer_of[worker["name"]]}
        spec.update({k: v for k, v in worker.items() if k not in ("name", "type", "inter_pan_inputs")})
        if worker["type"] == "forwarder":  # its own keys go in its params; the sensors send CSV rows
            spec["params"] = {"ingest_port": base_port + 51 + n, "inter_pan_inputs": worker["inter_pan_inputs"],
                              "decoder": "debs_csv"}
        placed.append(spec)
    return placed


def workflow(name: str, base_port: int, workers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "repository": {"host": HOST, "port": base_port, "refresh_ms": 2000}, "workers": workers}


def full_game(peers: int, base_port: int, min_k_ms: int = 0, mode: str = "watermark") -> dict[str, Any]:
    workers = full_game_workers(min_k_ms, mode)
    layout = DISTRIBUTIONS.get(peers) or [[w["name"]] for w in workers]
    assert sorted(name for names in layout for name in names) == sorted(w["name"] for w in workers), peers
    title = f"DEBS 2013 full game on {peers} peers" + (", max (clock-stream) ordering" if mode == "max" else "")
    return workflow(title, base_port, place(workers, layout, base_port))


def heat_map_one_player(player: str, base_port: int) -> dict[str, Any]:
    workers = [
        {"name": f"Forwarder {player}", "type": "forwarder", "inter_pan_inputs": sensors([player])},
        {"name": f"Average {player}", "type": "player_average", "params": {**ORDERING, "players": [player]}},
        {"name": f"Heat maps {player}", "type": "heatmap", "params": {**ORDERING, "players": [player]},
         "buffer_size": 60},
    ]
    layout = [[w["name"] for w in workers]]
    return workflow(f"Heat maps of player {player} on one peer", base_port, place(workers, layout, base_port))


def forwarding(repeaters: int, base_port: int) -> dict[str, Any]:
    streams = [f"SENSOR{s}" for s in (*BALLS, *REFEREE_SENSORS)] + sensors(PLAYERS)
    workers: list[dict[str, Any]] = [{"name": "Forwarder", "type": "forwarder", "inter_pan_inputs": streams}]
    workers += [
        {"name": f"Repeater {n}", "type": "repeater", "inputs": streams, "params": {"level": n}}
        for n in range(1, repeaters + 1)
    ]
    layout = [[w["name"]] for w in workers]
    label = "no repeater" if not repeaters else f"{repeaters} repeater{'s' * (repeaters > 1)}"
    return workflow(f"Sensor forwarding: 1 forwarder, {label}", base_port, place(workers, layout, base_port))


def main() -> None:
    files = {f"full_game_{p}_peers.json": full_game(p, 21000 + 1000 * n) for n, p in enumerate((3, 6, 8, 14))}
    for n, p in enumerate((3, 6, 8, 14)):
        files[f"full_game_{p}_peers_max.json"] = full_game(p, 31000 + 1000 * n, mode="max")
    files["heatmap_A2.json"] = heat_map_one_player("A2", 25000)
    for repeaters in (0, 1, 2):
        files[f"forwarding_{repeaters}_repeaters.json"] = forwarding(repeaters, 26000 + 1000 * repeaters)
    for name, content in files.items():
        (OUT / name).write_text(json.dumps(content, indent=1) + "\n")
        print(f"wrote workflows/{name}")


if __name__ == "__main__":
    main()
