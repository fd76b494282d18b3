"""Ball hit detector: who kicked the ball (DESIGN §6, Q2).

A hit is the active ball within 1 m of a player's sensor while the ball's
|a| >= 55 m/s^2. Inputs are ``ACTIVEBALL`` (full rate, see workers/ball.py)
and every player's leg and hand sensor stream; the referee is not subscribed,
so the referee never hits.

* Player positions at a ball sample's ts are the latest sample of each sensor
  at or before that ts: the ordering unit delivers rows in (ts, stream
  position) order and ``ACTIVEBALL`` is the last input, so a player sample
  with the ball's very ts is already applied; this is fixed by the input
  alone. Samples older than ``stale_ms`` are ignored, so a sensor that went
  quiet cannot kick.
* A kick shows as a short spike: ball samples over the threshold. Samples of
  one ball over the threshold form one *spike* as long as each comes less
  than ``rearm_ms`` (10 ms, about a kick's contact time) after the previous
  one; samples under the threshold in between do not end it. A catch or a
  soft touch decelerates the ball near the threshold for tens of ms, and its
  noisy |a| flickers across it: one contact, one spike. A spike yields at
  most one hit: at its first sample that has a player sensor within range.
  The hit's ``ts``, position and ``a`` are that sample's; it is emitted at
  once (no waiting for the peak).
* When several players are within range, the one with the nearest sensor
  (3-D distance) is the hitter; such cases are counted as ``ambiguous``.
* ``policy: nfp`` (docs/policies.md): a spike row is *in doubt* when ball rows
  are missing in the spike (a ts step of several ball periods, or a reported
  loss) or a player sensor that lost rows (its latest row older than 1.6
  periods) could, having moved at up to 12 m/s since, have been nearer than
  the hitter (or within range when nobody is). Such a hit is withheld, and
  instead of it, or of a spike that found nobody while in doubt, a *doubt
  marker* ``{"ts", "doubt": "hit", "sid", "x", "y", "z", "a"}`` (no
  ``player``) goes out on BALLHITS, so possession and shots know a hit may
  be missing there.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from pan.buffers.tuples import Tuple
from pan.components.catalog import register
from pan.components.ordered import OrderedComponent
from pan.config.specs import WorkerSpec
from workers import debs
from workers.arrays import PARAM as ARRAYS
from workers.arrays import ArrayPath, arrays_param
from workers.nfp import BALL_GAP_PS, PLAYER_GAP_PS, Doubts, GapWatch

OUTPUT = "BALLHITS"
BALL_INPUT = "ACTIVEBALL"
DEFAULTS: dict[str, Any] = {
    "threshold": 55_000_000,  # µm/s^2 (55 m/s^2)
    "radius_mm": 1000,
    "stale_ms": 250,
    "rearm_ms": 10,
}
MAX_SPEED_MM_PER_PS = 12e-9  # 12 m/s: how far a sensor that lost rows may have moved since its latest one


def player_streams() -> list[str]:
    return [debs.sensor_stream(sid) for sids in debs.PLAYER_SENSORS.values() for sid in sids]


@register
class BallHits(ArrayPath, OrderedComponent):
    """Emits one ``BALLHITS`` tuple per kick: ``player, sid, x, y, z, a``."""

    ROW_FIELDS = ("sid", "ts", "x", "y", "z", "a")
    ARRAYS_DEFAULT = False
    COLUMN_INPUTS = True  # the players' rows (the active ball's come as tuples from an ordinary stream)
    #: Not by default: hits pull the players' rows from the forwarders of other peers, where columns are one
    #: Arrow page per stream and request against JSON pages of many streams in one. A replay on 3 peers was
    #: slower with them (5 interleaved each, 2026-11-28: 115,063 rows/s end to end against 123,573, CPU 12.1 s
    #: against 11.3).
    COLUMN_INPUTS_UNSET = False

    type_name = "ball_hits"
    state_attributes = ("latest", "spike_sid", "spike_done", "spike_last", "spike_start", "bad", "other_sid", "hits",
                        "ambiguous", "spikes", "decided_spikes", "doubts", "ball_gaps", "withheld", "doubt_markers",
                        "rows_on_arrays")
    own_params: ClassVar[tuple[str, ...]] = (*DEFAULTS, ARRAYS)

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        return list(spec.inputs) if spec.inputs else [*player_streams(), BALL_INPUT]

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [OUTPUT]

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        problems = []
        for key in DEFAULTS:
            value = spec.params.get(key, DEFAULTS[key])
            if type(value) not in (int, float) or not value > 0:
                problems.append(f"{key}: must be a positive number, got {value!r}")
        return problems + arrays_param(spec)[1]

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        conf = {key: self.params.get(key, default) for key, default in DEFAULTS.items()}
        self.threshold = conf["threshold"]
        self.radius_sq = conf["radius_mm"] ** 2
        self.stale_ps = round(conf["stale_ms"] * debs.PS_PER_MS)
        self.rearm_ps = round(conf["rearm_ms"] * debs.PS_PER_MS)
        self.output = ctx.outputs[OUTPUT]
        self.owner = {sid: p for p, sids in debs.PLAYER_SENSORS.items() for sid in sids}
        self.balls = frozenset(debs.BALLS)
        #: sid -> (ts, x, y, z) of the latest sample.
        self.latest: dict[int, tuple[int, float, float, float]] = {}
        self.spike_sid: int | None = None  # ball whose spike is running
        self.spike_done = False  # that spike already produced its hit
        self.spike_last = 0  # ts of the spike's latest sample over the threshold
        self.bad = 0
        self.other_sid = 0
        self.hits = 0
        self.ambiguous = 0
        self.spikes = 0
        self.decided_spikes = 0  # spikes that gave a hit or a doubt marker
        self.nfp = self.policy == "nfp"
        self.doubts = Doubts()
        self.ball_gaps = GapWatch(BALL_GAP_PS, self.doubts)
        self.spike_start = 0
        self.withheld = 0
        self.doubt_markers = 0
        # the array path (not under nfp, which watches every ball row for gaps)
        self.arrays = arrays_param(ctx.spec, default=self.ARRAYS_DEFAULT)[0] and not self.nfp
        self._player_sids = np.array(sorted(self.owner), dtype=np.int64)
        self._ball_sids = np.array(sorted(self.balls), dtype=np.int64)
        self.rows_on_arrays = 0

    def _suits(self, table: np.ndarray) -> bool:
        return not self.nfp  # nfp watches every ball row for gaps: the per-event path

    def _process_table(self, table: np.ndarray) -> None:
        """The array path: hit candidates (ball rows at or over the threshold) found at once; player rows
        only update the latest positions, in bulk between candidates."""
        sid = table[:, 0]
        is_player = np.isin(sid, self._player_sids)
        is_ball = ~is_player & np.isin(sid, self._ball_sids)
        self.other_sid += int(len(sid) - is_player.sum() - is_ball.sum())
        players = np.flatnonzero(is_player)
        out: list[dict[str, Any]] = []
        done = 0  # player rows applied to ``latest``
        for j in np.flatnonzero(is_ball & (table[:, 5] >= self.threshold)).tolist():
            upto = int(np.searchsorted(players, j))
            if upto > done:
                self._take_latest(table[players[done:upto]])
                done = upto
            row_sid, ts, x, y, z, a = table[j].tolist()
            self._candidate(row_sid, ts, x, y, z, a, out)
        if done < len(players):
            self._take_latest(table[players[done:]])
        if out:
            self.output.extend(out)

    def _take_latest(self, rows: np.ndarray) -> None:
        """Each sensor's last row of ``rows`` becomes its latest; sensors new to ``latest`` enter in the order
        they first appear, as row by row (``hitter`` breaks ties by that order)."""
        sids, first = np.unique(rows[:, 0], return_index=True)
        last = len(rows) - 1 - np.unique(rows[::-1, 0], return_index=True)[1]
        latest = self.latest
        for _first, s, k in sorted(zip(first.tolist(), sids.tolist(), last.tolist(), strict=True)):
            ts, x, y, z = rows[k, 1:5].tolist()
            latest[s] = (ts, x, y, z)

    def _process_events(self, events: list[Tuple]) -> None:
        """The per-event path (and the array path's for a batch with a row that is not all ints)."""
        out: list[dict[str, Any]] = []
        latest = self.latest
        owner = self.owner
        balls = self.balls
        threshold = self.threshold
        for ev in events:
            try:
                sid = ev["sid"]
                ts = ev["ts"]
                x, y, z = ev["x"], ev["y"], ev["z"]
                check = x + y + z + ts
                check -= check
                is_player = sid in owner
                a = 0 if is_player else ev["a"]
                check += a - a
            except (KeyError, TypeError):
                self.bad += 1
                continue
            if check != 0:
                self.bad += 1
                continue
            if is_player:
                latest[sid] = (ts, x, y, z)
                continue
            if sid not in balls:
                self.other_sid += 1
                continue
            if self.nfp:
                self.ball_gaps.see(sid, ts)
            if a < threshold:
                continue
            self._candidate(sid, ts, x, y, z, a, out)
        if out:
            self.output.extend(out)

    def _candidate(self, sid: int, ts: int, x: Any, y: Any, z: Any, a: Any, out: list[dict[str, Any]]) -> None:
        """A ball row at or over the threshold: the spike it belongs to, and its hit (or doubt marker)."""
        if self.spike_sid != sid or ts - self.spike_last >= self.rearm_ps:
            self.spike_sid, self.spike_done, self.spike_start = sid, False, ts
            self.spikes += 1
            if self.nfp:
                self.doubts.forget_before(ts - debs.PS_PER_S)
        self.spike_last = ts
        if self.spike_done:
            return
        player = self.hitter(ts, x, y, z)
        if self.nfp and self.in_doubt(ts, x, y, z, player):
            self.spike_done = True
            self.decided_spikes += 1
            self.withheld += player is not None
            self.doubt_markers += 1
            out.append({"ts": ts, "doubt": "hit", "sid": sid, "x": x, "y": y, "z": z, "a": a})
            return
        if player is None:
            return
        self.spike_done = True
        self.decided_spikes += 1
        self.hits += 1
        out.append({"ts": ts, "player": player, "sid": sid, "x": x, "y": y, "z": z, "a": a})

    def hitter(self, ts: int, x: float, y: float, z: float) -> str | None:
        """The owner of the nearest fresh sensor within range of the ball, if any."""
        oldest = ts - self.stale_ps
        radius_sq = self.radius_sq
        best, best_d, players = None, radius_sq, set()
        for sid, (ts_s, xs, ys, zs) in self.latest.items():
            if ts_s < oldest or ts_s > ts:
                continue
            d = (xs - x) ** 2 + (ys - y) ** 2 + (zs - z) ** 2
            if d <= radius_sq:
                players.add(self.owner[sid])
                if d < best_d or best is None:
                    best, best_d = self.owner[sid], d
        if len(players) > 1:
            self.ambiguous += 1
        return best

    def in_doubt(self, ts: int, x: float, y: float, z: float, player: str | None) -> bool:
        """Could lost rows have changed this spike row's outcome (``player``, None: nobody in range)?"""
        if self.doubts.touches(self.spike_start - 1, ts):
            return True
        reach = self.radius_sq**0.5
        if player is not None:
            best = self.latest_distance(ts, x, y, z, player)
            reach = min(reach, best)
        for sid, (ts_s, xs, ys, zs) in self.latest.items():
            age = ts - ts_s
            if age <= PLAYER_GAP_PS or age < 0 or age > self.stale_ps + PLAYER_GAP_PS or self.owner[sid] == player:
                continue
            d = ((xs - x) ** 2 + (ys - y) ** 2 + (zs - z) ** 2) ** 0.5
            if d - MAX_SPEED_MM_PER_PS * age <= reach:
                return True
        return False

    def latest_distance(self, ts: int, x: float, y: float, z: float, player: str) -> float:
        """Distance from the ball to ``player``'s nearest fresh sensor."""
        oldest, best = ts - self.stale_ps, float("inf")
        for sid in debs.PLAYER_SENSORS[player]:
            row = self.latest.get(sid)
            if row is not None and oldest <= row[0] <= ts:
                best = min(best, ((row[1] - x) ** 2 + (row[2] - y) ** 2 + (row[3] - z) ** 2) ** 0.5)
        return best

    def input_lost(self, stream: str | None, count: int, ts_from: int | None, ts_to: int | None) -> None:
        super().input_lost(stream, count, ts_from, ts_to)
        if self.nfp:
            self.doubts.add(ts_from, ts_to)
            self.doubts.forget_before((ts_from or 0) - 10 * debs.PS_PER_S)

    def counters(self) -> dict[str, Any]:
        return {
            **super().counters(),
            "hits_withheld": self.withheld,
            "doubt_markers": self.doubt_markers,
            "hits": self.hits,
            "ambiguous_hits": self.ambiguous,
            "spikes_without_player": self.spikes - self.decided_spikes,
            "bad_rows": self.bad,
            "other_sensor_rows": self.other_sid,
        }


