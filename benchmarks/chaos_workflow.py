"""The workflow of `pan bench chaos`: a workflow plus two peers of level-1 repeaters of some leaf streams.

Recorders then pull those streams through repeaters that can be killed; the producers of the ``TIGHT_WORKERS``
keep tight buffers, whose streams the consumer records (``tight_streams``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPEATER_PEERS = ("rep1", "rep2")
#: Leaf streams (no worker consumes them) the repeater peers repeat: a pause or a restart of a repeater
#: then disturbs only the recorders that pull through it, never a worker's input.
DEFAULT_REPEATED = (
    *(f"RUN_{team}{n}" for team in "AB" for n in range(1, 9)),
    "BP_wholeGame_A", "BP_wholeGame_B", "BP_1min_A", "BP_1min_B", "REFEREE",
)
#: Buffers of the repeated streams' producers and of the repeaters: large enough to hold a whole short
#: match, so a restarted repeater re-pulls every tuple and every outage is covered.
COVERING_BUFFER = 200_000
#: Workers whose producer buffers are tight on purpose (all their outputs are leaves): a stalled recorder
#: loses tuples of their streams, which is what the suite checks gets reported.
TIGHT_WORKERS = ("Running team B",)
TIGHT_BUFFER = 250  # tuples: ~4.5 s of one of their streams in real time


def chaos_workflow(
    source: Path, out: Path, repeated: tuple[str, ...] = DEFAULT_REPEATED, tight: tuple[str, ...] = TIGHT_WORKERS
) -> Path:
    """``source`` on free ports plus one level-1 repeater of ``repeated`` on each of two new peers.

    Producers of ``repeated`` streams get buffers that hold the whole match,
    except the ``tight`` workers, whose buffers hold ``TIGHT_BUFFER`` tuples
    (their repeaters still hold everything they pulled).
    """
    from pan.components.catalog import get_component_type
    from pan.workflow.parser import on_free_ports, parse_workflow

    data = json.loads(Path(source).read_text())
    workflow = parse_workflow(data, str(source))
    producers: dict[str, str] = {}
    consumed: set[str] = set()
    outputs: dict[str, list[str]] = {}
    for spec in workflow.workers:
        component = get_component_type(spec.type)
        assert component is not None
        consumed.update(component.input_names(spec))
        outputs[spec.name] = component.output_names(spec)
        if not component.repeats:
            producers.update(dict.fromkeys(component.output_names(spec), spec.name))
    unknown = [s for s in repeated if s not in producers]
    if unknown:
        raise ValueError(f"{source}: no producer for {', '.join(unknown)}")
    inner = [s for s in repeated if s in consumed]
    if inner:
        raise ValueError(f"repeated streams must be leaves, but workers consume {', '.join(inner)}")
    inner = [f"{w}: {s}" for w in tight for s in outputs.get(w, []) if s in consumed]
    if inner or not set(tight) <= set(outputs):
        raise ValueError(f"tight workers must exist and feed no worker: {', '.join(inner) or ', '.join(tight)}")
    covering = {producers[s] for s in repeated} - set(tight)
    for worker in data["workers"]:
        if worker["name"] in covering:
            worker["buffer_size"] = max(worker.get("buffer_size", 0), COVERING_BUFFER)
        elif worker["name"] in tight:
            worker["buffer_size"] = TIGHT_BUFFER
    host = data["repository"]["host"]
    for n, peer in enumerate(REPEATER_PEERS, 1):
        data["workers"].append({"name": f"Repeater {n}", "type": "repeater", "host": host, "port": 0, "peer": peer,
                                "inputs": list(repeated), "params": {"level": 1}, "buffer_size": COVERING_BUFFER})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(on_free_ports(data), indent=1))
    return out


def tight_streams(workflow: Any) -> list[str]:
    """Output streams of the ``TIGHT_WORKERS`` in ``workflow`` (the consumer's share of the recording)."""
    from pan.components.catalog import get_component_type

    streams = []
    for spec in workflow.workers:
        if spec.name in TIGHT_WORKERS:
            component = get_component_type(spec.type)
            assert component is not None
            streams.extend(component.output_names(spec))
    return streams
