"""`pan generate`: format, determinism, rates and physics of the synthetic match.

One 2.5-minute match (seed 11: it has goals, a save, a foul and a throw-in)
is generated once per test session and read back from the CSV files, so
every check looks at exactly what a user of the data sees.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from pan.cli import main
from simulator.debs import (
    BALLS_HALF1,
    ENTITIES,
    GOAL_X,
    GOAL_Y,
    GOAL_Z,
    HALF1,
    HALF2,
    X_MAX,
    X_MIN,
    Y_MAX,
    Y_MIN,
)
from simulator.match import make_sessions

pytestmark = pytest.mark.process  # every test here starts OS processes

SEED = 11
MINUTES = 2.5
LEAD_PS = 5 * 10**12
PLAYER_SENSORS = {sid: e for e in ENTITIES for sid, _ in e.sensors}
HIT_A = 55e6  # um/s^2


def load_rows(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    flat = np.array(raw.replace(b"\n", b",").split(b",")[:-1], dtype=np.int64)
    return flat.reshape(-1, 13)


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


class Match:
    """A generated match read back from disk, with per-sensor lookups."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.rows = load_rows(out / "full-game")
        sid = self.rows[:, 0]
        self.by_sid = {int(s): self.rows[sid == s] for s in np.unique(sid)}
        _, kicks = read_csv(out / "truth" / "kicks.csv")
        self.kicks = [(int(t), p, int(b)) for t, p, b in kicks]
        _, poss = read_csv(out / "truth" / "possession.csv")
        self.possession = [(p, int(a), int(b)) for p, a, b in poss]
        _, shots = read_csv(out / "truth" / "shots.csv")
        self.shots = [(p, int(a), int(b)) for p, a, b in shots]
        _, intr = read_csv(out / "interruptions.csv")
        self.interruptions = [(int(a), int(b)) for a, b in intr]

    def at(self, sid: int, ts: int) -> np.ndarray:
        """The row of ``sid`` nearest in time to ``ts``."""
        r = self.by_sid[sid]
        j = int(np.clip(np.searchsorted(r[:, 1], ts), 1, len(r) - 1))
        return r[j] if abs(r[j, 1] - ts) < abs(r[j - 1, 1] - ts) else r[j - 1]


@pytest.fixture(scope="module")
def match(tmp_path_factory: pytest.TempPathFactory) -> Match:
    out = tmp_path_factory.mktemp("match")
    assert main(["generate", "--exact", "--minutes", str(MINUTES), "--seed", str(SEED), "--out", str(out)]) == 0
    return Match(out)


def _files(out: Path) -> dict[str, bytes]:
    names = ["full-game", "interruptions.csv", "truth/kicks.csv", "truth/possession.csv", "truth/shots.csv"]
    return {n: (out / n).read_bytes() for n in names}


