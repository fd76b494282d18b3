"""The comparison of `pan bench chaos`: a recording set against the undisturbed one, stream by stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def compare(reference: Path, run: Path, recorded: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per stream: tuples lost, duplicated, changed and extra against ``reference``, and what was reported.

    ``unreported`` counts lost indices outside every gap the subscriber
    reported: each one is a silent loss.
    """
    import orjson

    result = {}
    for stream, state in recorded["streams"].items():
        ref_bytes = (reference / f"{stream}.jsonl").read_bytes()
        run_bytes = (run / f"{stream}.jsonl").read_bytes()
        row = {"reference": ref_bytes.count(b"\n"), "recorded": run_bytes.count(b"\n"), "identical": 1,
               "lost": 0, "duplicated": 0, "changed": 0, "extra": 0, "reported": state["reported_missed"],
               "unreported": 0, "unexplained_jumps": state.get("unexplained_jumps", 0), "resets": state["resets"],
               "via_repeater": state["via_repeater"]}
        if ref_bytes != run_bytes:
            ref = {orjson.loads(line)["i"]: line for line in ref_bytes.splitlines()}
            seen: dict[int, bytes] = {}
            for line in run_bytes.splitlines():
                index = orjson.loads(line)["i"]
                if index in seen:
                    row["duplicated"] += 1
                seen.setdefault(index, line)
            lost = [i for i in ref if i not in seen]
            ranges = state["reported_ranges"]
            row.update(identical=0, lost=len(lost), extra=sum(1 for i in seen if i not in ref),
                       changed=sum(1 for i, line in seen.items() if i in ref and ref[i] != line),
                       unreported=sum(1 for i in lost if not any(a <= i <= b for a, b in ranges)))
        result[stream] = row
    return result


def totals(streams: dict[str, dict[str, int]]) -> dict[str, int]:
    keys = ("reference", "recorded", "identical", "lost", "duplicated", "changed", "extra", "reported",
            "unreported", "unexplained_jumps", "resets", "via_repeater")
    out = {k: sum(row[k] for row in streams.values()) for k in keys}
    out["streams"] = len(streams)
    out["streams_via_repeater"] = sum(1 for row in streams.values() if row["via_repeater"])
    return out
