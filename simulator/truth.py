"""Ground truth of a generated match: kicks, possession, shots, interruptions.

Derived from the exact ball tracks of pass 2 with the DESIGN definitions
(Q2 possession, Q4 shot = hit whose path enters the opponent's goal mouth
within 1.5 s), never from any detector code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator import geometry as geo
from simulator.ball import KickResult
from simulator.debs import ENTITIES, PS_PER_S
from simulator.plan_script import Session

RESUME_LEAD_PS = 200 * 10**9  # an interruption ends 0.2 s before the restart kick


@dataclass
class Truth:
    kicks: list[tuple[int, str, int]] = field(default_factory=list)  # ts, player, ball
    possession: list[tuple[str, int, int]] = field(default_factory=list)  # player, start, end
    shots: list[tuple[str, int, int]] = field(default_factory=list)  # player, start, end
    interruptions: list[tuple[int, int]] = field(default_factory=list)  # start, end
    near_misses: int = 0  # kicks whose path passes within 0.5 m / 0.3 s of the shot definition's edge


def _ps(session: Session, t: float) -> int:
    return session.ko_ps + round(t * PS_PER_S)


def add_session(truth: Truth, session: Session, results: list[KickResult], next_ko_ps: int | None) -> None:
    """Append one half's truth; ``next_ko_ps`` is the following half's kick-off, if generated."""
    kicks = session.kicks
    stop_ps: list[int] = []
    for st in session.stops:
        res = results[st.kick_before] if st.kick_before >= 0 else None
        start = _ps(session, res.t_out) if res is not None and res.t_out is not None else _ps(session, st.start)
        if st.restart is not None:
            end = kicks[st.restart].t_ps - RESUME_LEAD_PS
        elif next_ko_ps is not None:
            end = next_ko_ps - RESUME_LEAD_PS
        else:
            end = session.end_ps
        truth.interruptions.append((start, end))
        stop_ps.append(start)
    events = [(k.t_ps, 1, k.player) for k in kicks] + [(s, 0, -1) for s in stop_ps]
    events.sort()
    holder, since = -1, 0
    for ts, is_kick, player in events:
        if is_kick and player == holder:
            continue
        if holder >= 0:
            truth.possession.append((ENTITIES[holder].name, since, ts))
        holder, since = (player, ts) if is_kick else (-1, 0)
    if holder >= 0:
        truth.possession.append((ENTITIES[holder].name, since, session.end_ps))
    for i, (k, r) in enumerate(zip(kicks, results, strict=True)):
        truth.kicks.append((k.t_ps, ENTITIES[k.player].name, k.ball))
        side = session.attack(k.player)
        entry = geo.goal_entry_time(r.start, r.direction, r.u, r.d, r.vz, r.g, side)
        is_shot = entry is not None and entry <= geo.SHOT_HORIZON
        wide = geo.goal_entry_time(r.start, r.direction, r.u, r.d, r.vz, r.g, side, 0.5)
        narrow = geo.goal_entry_time(r.start, r.direction, r.u, r.d, r.vz, r.g, side, -0.5)
        clear_in = narrow is not None and narrow <= geo.SHOT_HORIZON - 0.3
        clear_out = wide is None or wide > geo.SHOT_HORIZON + 0.3
        if not (clear_in or clear_out):
            truth.near_misses += 1
        if is_shot:
            later = [ts for ts in stop_ps if ts > k.t_ps]
            if i + 1 < len(kicks):
                later.append(kicks[i + 1].t_ps)
            truth.shots.append((ENTITIES[k.player].name, k.t_ps, min(later) if later else session.end_ps))


def write_truth(truth: Truth, out_dir, interruptions_dir) -> None:
    """Write the truth CSVs (header row, times in ps)."""
    tdir = out_dir / "truth"
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "kicks.csv").write_text("ts,player,ball_sid\n" + "".join(f"{t},{p},{b}\n" for t, p, b in truth.kicks))
    (tdir / "possession.csv").write_text(
        "player,start_ts,end_ts\n" + "".join(f"{p},{a},{b}\n" for p, a, b in truth.possession)
    )
    (tdir / "shots.csv").write_text("player,ts_start,ts_end\n" + "".join(f"{p},{a},{b}\n" for p, a, b in truth.shots))
    (interruptions_dir / "interruptions.csv").write_text(
        "start_ts,end_ts\n" + "".join(f"{a},{b}\n" for a, b in truth.interruptions)
    )