def test_same_seed_gives_identical_bytes_regardless_of_workers(tmp_path: Path) -> None:
    args = ["generate", "--minutes", "0.3", "--seed", "5"]
    assert main([*args, "--out", str(tmp_path / "a"), "--workers", "1"]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--workers", "2"]) == 0
    assert main(["generate", "--minutes", "0.3", "--seed", "6", "--out", str(tmp_path / "c")]) == 0
    a, b, c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert a == b
    assert a["full-game"] != c["full-game"]
    assert a["truth/kicks.csv"] != c["truth/kicks.csv"]


def test_truth_files_have_the_documented_headers(match: Match) -> None:
    assert read_csv(match.out / "truth" / "kicks.csv")[0] == ["ts", "player", "ball_sid"]
    assert read_csv(match.out / "truth" / "possession.csv")[0] == ["player", "start_ts", "end_ts"]
    assert read_csv(match.out / "truth" / "shots.csv")[0] == ["player", "ts_start", "ts_end"]
    assert read_csv(match.out / "interruptions.csv")[0] == ["start_ts", "end_ts"]
    assert sorted(p.name for p in (match.out / "truth").iterdir()) == ["kicks.csv", "possession.csv", "shots.csv"]


def test_rows_cover_play_plus_lead_and_are_time_ordered(match: Match) -> None:
    ts = match.rows[:, 1]
    assert np.all(np.diff(ts) >= 0)
    assert HALF1[0] - LEAD_PS <= ts[0] < HALF1[0] - LEAD_PS + 10**10
    end = HALF1[0] + round(MINUTES * 60 * 10**12)
    assert end + LEAD_PS - 10**10 < ts[-1] < end + LEAD_PS
    # 38 sensors at 200 Hz and 3 balls at 2000 Hz over the whole window, exactly.
    seconds = MINUTES * 60 + 10
    assert len(match.rows) == round(seconds * (38 * 200 + 3 * 2000))


def test_every_sensor_transmits_at_its_real_rate(match: Match) -> None:
    expected = set(PLAYER_SENSORS) | set(BALLS_HALF1)
    assert set(match.by_sid) == expected  # ball 12 only in the second half
    for sid, r in match.by_sid.items():
        rate = 2000.0 if sid in BALLS_HALF1 else 200.0
        window = r[(r[:, 1] >= HALF1[0]) & (r[:, 1] < HALF1[0] + 60 * 10**12)]
        assert abs(len(window) / 60.0 - rate) <= rate * 0.01, sid
        gaps = np.diff(r[:, 1])
        assert gaps.min() == gaps.max() == 10**12 // rate


def test_direction_vectors_have_length_10000(match: Match) -> None:
    for col in (7, 10):
        norm = np.sqrt((match.rows[:, col : col + 3].astype(float) ** 2).sum(axis=1))
        assert np.all(np.abs(norm - 10_000) <= 50)


def test_players_move_in_every_speed_band_and_never_too_fast(match: Match) -> None:
    player_rows = match.rows[np.isin(match.rows[:, 0], list(PLAYER_SENSORS))]
    assert player_rows[:, 5].max() / 1e6 * 3.6 <= 36.0
    bands = np.zeros(6)
    for e in ENTITIES[:16]:
        legs = [match.by_sid[sid] for sid, kind in e.sensors if kind.startswith("leg")]
        n = min(len(legs[0]), len(legs[1]))
        body = (legs[0][:n, 2:4] + legs[1][:n, 2:4]) / 2.0 / 1000.0  # legs average to the body
        speed = np.hypot(*np.diff(body, axis=0).T) / 0.005 * 3.6
        bands += np.histogram(speed, bins=[-1, 1, 11, 14, 17, 24, 100])[0]
        assert speed.max() <= 33.0
    assert np.all(bands > 0), bands  # standing, trot, low, medium, high and sprint all occur


def test_ball_speed_is_physical(match: Match) -> None:
    for b in BALLS_HALF1:
        assert match.by_sid[b][:, 5].max() / 1e6 <= 45.0


def _inside(r: np.ndarray) -> np.ndarray:
    return (r[:, 2] >= X_MIN * 1000) & (r[:, 2] <= X_MAX * 1000) & (r[:, 3] >= Y_MIN * 1000) & (r[:, 3] <= Y_MAX * 1000)


def test_exactly_one_ball_in_play_while_play_runs(match: Match) -> None:
    balls = [match.by_sid[b] for b in BALLS_HALF1]
    n = min(len(b) for b in balls)
    inside = np.stack([_inside(b[:n]) for b in balls])
    count = inside.sum(axis=0)
    assert count.max() == 1
    ts = balls[0][:n, 1]
    stopped = np.zeros(n, dtype=bool)
    for a, b in match.interruptions:
        stopped |= (ts >= a) & (ts <= b)
    running = ~stopped & (ts >= HALF1[0])
    assert np.all(count[running] == 1)


def test_acceleration_spikes_happen_only_at_truth_kicks(match: Match) -> None:
    kick_ts = {b: np.array([t for t, _, sid in match.kicks if sid == b]) for b in BALLS_HALF1}
    for b in BALLS_HALF1:
        r = match.by_sid[b]
        spikes = r[r[:, 6] >= HIT_A, 1]
        k = kick_ts[b]
        i = np.searchsorted(k, spikes, side="right") - 1
        assert np.all(i >= 0)
        assert np.all(spikes - k[i] < 3 * 10**9)  # the spike lasts a few samples after the kick


def test_each_kick_is_an_unambiguous_hit_by_its_player(match: Match) -> None:
    assert len(match.kicks) > 50
    for ts, player, ball in match.kicks:
        row = match.at(ball, ts)
        assert row[1] == ts and row[6] >= HIT_A
        pos = row[2:5] / 1000.0
        for sid, e in PLAYER_SENSORS.items():
            d = np.linalg.norm(match.at(sid, ts)[2:5] / 1000.0 - pos)
            if e.name == player:
                continue
            assert d > 1.0, (ts, player, e.name, d)
        mine = [np.linalg.norm(match.at(sid, ts)[2:5] / 1000.0 - pos) for sid, _ in
                next(e for e in ENTITIES if e.name == player).sensors]
        assert min(mine) <= 1.0


def test_possession_intervals_follow_kicks_and_never_overlap(match: Match) -> None:
    assert match.possession
    kicks = {(t, p) for t, p, _ in match.kicks}
    last_end = 0
    for player, start, end in match.possession:
        assert (start, player) in kicks
        assert start >= last_end and end > start
        last_end = end


def test_no_kicks_during_interruptions_and_possession_ends_there(match: Match) -> None:
    assert len(match.interruptions) >= 2
    for a, b in match.interruptions:
        assert b > a
        assert not any(a <= t <= b for t, _, _ in match.kicks)
        assert not any(s < a < e for _, s, e in match.possession)


def test_ball_leaves_the_pitch_at_out_interruptions(match: Match) -> None:
    left = 0
    for a, _ in match.interruptions[:-1]:
        rows = [match.at(b, a + 10**10) for b in BALLS_HALF1]
        was_active = [match.at(b, a - 10**10) for b in BALLS_HALF1]
        active = [i for i, r in enumerate(was_active) if _inside(r[None])[0]]
        assert len(active) == 1
        if not _inside(rows[active[0]][None])[0]:
            left += 1
    assert left >= 1


def test_shots_head_into_the_opponents_goal_within_1_5_s(match: Match) -> None:
    assert match.shots
    for player, start, end in match.shots:
        assert end > start
        ball = next(b for t, p, b in match.kicks if t == start and p == player)
        row = match.at(ball, start)
        pos, vel = row[2:5] / 1000.0, row[5] / 1e6 * row[7:10] / 10_000
        side = 1 if player.startswith("A") else -1  # first half: A attacks +y
        tau = (GOAL_Y[side] - pos[1]) / vel[1]
        assert 0 < tau <= 1.5
        x, z = pos[0] + vel[0] * tau, pos[2] + vel[2] * tau
        assert GOAL_X[side][0] - 0.3 < x < GOAL_X[side][1] + 0.3 and z < GOAL_Z


def test_other_kicks_do_not_look_like_shots(match: Match) -> None:
    shots = {(s, p) for p, s, _ in match.shots}
    for ts, player, ball in match.kicks:
        if (ts, player) in shots:
            continue
        row = match.at(ball, ts)
        pos, vel = row[2:5] / 1000.0, row[5] / 1e6 * row[7:10] / 10_000
        side = 1 if player.startswith("A") else -1
        if vel[1] * side <= 0:
            continue
        tau = (GOAL_Y[side] - pos[1]) / vel[1]
        x = pos[0] + vel[0] * tau
        assert not (tau <= 1.2 and GOAL_X[side][0] + 0.3 < x < GOAL_X[side][1] - 0.3), (ts, player)


def test_longer_matches_continue_into_the_second_half() -> None:
    sessions = make_sessions(40.0, 1)
    assert [s.ko_ps for s in sessions] == [HALF1[0], HALF2[0]]
    assert sessions[0].end_ps == HALF1[1] + LEAD_PS
    assert sessions[1].end_ps == HALF2[0] + round((40 * 60 - (HALF1[1] - HALF1[0]) / 1e12) * 1e12) + LEAD_PS
    assert 12 in sessions[1].balls and 12 not in sessions[0].balls
    assert sessions[0].attack_a == 1 and sessions[1].attack_a == -1
    full = make_sessions(None, 1)
    assert full[1].end_ps == HALF2[1] + LEAD_PS


def test_rejects_nonpositive_minutes(tmp_path: Path) -> None:
    assert main(["generate", "--exact", "--minutes", "0", "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_second_half_has_ball_12_and_real_timestamps(tmp_path: Path) -> None:
    minutes = (HALF1[1] - HALF1[0]) / 60e12 + 0.2
    assert main(["generate", "--exact", "--minutes", f"{minutes:.4f}", "--seed", "2", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "full-game", "rb") as f:
        f.seek(-20_000_000, 2)
        tail = load_rows_from(f.read())
    assert tail[-1, 1] > HALF2[0]
    second = tail[tail[:, 1] >= HALF2[0]]
    assert 12 in set(second[:, 0].tolist())
    _, intr = read_csv(tmp_path / "interruptions.csv")
    assert any(int(a) >= HALF1[1] - 10**12 and int(b) < HALF2[0] for a, b in intr)  # the break


def load_rows_from(chunk: bytes) -> np.ndarray:
    body = chunk[chunk.index(b"\n") + 1 :]
    return np.array(body.replace(b"\n", b",").split(b",")[:-1], dtype=np.int64).reshape(-1, 13)
