"""Score query outputs against a generated match's ground truth.

Inputs are output streams as recorded (``pan replay --record``: one JSON line
per tuple in ``<stream>.jsonl``) or as lists of tuples; the truth is the
``truth/`` folder of ``pan generate``. Scores:

* kicks (``BALLHITS``): precision and recall over the hits the data can show
  and that are not ambiguous (another player within reach); ambiguous ones
  are reported apart (share attributed to the physical kicker);
* possession (``BP_<player>``, ``BP_wholeGame_<team>``): team share error in
  percentage points over the whole match; per player, the relative error over
  the play time that ambiguous kicks do not decide. A kick decides the time
  from it to the next kick or the end of the true possession it is in; the
  spans of ambiguous kicks (another player within reach, so which sensor the
  data names is a coin toss) and of kicks the data cannot show (no ball row
  during the contact), the ones the kick score leaves out too, are taken out
  of both the truth and the detection and reported apart (``ambiguous_s``),
  as is each player's whole-match figure. The detected time in a span comes from the
  ``BP_<player>`` series: between two of its tuples the added time is
  credited from the earlier one (a possession starts and ends with a tuple,
  so this is exact up to the ball's dropouts);
* shots (``SHOTS``): precision and recall, and how many near misses were
  reported as shots;
* Q1 (``RUNAGG_wholeGame_<player>``): relative error of each player's total
  distance against the path length of the true averaged position.
"""

from __future__ import annotations

import bisect
import csv
from pathlib import Path
from typing import Any

import orjson

KICK_TOL_PS = 30 * 10**9
SHOT_TOL_PS = 50 * 10**9


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def load_outputs(record: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.stem: [orjson.loads(x) for x in p.read_bytes().splitlines() if x.strip()] for p in record.glob("*.jsonl")}


