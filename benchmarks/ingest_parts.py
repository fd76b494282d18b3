"""The sender process of `pan bench ingest` (benchmarks/ingest_bench.py): rows over loopback TCP, flat out.

``python -m benchmarks.ingest_parts HOST PORT FILE...`` opens one connection per file, all at once, and writes
the files round-robin in 64 KiB pieces, as fast as the server reads them; it exits when all are sent.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

SEND_PIECE = 64 * 1024
TIMEOUT_S = 60.0


def send(host: str, port: int, files: list[str]) -> None:
    payloads = [Path(f).read_bytes() for f in files]
    conns = [socket.create_connection((host, port), timeout=TIMEOUT_S) for _ in payloads]
    offsets = [0] * len(payloads)
    pending = set(range(len(payloads)))
    while pending:
        for n in sorted(pending):
            piece = payloads[n][offsets[n] : offsets[n] + SEND_PIECE]
            conns[n].sendall(piece)
            offsets[n] += len(piece)
            if offsets[n] >= len(payloads[n]):
                conns[n].close()
                pending.discard(n)


if __name__ == "__main__":
    if len(sys.argv) < 4 or not sys.argv[2].isdigit():
        print("usage: python -m benchmarks.ingest_parts HOST PORT FILE...", file=sys.stderr)
        sys.exit(2)
    send(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
