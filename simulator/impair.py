"""Real-world sensor impairments: latency, packaging, loss, outages, reordering, clock error.

A real RTLS transmitter does not deliver each position the instant it is
measured.  An impairment profile describes, per kind of sensor, how far from
ideal the simulated sensors behave.  Everything is drawn from numpy
Generators seeded with ``(seed, sid)`` and one independent stream per
quantity, so the same profile and data give the same send schedule however
the rows happen to be fed in (batch sizes depend on timing; draws do not).

Profile format (JSON; see ``workflows/impair_default.json``)::

    {
      "seed": 7,
      "kinds": {"ball": [4, 8, 10, 12], "referee": [105, 106]},
      "default_kind": "player",
      "profiles": {
        "default": { ...parameters... },
        "ball":    { ...parameters, merged over "default"... }
      }
    }

``kinds`` maps a kind to sensor ids (``SENSOR<sid>`` streams); a sensor not
listed has ``default_kind``.  If ``kinds`` is omitted the DEBS 2013 map is
used (balls 4, 8, 10, 12; referee 105, 106; everyone else "player").  A
kind's parameters are its ``profiles`` entry merged over ``"default"`` by
top-level key (a kind's ``latency_ms`` object replaces the default one
whole); a kind with neither is not impaired.  Non-sensor streams
(e.g. INTERRUPTIONS) are never impaired.

Parameters of one kind (every key optional; the default is "ideal"):

- ``latency_ms``: ``{"mean", "jitter", "tail_prob", "tail_ms", "tail_alpha", "max"}``.
  Per packet: ``max(0, Normal(mean, jitter))``; with probability ``tail_prob``
  a heavy tail ``tail_ms * (1 + Lomax(tail_alpha))`` is added (Pareto with
  minimum ``tail_ms``); the sum is capped at ``max`` (default 1000).
- ``packet_rows`` (k, default 1): RTLS packaging.  A sensor holds its rows
  until k are measured and sends them as one packet (one TCP write) when the
  last one is due.  The rest of a sensor's rows at the end form a final,
  shorter packet.
- ``shuffle_in_packet`` (bool): rows inside a packet leave in random order.
- ``loss`` (probability, per packet): the whole packet is lost.
- ``outages``: temporary unreachability in event time.  Either random,
  ``{"every_s": mean gap, "duration_s": mean length}`` (exponential), or
  explicit ``{"windows_s": [[start, end], ...]}`` in event seconds after the
  replay's first timestamp; plus ``"mode"``:

  * ``"drop"`` (default): the sensor's TCP connection is closed at the first
    packet due inside a window, every packet due inside it is lost, and the
    next packet after the window reconnects.
  * ``"hold"``: the connection stays; packets due inside the window are
    buffered on the sensor and sent in a burst when the window ends.

- ``clock``: ``{"offset_ms", "offset_spread_ms", "drift_ppm", "drift_spread_ppm"}``.
  The sensor's clock error shifts its *send schedule* (never the ``ts`` in
  the rows): a packet leaves ``offset + drift * elapsed`` later than ideal
  (negative = earlier).  Each sensor draws its own offset and drift
  uniformly within ``±spread`` around the given values.

Reordering follows from the model: packets leave at due time + latency +
clock shift, so a packet with a long latency is overtaken by later ones, and
``shuffle_in_packet`` reorders inside a packet.  Each sensor has one TCP
connection, so send order is arrival order.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

DEBS_KINDS: dict[str, list[int]] = {"ball": [4, 8, 10, 12], "referee": [105, 106]}
DEBS_DEFAULT_KIND = "player"
_SENSOR = re.compile(r"^SENSOR(\d+)$")
MS = 1_000_000  # ns per ms
S = 1_000_000_000

TOP_KEYS = {"seed", "kinds", "default_kind", "profiles", "description"}
KIND_KEYS = {"latency_ms", "packet_rows", "shuffle_in_packet", "loss", "outages", "clock"}
LATENCY_KEYS = {"mean", "jitter", "tail_prob", "tail_ms", "tail_alpha", "max"}
OUTAGE_KEYS = {"every_s", "duration_s", "windows_s", "mode"}
CLOCK_KEYS = {"offset_ms", "offset_spread_ms", "drift_ppm", "drift_spread_ppm"}


class ProfileError(ValueError):
    """An impairment profile that cannot be used; the message names the key at fault."""


def _number(where: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ProfileError(f"{where}: must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def _keys(where: str, obj: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ProfileError(f"{where}: must be an object, got {obj!r}")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")
    return obj


@dataclass(frozen=True)
class KindParams:
    """Validated impairment parameters of one sensor kind."""

    latency_mean_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    tail_prob: float = 0.0
    tail_ms: float = 0.0
    tail_alpha: float = 2.0
    latency_max_ms: float = 1000.0
    packet_rows: int = 1
    shuffle_in_packet: bool = False
    loss: float = 0.0
    outage_every_s: float = 0.0
    outage_duration_s: float = 0.0
    outage_windows_s: tuple[tuple[float, float], ...] = ()
    outage_mode: str = "drop"
    offset_ms: float = 0.0
    offset_spread_ms: float = 0.0
    drift_ppm: float = 0.0
    drift_spread_ppm: float = 0.0

    @classmethod
    def parse(cls, where: str, raw: dict[str, Any]) -> KindParams:
        raw = _keys(where, raw, KIND_KEYS)
        values: dict[str, Any] = {}
        lat = _keys(f"{where}.latency_ms", raw.get("latency_ms", {}), LATENCY_KEYS)
        for key, attr, hi in (("mean", "latency_mean_ms", 1e6), ("jitter", "latency_jitter_ms", 1e6),
                              ("tail_prob", "tail_prob", 1.0), ("tail_ms", "tail_ms", 1e6),
                              ("max", "latency_max_ms", 1e7)):
            if key in lat:
                values[attr] = _number(f"{where}.latency_ms.{key}", lat[key], 0, hi)
        if "tail_alpha" in lat:
            values["tail_alpha"] = _number(f"{where}.latency_ms.tail_alpha", lat["tail_alpha"], 0.1, 100)
        if "packet_rows" in raw:
            k = raw["packet_rows"]
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100_000:
                raise ProfileError(f"{where}.packet_rows: must be an integer in 1..100000, got {k!r}")
            values["packet_rows"] = k
        if "shuffle_in_packet" in raw:
            if not isinstance(raw["shuffle_in_packet"], bool):
                raise ProfileError(f"{where}.shuffle_in_packet: must be true or false")
            values["shuffle_in_packet"] = raw["shuffle_in_packet"]
        if "loss" in raw:
            values["loss"] = _number(f"{where}.loss", raw["loss"], 0, 1)
        out = _keys(f"{where}.outages", raw.get("outages", {}), OUTAGE_KEYS)
        if "every_s" in out or "duration_s" in out:
            values["outage_every_s"] = _number(f"{where}.outages.every_s", out.get("every_s"), 1e-3, 1e9)
            values["outage_duration_s"] = _number(f"{where}.outages.duration_s", out.get("duration_s"), 0, 1e9)
        if "windows_s" in out:
            windows = out["windows_s"]
            try:
                parsed = tuple((float(a), float(b)) for a, b in windows)
            except (TypeError, ValueError):
                raise ProfileError(f"{where}.outages.windows_s: must be a list of [start, end] pairs") from None
            if any(b < a for a, b in parsed) or any(p[0] < q[1] for q, p in itertools.pairwise(parsed)):
                raise ProfileError(f"{where}.outages.windows_s: windows must be sorted and not overlap")
            values["outage_windows_s"] = parsed
        if "mode" in out:
            if out["mode"] not in ("drop", "hold"):
                raise ProfileError(f"{where}.outages.mode: must be 'drop' or 'hold', got {out['mode']!r}")
            values["outage_mode"] = out["mode"]
        clock = _keys(f"{where}.clock", raw.get("clock", {}), CLOCK_KEYS)
        for key, lo in (("offset_ms", -1e9), ("offset_spread_ms", 0), ("drift_ppm", -1e5), ("drift_spread_ppm", 0)):
            if key in clock:
                values[key] = _number(f"{where}.clock.{key}", clock[key], lo, 1e9 if "offset" in key else 1e5)
        return cls(**values)

    @property
    def ideal(self) -> bool:
        return self == KindParams()


@dataclass
class ImpairProfile:
    """A loaded profile: which kind each sensor is, and that kind's parameters."""

    seed: int
    kind_of_sid: dict[int, str]
    default_kind: str
    params: dict[str, KindParams]  # kind -> merged parameters (only kinds that impair anything)
    source: str = "profile"

    @classmethod
    def load(cls, path: str | Path) -> ImpairProfile:
        try:
            data = orjson.loads(Path(path).read_bytes())
        except OSError as exc:
            raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
        except orjson.JSONDecodeError as exc:
            raise ProfileError(f"{path}: bad JSON: {exc}") from None
        try:
            profile = cls.from_dict(data)
        except ProfileError as exc:
            raise ProfileError(f"{path}: {exc}") from None
        profile.source = str(path)
        return profile

    @classmethod
    def from_dict(cls, data: Any) -> ImpairProfile:
        data = _keys("profile", data, TOP_KEYS)
        seed = data.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ProfileError(f"seed: must be a non-negative integer, got {seed!r}")
        kinds = data.get("kinds", DEBS_KINDS)
        default_kind = data.get("default_kind", DEBS_DEFAULT_KIND)
        if not isinstance(default_kind, str):
            raise ProfileError("default_kind: must be a string")
        kind_of_sid: dict[int, str] = {}
        for kind, sids in _keys("kinds", kinds, set(kinds) if isinstance(kinds, dict) else set()).items():
            if not isinstance(sids, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in sids):
                raise ProfileError(f"kinds.{kind}: must be a list of sensor ids")
            for sid in sids:
                if kind_of_sid.setdefault(sid, kind) != kind:
                    raise ProfileError(f"kinds.{kind}: sensor {sid} is also of kind {kind_of_sid[sid]!r}")
        raw_profiles = data.get("profiles", {})
        if not isinstance(raw_profiles, dict):
            raise ProfileError("profiles: must be an object of kind -> parameters")
        base = raw_profiles.get("default", {})
        KindParams.parse("profiles.default", base)  # so a bad default is reported as such
        params: dict[str, KindParams] = {}
        for kind in sorted({*raw_profiles, *kinds, default_kind}):
            merged = {**base, **_keys(f"profiles.{kind}", raw_profiles.get(kind, {}), KIND_KEYS)}
            parsed = KindParams.parse(f"profiles.{kind}", merged)
            if not parsed.ideal:
                params[kind] = parsed
        return cls(seed, kind_of_sid, default_kind, params)

    def kind_of(self, stream: str) -> str | None:
        """The sensor kind of a stream, or None for non-sensor streams."""
        match = _SENSOR.match(stream)
        if match is None:
            return None
        return self.kind_of_sid.get(int(match.group(1)), self.default_kind)

    def for_stream(self, stream: str) -> KindParams | None:
        kind = self.kind_of(stream)
        return None if kind is None else self.params.get(kind)