def _match(truth: list[tuple[int, str, bool]], found: list[tuple[int, str]], tol: int) -> dict[str, Any]:
    """Greedy matching in time; truth items are (ts, player, scored)."""
    used = [False] * len(truth)
    tp = fp = excluded = 0
    for ts, player in sorted(found):
        near = [(abs(t - ts), _p != player, i) for i, (t, _p, _s) in enumerate(truth)
                if abs(t - ts) <= tol and not used[i]]
        best = min(near, key=lambda c: (c[1], c[0]))[2] if near else -1
        if best < 0:
            fp += 1
            continue
        if not truth[best][2]:
            excluded += 1
            used[best] = True
            continue
        if truth[best][1] == player:
            used[best] = True
            tp += 1
        else:
            fp += 1
    scored = sum(1 for _t, _p, s in truth if s)
    return {"tp": tp, "fp": fp, "excluded": excluded, "truth": scored,
            "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / scored if scored else 1.0}


def ambiguous_spans(kicks: list[dict[str, str]], possession: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """Merged [start, end) spans decided by an ambiguous or unobservable kick: to the next kick or its possession's end.

    A kick outside every true possession (play interrupted, past the half's
    data) decides nothing.
    """
    times = sorted(int(k["ts"]) for k in kicks)
    found = []
    for k in kicks:
        if k["ambiguous"] != "1" and k["observable"] == "1":
            continue
        ts = int(k["ts"])
        end = next((b for _p, a, b in possession if a <= ts < b), None)
        if end is None:
            continue
        later = times[bisect.bisect_right(times, ts):]
        found.append((ts, min(end, later[0]) if later else end))
    merged: list[list[int]] = []
    for a, b in sorted(found):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _overlap(a: int, b: int, spans: list[tuple[int, int]]) -> int:
    return sum(max(0, min(b, y) - max(a, x)) for x, y in spans)


def _cumulative(series: list[dict[str, Any]], ts: int) -> int:
    """A ``BP_<player>`` time at ``ts``: the time added between two tuples is credited from the earlier one."""
    i = bisect.bisect_right([t["ts"] for t in series], ts)
    if i == 0:
        return 0
    before = series[i - 1]
    if i == len(series):
        return before["time_ps"]
    return before["time_ps"] + min(ts - before["ts"], series[i]["time_ps"] - before["time_ps"])


def score(outputs: dict[str, list[dict[str, Any]]], truth_dir: Path) -> dict[str, Any]:
    truth_dir = Path(truth_dir)
    kicks = _csv(truth_dir / "kicks.csv")
    result: dict[str, Any] = {}
    scored = [(int(k["ts"]), k["player"], k["observable"] == "1" and k["ambiguous"] == "0") for k in kicks]
    hits = [(int(h["ts"]), h["player"]) for h in outputs.get("BALLHITS", [])]
    result["kicks"] = _match(scored, hits, KICK_TOL_PS)
    amb = [(int(k["ts"]), k["player"], True) for k in kicks if k["ambiguous"] == "1" and k["observable"] == "1"]
    m = _match(amb, hits, KICK_TOL_PS)
    result["ambiguous_kicks"] = {"truth": len(amb), "right_player": m["tp"]}
    # possession
    truth_poss = [(row["player"], int(row["start_ts"]), int(row["end_ts"]))
                  for row in _csv(truth_dir / "possession.csv")]
    per: dict[str, int] = {}
    for player, a, b in truth_poss:
        per[player] = per.get(player, 0) + b - a
    spans = ambiguous_spans(kicks, truth_poss)
    players = sorted({k["player"] for k in kicks} | set(per))
    poss = {}
    for p in players:
        got = outputs.get(f"BP_{p}", [])
        value = got[-1]["time_ps"] if got else 0
        t = per.get(p, 0)
        t_amb = sum(_overlap(a, b, spans) for q, a, b in truth_poss if q == p)
        f_amb = sum(_cumulative(got, b) - _cumulative(got, a) for a, b in spans)
        t_un, f_un = t - t_amb, value - f_amb
        poss[p] = {"truth_s": t_un / 1e12, "found_s": f_un / 1e12,
                   "rel_error": abs(f_un - t_un) / t_un if t_un else None,
                   "ambiguous_s": {"truth": t_amb / 1e12, "found": f_amb / 1e12},
                   "whole_match_s": {"truth": t / 1e12, "found": value / 1e12,
                                     "rel_error": abs(value - t) / t if t else None}}
    total = sum(per.values())
    teams = {}
    for team in "AB":
        t_share = 100.0 * sum(v for p, v in per.items() if p.startswith(team)) / total if total else 0.0
        got = outputs.get(f"BP_wholeGame_{team}", [])
        teams[team] = {"truth_percent": t_share, "found_percent": got[-1]["time_percent"] if got else None}
    result["possession"] = {"players": poss, "teams": teams,
                            "ambiguous_spans": len(spans), "ambiguous_s": sum(b - a for a, b in spans) / 1e12}
    # shots
    shots = _csv(truth_dir / "shots.csv")
    near = _csv(truth_dir / "near_misses.csv")
    first: dict[int, tuple[int, str]] = {}
    for row in outputs.get("SHOTS", []):
        first.setdefault(row["shot"], (row["ts"], row["player"]))
    found_shots = list(first.values())
    truth_shots = [(int(s["ts_start"]), s["player"], s["observable"] == "1" and s["ambiguous"] == "0") for s in shots]
    result["shots"] = _match(truth_shots, found_shots, SHOT_TOL_PS)
    near_keys = [(int(n["ts"]), n["player"], True) for n in near]
    result["shots"]["near_misses"] = len(near)
    result["shots"]["near_misses_reported"] = _match(near_keys, found_shots, SHOT_TOL_PS)["tp"]
    # Q1
    q1 = {}
    for row in _csv(truth_dir / "distance.csv"):
        got = outputs.get(f"RUNAGG_wholeGame_{row['player']}", [])
        found = sum(v for k, v in got[-1].items() if k.endswith("_distance")) if got else 0.0
        t = float(row["path_m"])
        q1[row["player"]] = {"truth_m": t, "found_m": found, "rel_error": abs(found - t) / t if t else None}
    result["q1"] = q1
    return result
