"""WeakTrueTime: one master's clock shared by many simulator processes over UDP.

Sensors simulated on several machines must replay the same moment of the
match at the same moment, yet their machine clocks disagree.  WeakTrueTime
does not try to find the *true* time: it declares the master's clock correct
and keeps every slave within a small bound of it.

Protocol (one JSON object per datagram):

- slave -> master ``{"t":"alive"}`` every ``alive_period_s``.  The master keeps
  every sender of an ALIVE as a slave and forgets it after ``alive_timeout_s``
  of silence, so crashed slaves cost nothing.
- master -> every known slave ``{"t":"time","epoch":E,"seq":N,"ns":T}`` every
  ``sync_period_s`` (and at once to a slave it has not seen before, so a new
  slave need not wait a whole period).  Sending to each known slave is our
  "broadcast": it works on loopback and across subnets alike.

A slave keeps ``delta = master_ns - local_ns`` from the newest message (UDP
may reorder: a message whose ``seq`` is not newer than the last one of the
same ``epoch`` is dropped; a new ``epoch`` means the master restarted).
Its time is ``local + delta`` but never less than a value it already
returned: when the delta shrinks the slave's clock stands still until the
master's time catches up, so pacing never runs backwards.  Network latency
between master and slave is ignored (it is well below the simulator's check
period on a LAN).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

import orjson

from simulator.clock import LocalTime, TimeProvider

log = logging.getLogger(__name__)

DEFAULT_PORT = 18600
Address = tuple[str, int]


def parse_address(text: str, default_host: str = "0.0.0.0") -> Address:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` -> (host, port)."""
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"bad address {text!r}: expected HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"bad address {text!r}: port out of range")
    return (host or default_host, number)


def _decode(data: bytes) -> dict[str, Any] | None:
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return message if isinstance(message, dict) else None


class _Endpoint(asyncio.DatagramProtocol):
    """Hands datagrams to a callback; transport errors (e.g. ICMP refused) are only logged."""

    def __init__(self, on_message: Any) -> None:
        self.on_message = on_message

    def datagram_received(self, data: bytes, addr: Address) -> None:
        self.on_message(data, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("wtt: %s", exc)


class WTTMaster:
    """The reference clock: answers nothing, just tells every live slave its time."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        clock: TimeProvider | None = None,
        sync_period_s: float = 1.0,
        alive_timeout_s: float = 3.5,
    ) -> None:
        self.host, self.port = host, port
        self.clock = clock or LocalTime()
        self.sync_period_s = sync_period_s
        self.alive_timeout_s = alive_timeout_s
        self.epoch = int.from_bytes(os.urandom(4), "big")
        self.slaves: dict[Address, float] = {}  # address -> monotonic time of its last ALIVE
        self.sent = 0
        self.ignored = 0
        self._seq = 0
        self._transport: asyncio.DatagramTransport | None = None
        self._task: asyncio.Task[None] | None = None

    def now_ns(self) -> int:
        return self.clock.now_ns()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Endpoint(self._received), local_addr=(self.host, self.port)
        )
        self._transport = transport
        self.port = transport.get_extra_info("sockname")[1]
        self._task = asyncio.create_task(self._sync_loop(), name="wtt-master")
        log.info("wtt master on %s:%d (sync every %.2f s)", self.host, self.port, self.sync_period_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def _received(self, data: bytes, addr: Address) -> None:
        message = _decode(data)
        if message is None or message.get("t") != "alive":
            self.ignored += 1
            return
        is_new = addr not in self.slaves
        self.slaves[addr] = time.monotonic()
        if is_new:
            log.info("wtt master: slave %s:%d joined", *addr)
            self._send_time([addr])

    def expire(self) -> list[Address]:
        """Forget slaves whose last ALIVE is older than the timeout; returns them."""
        limit = time.monotonic() - self.alive_timeout_s
        gone = [addr for addr, seen in self.slaves.items() if seen < limit]
        for addr in gone:
            del self.slaves[addr]
            log.info("wtt master: slave %s:%d timed out", *addr)
        return gone

    def _send_time(self, targets: list[Address]) -> None:
        if self._transport is None or not targets:
            return
        self._seq += 1
        payload = orjson.dumps({"t": "time", "epoch": self.epoch, "seq": self._seq, "ns": self.clock.now_ns()})
        for addr in targets:
            self._transport.sendto(payload, addr)
            self.sent += 1

    async def _sync_loop(self) -> None:
        while True:
            self.expire()
            self._send_time(list(self.slaves))
            await asyncio.sleep(self.sync_period_s)


class WTTSlaveTime:
    """A time provider that follows a WTT master and never runs backwards."""

    def __init__(
        self,
        master: Address,
        clock: TimeProvider | None = None,
        alive_period_s: float = 1.0,
    ) -> None:
        self.master = master
        self.clock = clock or LocalTime()
        self.alive_period_s = alive_period_s
        self.delta_ns = 0
        self.updates = 0
        self.dropped = 0
        self.last_sync_mono: float | None = None
        self._epoch: int | None = None
        self._seq = -1
        self._last_ns = 0
        self._synced = asyncio.Event()
        self._transport: asyncio.DatagramTransport | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def now_ns(self) -> int:
        value = self.clock.now_ns() + self.delta_ns
        if value < self._last_ns:
            return self._last_ns  # stand still rather than go back
        self._last_ns = value
        return value

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Endpoint(self._received), remote_addr=self.master
        )
        self._transport = transport
        self._task = asyncio.create_task(self._alive_loop(), name="wtt-slave")

    async def wait_synced(self, timeout_s: float) -> bool:
        """True once a first time message arrived, False if none came within the timeout."""
        try:
            await asyncio.wait_for(self._synced.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def status(self) -> dict[str, Any]:
        age = None if self.last_sync_mono is None else time.monotonic() - self.last_sync_mono
        return {"synced": self.synced, "delta_ns": self.delta_ns, "updates": self.updates,
                "dropped": self.dropped, "last_sync_age_s": age}

    def _received(self, data: bytes, _addr: Address) -> None:
        message = _decode(data)
        if message is None or message.get("t") != "time":
            self.dropped += 1
            return
        epoch, seq, master_ns = message.get("epoch"), message.get("seq"), message.get("ns")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (epoch, seq, master_ns)):
            self.dropped += 1
            return
        if epoch == self._epoch and seq <= self._seq:
            self.dropped += 1  # reordered or duplicated datagram
            return
        self._epoch, self._seq = epoch, seq
        self.delta_ns = master_ns - self.clock.now_ns()
        self.updates += 1
        self.last_sync_mono = time.monotonic()
        self._synced.set()

    async def _alive_loop(self) -> None:
        payload = orjson.dumps({"t": "alive"})
        while True:
            if self._transport is not None:
                self._transport.sendto(payload)
            await asyncio.sleep(self.alive_period_s)
