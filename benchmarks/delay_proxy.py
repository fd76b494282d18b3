"""A user-space delaying TCP proxy: added latency, jitter and loss without tc netem.

The kernels PAN is measured on have no ``netem`` qdisc, so `pan bench network`
puts this proxy on every intra-PAN link.  Each chunk read in one direction is
written to the other side after a delay drawn from a seeded distribution:

    delay = delay_ms + jitter (normal with sd jitter_ms, or uniform +-jitter_ms), >= 0
          + rto_ms with probability loss   (a lost TCP segment costs a retransmission)

Loss is modelled as that extra delay, not as dropped bytes: TCP never loses
bytes, it retransmits them after a timeout, and the stream behind the lost
segment waits (head-of-line blocking).  A chunk is never sent before an
earlier chunk of the same direction (``due = max(now + delay, previous due)``),
so byte order is preserved.

Every connection direction draws from its own ``random.Random`` seeded from
(seed, connection number, direction), so the delay sequence of a connection
does not depend on how the event loop interleaves connections.

CLI::

    python -m benchmarks.delay_proxy --listen 127.0.0.1:9000 --target 127.0.0.1:8080 \\
        --delay-ms 20 --jitter-ms 2 --loss 0.01 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import signal
import sys
from dataclasses import dataclass

from pan.util import eventloop

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
QUEUE_CHUNKS = 256  # per direction: at most ~16 MiB in flight before reading pauses (backpressure)
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class DelayModel:
    """Parameters of the delay distribution (all times in ms)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    jitter: str = "normal"  # or "uniform"
    loss: float = 0.0  # probability that a chunk needs a retransmission
    rto_ms: float = 200.0  # what a retransmission costs (Linux's minimum RTO)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.jitter_ms < 0 or self.rto_ms < 0:
            raise ValueError("delays must be >= 0")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError("loss must be a probability in 0..1")
        if self.jitter not in ("normal", "uniform"):
            raise ValueError("jitter must be 'normal' or 'uniform'")

    def rng(self, connection: int, direction: int) -> random.Random:
        """The generator of one connection direction (0 client->target, 1 back)."""
        return random.Random(f"{self.seed}:{connection}:{direction}")

    def sample(self, rng: random.Random) -> float:
        """One delay in seconds."""
        ms = self.delay_ms
        if self.jitter_ms:
            if self.jitter == "normal":
                ms += rng.gauss(0.0, self.jitter_ms)
            else:
                ms += rng.uniform(-self.jitter_ms, self.jitter_ms)
        if self.loss and rng.random() < self.loss:
            ms += self.rto_ms
        return max(ms, 0.0) / 1000.0

    def sequence(self, count: int, connection: int = 0, direction: int = 0) -> list[float]:
        """The first ``count`` delays (s) a connection direction would get: for tests and docs."""
        rng = self.rng(connection, direction)
        return [self.sample(rng) for _ in range(count)]


@dataclass
class ProxyCounters:
    connections: int = 0
    active: int = 0
    target_failures: int = 0
    chunks: int = 0
    bytes: int = 0


class DelayProxy:
    """listen -> target, every chunk delayed by ``model``; ``start()`` / ``stop()``."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], model: DelayModel) -> None:
        self.listen_host, self.port = listen
        self.target = target
        self.model = model
        self.counters = ProxyCounters()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def set_model(self, model: DelayModel) -> None:
        """New connections and new chunks use ``model`` from now on (live reconfiguration)."""
        self.model = model

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.listen_host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the listener and every open connection; returns when all tasks ended."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> DelayProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.counters.connections
        self.counters.connections += 1
        task = asyncio.create_task(self._connection(number, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, number: int, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.counters.active += 1
        t_writer: asyncio.StreamWriter | None = None
        try:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    t_reader, t_writer = await asyncio.open_connection(*self.target)
            except (OSError, TimeoutError) as exc:
                self.counters.target_failures += 1
                log.info("proxy :%d: target %s:%d unreachable: %s", self.port, *self.target, exc)
                return
            await asyncio.gather(
                self._pipe(c_reader, t_writer, self.model.rng(number, 0)),
                self._pipe(t_reader, c_writer, self.model.rng(number, 1)),
            )
        finally:
            self.counters.active -= 1
            for w in (c_writer, t_writer):
                if w is not None:
                    w.close()
            for w in (c_writer, t_writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        await w.wait_closed()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rng: random.Random) -> None:
        """Read chunks, stamp each with its due time, let a sender write them in order when due."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)
        sender = asyncio.create_task(self._send(queue, writer))
        last_due = 0.0
        try:
            while True:
                try:
                    data = await reader.read(READ_CHUNK)
                except OSError:
                    data = b""
                # The current model, so a live set_model() also reaches open keep-alive connections.
                due = last_due = max(loop.time() + self.model.sample(rng), last_due)
                await queue.put((due, data))  # b"" marks the end of this direction
                if not data:
                    break
            await sender
        finally:
            if not sender.done():
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender

    async def _send(self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        """Write each chunk when due; after a write error keep draining so the reader never blocks."""
        loop = asyncio.get_running_loop()
        broken = False
        while True:
            due, data = await queue.get()
            if not data:
                if not broken:
                    await self._sleep_until(loop, due)
                    with contextlib.suppress(OSError, RuntimeError):
                        if writer.can_write_eof():
                            writer.write_eof()
                return
            if broken:
                continue
            await self._sleep_until(loop, due)
            try:
                writer.write(data)
                self.counters.chunks += 1
                self.counters.bytes += len(data)
                await writer.drain()
            except (OSError, RuntimeError):
                broken = True  # the other side is gone; the reader side ends on its own

    @staticmethod
    async def _sleep_until(loop: asyncio.AbstractEventLoop, due: float) -> None:
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)


def parse_hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--delay-ms", type=float, default=0.0, help="constant delay per chunk and direction")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="sd (normal) or half-width (uniform)")
    parser.add_argument("--jitter", choices=["normal", "uniform"], default="normal")
    parser.add_argument("--loss", type=float, default=0.0, help="probability of a retransmission per chunk")
    parser.add_argument("--rto-ms", type=float, default=200.0, help="delay added by one retransmission")
    parser.add_argument("--seed", type=int, default=0)


def model_from_args(args: argparse.Namespace) -> DelayModel:
    return DelayModel(args.delay_ms, args.jitter_ms, args.jitter, args.loss, args.rto_ms, args.seed)


async def _serve(args: argparse.Namespace) -> None:
    # Handlers go in before the banner: whoever reads the banner may signal at once.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    proxy = DelayProxy(args.listen, args.target, model_from_args(args))
    await proxy.start()
    print(f"proxy {proxy.listen_host}:{proxy.port} -> {args.target[0]}:{args.target[1]} {proxy.model}", flush=True)
    try:
        await stop.wait()
    finally:
        await proxy.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Delaying TCP proxy (seeded latency, jitter, loss-as-RTO).")
    parser.add_argument("--listen", type=parse_hostport, required=True, metavar="HOST:PORT")
    parser.add_argument("--target", type=parse_hostport, required=True, metavar="HOST:PORT")
    add_model_arguments(parser)
    args = parser.parse_args(argv)
    try:
        model_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    eventloop.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