@dataclass(order=True, slots=True)
class Packet:
    """What a sensor does at ``send_ns`` (ns after the replay start): send, or lose, some rows."""

    send_ns: int
    seq: int
    lines: list[bytes] = field(compare=False)
    ts: list[int] = field(compare=False)
    fate: str = field(default="send", compare=False)  # send | lost | outage


DueNs = Callable[[np.ndarray], np.ndarray]


class SensorImpairment:
    """Turns one sensor's ts-ordered rows into packets with impaired send times.

    ``due_ns`` maps event timestamps (ps) to their ideal send offsets (ns
    after the replay start).  Rows are ``feed``-ed in order, in any batch
    sizes; ``pop_due(now)`` returns the packets that leave by ``now`` in send
    order.  ``horizon_ns`` says how far ahead of ``now`` rows must already be
    fed, because a negative clock offset makes packets leave early.
    """

    def __init__(self, params: KindParams, seed: int, sid: int, due_ns: DueNs, origin_ts: int,
                 span_ns: int) -> None:
        self.p = params
        self.due_ns = due_ns
        self.origin_ts = origin_ts
        # One generator per quantity: each consumes draws in packet order, so batch sizes do not matter.
        streams = np.random.SeedSequence([seed, sid]).spawn(7)
        self._lat, self._tail_hit, self._tail, self._loss, self._shuffle, self._outage, clock = (
            np.random.default_rng(s) for s in streams
        )
        self.offset_ns = int((params.offset_ms + clock.uniform(-1, 1) * params.offset_spread_ms) * MS)
        self.drift = (params.drift_ppm + clock.uniform(-1, 1) * params.drift_spread_ppm) * 1e-6
        early = min(0, self.offset_ns) + min(0.0, self.drift) * span_ns
        self.horizon_ns = int(-early) + 1
        self._carry_lines: list[bytes] = []
        self._carry_ts: list[int] = []
        self._span: int | None = None  # event time a full packet covers (learnt from the first one)
        self._heap: list[Packet] = []
        self._seq = 0
        self._windows = self._window_iter()
        self._window: tuple[int, int] | None = next(self._windows, None)

    def _window_iter(self):  # type: ignore[no-untyped-def]
        """Outage windows as (start_ts, end_ts), in order, drawn lazily."""
        ps = 10**12
        for a, b in self.p.outage_windows_s:
            yield self.origin_ts + int(a * ps), self.origin_ts + int(b * ps)
        if self.p.outage_every_s > 0:
            t = float(self.origin_ts)
            while True:
                t += self._outage.exponential(self.p.outage_every_s) * ps
                length = self._outage.exponential(self.p.outage_duration_s) * ps if self.p.outage_duration_s else 0
                yield int(t), int(t + length)
                t += length

    def _outage_end(self, ts: int) -> int | None:
        """End of the outage window holding ``ts``, or None; windows behind ``ts`` are passed."""
        while self._window is not None and self._window[1] <= ts:
            self._window = next(self._windows, None)
        if self._window is not None and self._window[0] <= ts:
            return self._window[1]
        return None

    def feed(self, ts: list[int], lines: list[bytes]) -> None:
        self._carry_ts.extend(ts)
        self._carry_lines.extend(lines)
        k = self.p.packet_rows
        full = len(self._carry_ts) // k * k
        if full:
            if self._span is None and k > 1:  # the sensor's packet span, from its first full packet
                self._span = (self._carry_ts[k - 1] - self._carry_ts[0]) * k // (k - 1)
            self._packetize(self._carry_ts[:full], self._carry_lines[:full], k)
            del self._carry_ts[:full], self._carry_lines[:full]

    def close_partial(self, limit_ts: int) -> None:
        """A packetiser also sends on a timer: once every row up to ``limit_ts`` is fed and event time
        has passed a partial packet's first row by one packet span, the partial packet leaves.

        Without this the rows before a silence (an outage, the half-time break) would wait for the
        sensor's next row, minutes later. Only rows within the span go, so which rows travel
        together never depends on how far ahead the caller fed.
        """
        if not self._carry_ts or self._span is None:
            return
        deadline = self._carry_ts[0] + self._span
        if limit_ts < deadline:
            return
        n = bisect.bisect_right(self._carry_ts, deadline)
        self._packetize(self._carry_ts[:n], self._carry_lines[:n], n, sent_at_ts=deadline)
        del self._carry_ts[:n], self._carry_lines[:n]

    def finish(self) -> None:
        """The sensor has no more rows: its last, partial packet leaves too."""
        if self._carry_ts:
            self._packetize(self._carry_ts, self._carry_lines, len(self._carry_ts))
            self._carry_ts, self._carry_lines = [], []

    def _packetize(self, ts: list[int], lines: list[bytes], k: int, sent_at_ts: int | None = None) -> None:
        """Packets of ``k`` rows; each leaves when its last row is measured (or at ``sent_at_ts``: a timer)."""
        n = len(ts) // k
        p = self.p
        last_ts = np.asarray(ts[k - 1 :: k] if sent_at_ts is None else [sent_at_ts], dtype=np.int64)
        due = self.due_ns(last_ts)
        latency = np.maximum(self._lat.normal(p.latency_mean_ms, p.latency_jitter_ms, n), 0.0)
        tail_hit = self._tail_hit.random(n) < p.tail_prob
        tail = p.tail_ms * (1.0 + self._tail.pareto(p.tail_alpha, n))
        latency = np.minimum(latency + np.where(tail_hit, tail, 0.0), p.latency_max_ms)
        lost = self._loss.random(n) < p.loss
        shift = (latency * MS + self.offset_ns + self.drift * due).astype(np.int64)
        for j in range(n):
            rows_ts, rows = ts[j * k : (j + 1) * k], lines[j * k : (j + 1) * k]
            if p.shuffle_in_packet and k > 1:
                order = self._shuffle.permutation(k)
                rows_ts, rows = [rows_ts[o] for o in order], [rows[o] for o in order]
            send = int(due[j] + shift[j])
            fate = "lost" if lost[j] else "send"
            end = self._outage_end(int(last_ts[j]))
            if end is not None:
                if p.outage_mode == "drop":
                    send, fate = int(due[j]), "outage"
                else:
                    send = int(self.due_ns(np.asarray([end], dtype=np.int64))[0] + shift[j])
            self._seq += 1
            heapq.heappush(self._heap, Packet(send, self._seq, rows, rows_ts, fate))

    def pop_due(self, now_ns: float) -> list[Packet]:
        out = []
        heap = self._heap
        while heap and heap[0].send_ns <= now_ns:
            out.append(heapq.heappop(heap))
        return out

    def next_send_ns(self) -> int | None:
        return self._heap[0].send_ns if self._heap else None

    def oldest_unsent_ts(self) -> int | None:
        """The smallest ts among rows that may still be sent (held, queued or waiting for their packet).

        Lost rows are not counted (they never come), so a promise below this value is never broken.
        """
        candidates = [min(p.ts) for p in self._heap if p.fate == "send" and p.ts]
        if self._carry_ts:
            candidates.append(min(self._carry_ts))
        return min(candidates) if candidates else None

    @property
    def pending(self) -> int:
        return len(self._heap) + (1 if self._carry_ts else 0)
