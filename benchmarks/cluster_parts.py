"""The client of one `pan bench cluster` repetition, run inside the client host's namespace.

It replays the match in real time into the workflow (``attach``: already running on the namespace hosts; else
`pan run` on this machine, the one-machine figure) with `benchmarks/query_delay.py`'s harness, and prints one
JSON line: the query delays (ms) of each measured stream.

    python -m benchmarks.cluster_parts CONFIG_JSON   # {"workflow", "data", "work", "streams", "attach"}
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

from pan.util import eventloop


async def measure(config: dict[str, Any]) -> dict[str, list[float]]:
    from benchmarks.query_delay import SEND_LOG, delays, receive

    work = Path(config["work"])
    received = await receive(Path(config["workflow"]), Path(config["data"]), work, list(config["streams"]),
                             attach=bool(config["attach"]))
    return delays(work / SEND_LOG, received)


def main() -> int:
    config = orjson.loads(sys.argv[1])
    Path(config["work"]).mkdir(parents=True, exist_ok=True)
    print(orjson.dumps(eventloop.run(measure(config))).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
