"""`pan bench network`: query delay against added link latency, peers in network namespaces.

Topology (all made by the benchmark, all removed at the end; nothing leaves
these namespaces: the root namespace is not connected to them at all)::

    repo ─┐                      one veth pair per namespace, a private /30 per link
    p1  ──┤                      (10.213.K.0/30: hub .1, namespace .2), tbf bandwidth
    p2  ──┼── hub (IP forwarding) limit on both ends, route 10.213.0.0/16 via the hub
    p3  ──┤
    cli ──┘

``repo`` runs `pan repository`; p1 the forwarder, p2 a level-1 repeater, p3
a level-2 repeater (`pan run WF --peer pK` in each); ``cli`` the sender and the
probe clients.  The kernel has no netem, so latency, jitter and loss come from
the delaying proxy (benchmarks/delay_proxy.py) on every intra-PAN link:

* every worker and the repository bind ``0.0.0.0:PORT`` and so publish
  ``0.0.0.0:PORT``; on Linux a connection to 0.0.0.0 goes to the local
  namespace;
* each namespace runs a *sidecar* with one proxy per remote PAN service on
  127.0.0.1:PORT that forwards to that service's address in its namespace.

So every intra-PAN TCP connection (pulls between workers, client pulls,
repository calls) crosses exactly one proxy, which delays each direction by the
added latency (one-way, per link: a round trip gains twice that).  Sensor input
(inter-PAN: sender -> forwarder ingest) goes straight over the veths.  The
proxies are reconfigured live between phases, so one workflow serves all
latencies.  Query delay = receive time at the probe - ``sent_ns`` of the
row (one clock: namespaces share the kernel's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from benchmarks import common
from pan.deploy import netns
from pan.deploy.netns import sh
from pan.util import eventloop

HELP = "query delay vs added link latency (0..100 ms) and bandwidth, peers in network namespaces (root)"
SECTION = "network-bench"
LATENCIES = [0, 5, 10, 20, 35, 50, 100]
SUBNET = "10.213"
REPO_PORT, FWD_PORT, INGEST_PORT, REP1_PORT, REP2_PORT = 18580, 18581, 18590, 18582, 18583
NAMESPACES = ["repo", "p1", "p2", "p3", "cli"]  # link K = index + 1
PARTS = [sys.executable, "-m", "benchmarks.network_parts"]
PATHS = {
    # name: (how the probe picks the publisher, proxied hops from forwarder to probe)
    "forwarder (1 hop)": {"norep": True},
    "repeater L1 (2 hops)": {"exclude": [f"0.0.0.0:{FWD_PORT}", f"0.0.0.0:{REP2_PORT}"]},
    "repeater L2 (2-3 hops)": {"exclude": [f"0.0.0.0:{FWD_PORT}", f"0.0.0.0:{REP1_PORT}"]},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--latencies", default=",".join(map(str, LATENCIES)), help="one-way ms per link, comma list")
    p.add_argument("--bandwidth-mbit", type=float, default=100.0, help="tbf rate on every veth (0 = none)")
    p.add_argument("--bandwidths", default="10,1", help="extra phases at 0 ms with these tbf rates (Mbit/s)")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="normal jitter (sd) added by the proxies")
    p.add_argument("--loss", type=float, default=0.0, help="retransmission probability per chunk (+200 ms)")
    p.add_argument("--rate", type=float, default=100.0, help="sensor rows/s (default 100)")
    p.add_argument("--seconds", type=float, default=6.0, help="window per phase (default 6)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="smoke mode: latencies 0,20, 2 s windows, no extra bandwidths")
    p.add_argument("--write", metavar="PATH", help="update this Markdown report (plots go to its img/ folder)")


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


# --- namespaces ---------------------------------------------------------------------------


class Namespaces:
    """The namespaces, veths, addresses, routes and qdiscs of one run; ``delete()`` undoes all."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.hub = f"pan{tag}-hub"
        self.names = {role: f"pan{tag}-{role}" for role in NAMESPACES}
        self.created: list[str] = []
        self.devices: list[tuple[str, str]] = []  # (namespace, device) with a qdisc

    def address(self, role: str) -> str:
        return f"{SUBNET}.{NAMESPACES.index(role) + 1}.2"

    def create(self, bandwidth_mbit: float) -> None:
        for ns in [self.hub, *self.names.values()]:
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", self.hub, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        for k, role in enumerate(NAMESPACES, start=1):
            ns, hub_dev, ns_dev = self.names[role], f"vp{self.tag}h{k}", f"vp{self.tag}n{k}"
            sh("ip", "-n", self.hub, "link", "add", hub_dev, "type", "veth", "peer", "name", ns_dev, "netns", ns)
            sh("ip", "-n", self.hub, "addr", "add", f"{SUBNET}.{k}.1/30", "dev", hub_dev)
            sh("ip", "-n", ns, "addr", "add", f"{SUBNET}.{k}.2/30", "dev", ns_dev)
            sh("ip", "-n", self.hub, "link", "set", hub_dev, "up")
            sh("ip", "-n", ns, "link", "set", ns_dev, "up")
            sh("ip", "-n", ns, "route", "add", f"{SUBNET}.0.0/16", "via", f"{SUBNET}.{k}.1")
            self.devices += [(self.hub, hub_dev), (ns, ns_dev)]
        self.set_bandwidth(bandwidth_mbit)

    def set_bandwidth(self, mbit: float) -> None:
        """tbf on the egress of both ends of every link (netem is not available)."""
        for ns, dev in self.devices:
            netns.shape(ns, dev, bandwidth_mbit=mbit)

    def exec_args(self, role: str, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.names[role], *args]

    def delete(self) -> None:
        for ns in reversed(self.created):
            sh("ip", "netns", "del", ns, check=False)
        self.created.clear()


def can_run() -> str | None:
    """None if namespaces can be made here, else the reason."""
    reason = netns.can_create_namespaces(common.ensure_tool("ip", "iproute2") or common.ensure_tool("tc", "iproute2"))
    if reason and reason.startswith("needs root"):
        return "needs root (ip netns add, tc); run as root, e.g. `sudo .venv/bin/pan bench network`"
    return reason


# --- the workflow and its processes --------------------------------------------------------


def workflow() -> dict[str, Any]:
    any_host = "0.0.0.0"  # bind everything in its namespace; peers reach it through their sidecar
    return {
        "name": "network bench: forwarder and two repeaters in namespaces",
        "repository": {"host": any_host, "port": REPO_PORT, "refresh_ms": 1000},
        "workers": [
            {"name": "forwarder", "type": "forwarder", "host": any_host, "port": FWD_PORT, "peer": "p1",
             "buffer_size": 100_000, "params": {"ingest_port": INGEST_PORT, "inter_pan_inputs": ["LAT"]}},
            {"name": "repeater1", "type": "repeater", "host": any_host, "port": REP1_PORT, "peer": "p2",
             "inputs": ["LAT"], "params": {"level": 1}, "buffer_size": 100_000},
            {"name": "repeater2", "type": "repeater", "host": any_host, "port": REP2_PORT, "peer": "p3",
             "inputs": ["LAT"], "params": {"level": 2}, "buffer_size": 100_000},
        ],
    }


SERVICES = {"repo": [REPO_PORT], "p1": [FWD_PORT], "p2": [REP1_PORT], "p3": [REP2_PORT], "cli": []}


def routes_for(ns: Namespaces, role: str) -> list[dict[str, Any]]:
    """The sidecar routes of ``role``: every PAN service outside its own namespace."""
    return [
        {"port": port, "host": ns.address(other)}
        for other, ports in SERVICES.items() if other != role for port in ports
    ]


class Run:
    """Everything one benchmark run started; ``stop()`` ends it in reverse order."""

    def __init__(self, ns: Namespaces, workdir: Path) -> None:
        self.ns = ns
        self.workdir = workdir
        self.sidecars: list[common.Child] = []
        self.children: list[common.Child] = []
        self.sender: common.Child | None = None
        self.probe: common.Child | None = None

    async def start(self, rate: float) -> None:
        py = sys.executable
        path = self.workdir / "network_workflow.json"
        path.write_bytes(orjson.dumps(workflow()))
        for role in NAMESPACES:
            config = orjson.dumps({"routes": routes_for(self.ns, role)}).decode()
            self.sidecars.append(await common.Child(self.ns.exec_args(role, *PARTS, "sidecar", config),
                                                    stdin=True).start())
        await self._add(self.ns.exec_args("repo", py, "-m", "pan", "repository", "--host", "0.0.0.0",
                                          "--port", str(REPO_PORT)))
        # `pan run` would start its own repository if none answered (0.0.0.0 is local): wait for ours first.
        await self._wait_for("repository", self._repository_up)
        for peer in ("p1", "p2", "p3"):
            await self._add(self.ns.exec_args(peer, py, "-m", "pan", "run", str(path), "--peer", peer))
        await self._wait_for("publishers", self._all_published)
        sender = {"host": self.ns.address("p1"), "port": INGEST_PORT, "rate": rate}
        self.sender = await common.Child(self.ns.exec_args("cli", *PARTS, "sender", orjson.dumps(sender).decode()))\
            .start()
        await asyncio.sleep(1.0)  # repeaters have data before the probe looks for them
        probe = {"repository": f"0.0.0.0:{REPO_PORT}", "paths": PATHS}
        self.probe = await common.Child(self.ns.exec_args("cli", *PARTS, "probe", orjson.dumps(probe).decode()),
                                        stdin=True).start()

    async def _add(self, args: list[str]) -> None:
        child = common.Child(args, ready=False, grace_s=12)
        await child.start()
        self.children.append(child)

    async def _repository_json(self, path: str) -> Any:
        """GET a repository page from the client namespace (through its sidecar); None if it fails."""
        code = ("import urllib.request;"
                f"print(urllib.request.urlopen('http://0.0.0.0:{REPO_PORT}{path}',timeout=2).read().decode())")
        proc = await asyncio.create_subprocess_exec(*self.ns.exec_args("cli", sys.executable, "-c", code),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        with contextlib.suppress(ValueError):
            return orjson.loads(out)
        return None

    async def _wait_for(self, what: str, ready: Any, timeout_s: float = 40.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await ready():
                return
            await asyncio.sleep(0.3)
        tails = " | ".join(c.stderr_tail(500) for c in self.children)
        raise RuntimeError(f"{what} not ready within {timeout_s} s: {tails}")

    async def _repository_up(self) -> bool:
        return await self._repository_json("/health") is not None

    async def _all_published(self) -> bool:
        publishers: list[Any] = []
        after: str | None = None
        while True:  # follow the repository's /streams pages
            info = await self._repository_json("/streams" + ("" if after is None else f"?after={quote(after)}"))
            if not info:
                return False
            publishers += info.get("streams", {}).get("LAT", [])
            after = info.get("next")
            if after is None:
                return len(publishers) >= 3

    async def set_model(self, model: dict[str, Any]) -> None:
        line = orjson.dumps(model)
        await asyncio.gather(*(s.send(line) for s in self.sidecars))
        answers = await asyncio.gather(*(s.readline(10) for s in self.sidecars))
        if not all(answers):
            raise RuntimeError("a sidecar did not acknowledge the new delay model")

    async def phase(self, name: str, seconds: float, settle_s: float) -> dict[str, Any]:
        assert self.probe is not None
        t0 = time.time_ns() + int(settle_s * 1e9)
        t1 = t0 + int(seconds * 1e9)
        await self.probe.send(orjson.dumps({"name": name, "t0_ns": t0, "t1_ns": t1, "settle_s": settle_s}))
        line = await self.probe.readline(seconds + 2 * settle_s + 30)
        if not line:
            raise RuntimeError(f"probe gave no result: {self.probe.stderr_tail()}")
        return orjson.loads(line)

    async def stop(self) -> None:
        for child in [self.probe, self.sender, *reversed(self.children), *self.sidecars]:
            if child is not None:
                await child.stop()


# --- the command ----------------------------------------------------------------------------


async def run_network(args: argparse.Namespace, ns: Namespaces) -> dict[str, Any]:
    latencies = floats(args.latencies)
    extra_bw = floats(args.bandwidths)
    summary: dict[str, Any] = {
        **common.run_header("network"),
        "config": {"latencies_ms": latencies, "bandwidth_mbit": args.bandwidth_mbit, "extra_bandwidths": extra_bw,
                   "jitter_ms": args.jitter_ms, "loss": args.loss, "rate": args.rate, "seconds": args.seconds,
                   "seed": args.seed, "quick": args.quick},
        "phases": [],
    }
    ns.create(args.bandwidth_mbit)
    with tempfile.TemporaryDirectory(prefix="pan-network-") as tmp:
        run = Run(ns, Path(tmp))
        try:
            await run.start(args.rate)
            plan = [(lat, args.bandwidth_mbit) for lat in latencies] + [(0.0, bw) for bw in extra_bw]
            current_bandwidth = args.bandwidth_mbit
            for latency, bandwidth in plan:
                if bandwidth != current_bandwidth:
                    ns.set_bandwidth(bandwidth)
                    current_bandwidth = bandwidth
                await run.set_model({"delay_ms": latency, "jitter_ms": args.jitter_ms, "loss": args.loss,
                                     "seed": args.seed})
                settle = 1.0 + 8 * latency / 1000 + (0.4 if args.loss else 0)
                report = await run.phase(f"{latency:g} ms, {bandwidth:g} Mbit/s", args.seconds, settle)
                phase = {"latency_ms": latency, "bandwidth_mbit": bandwidth, "paths": {}}
                for path, data in report["paths"].items():
                    phase["paths"][path] = {**common.summarize_ms(data["delays_ms"]),
                                            "missed_total": data["missed_total"],
                                            "failovers_total": data["failovers_total"], "source": data["source"]}
                phase["expected"] = round(args.rate * args.seconds)
                summary["phases"].append(phase)
                cells = ", ".join(f"{p}: p50 {common.fmt(d['p50_ms'])} ms n={d['count']}"
                                  for p, d in phase["paths"].items())
                print(f"network {latency:g} ms / {bandwidth:g} Mbit/s: {cells}", file=sys.stderr, flush=True)
        finally:
            await run.stop()
    summary["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["fit"] = linear_fit(summary)
    return summary


def linear_fit(summary: dict[str, Any]) -> dict[str, Any]:
    """p50 = a + b * latency per path, over the phases at the base bandwidth: b ~ hops means linear."""
    import numpy as np

    base = summary["config"]["bandwidth_mbit"]
    out = {}
    for path in PATHS:
        pts = [(ph["latency_ms"], ph["paths"][path]["p50_ms"]) for ph in summary["phases"]
               if ph["bandwidth_mbit"] == base and ph["paths"][path]["p50_ms"] is not None]
        if len({x for x, _ in pts}) >= 2:
            b, a = np.polyfit([x for x, _ in pts], [y for _, y in pts], 1)
            out[path] = {"intercept_ms": round(float(a), 2), "slope_ms_per_ms": round(float(b), 2)}
    return out


def render(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    rows = []
    for ph in summary["phases"]:
        for path, d in ph["paths"].items():
            rows.append([f"{ph['latency_ms']:g}", f"{ph['bandwidth_mbit']:g}", path, d["count"], ph["expected"],
                         common.fmt(d["p50_ms"]), common.fmt(d["p90_ms"]), common.fmt(d["p99_ms"]),
                         common.fmt(d["max_ms"]), d["missed_total"]])
    fits = "; ".join(f"{p}: {f['intercept_ms']} ms + {f['slope_ms_per_ms']} x latency"
                     for p, f in summary["fit"].items())
    lines = [
        "## Network: query delay vs added link latency, peers in namespaces (issue 6)",
        "",
        f"Measured {summary['date']} with `{summary['command']}` (as root).",
        "",
        common.machine_line(summary["machine"], summary["load_avg_at_end"])
        + " **The machine was shared and loaded** (11 benchmark processes on 2 cores, plus other jobs).",
        "",
        "Setup: six network namespaces made by the benchmark (hub router + repository, forwarder, level-1 "
        "repeater, level-2 repeater, client), one veth pair per namespace with a private /30, `tbf` "
        f"{cfg['bandwidth_mbit']:g} Mbit/s on both ends of every link (no netem on this kernel). Latency comes "
        "from the seeded delaying proxy (`benchmarks/delay_proxy.py`) on every intra-PAN link: each namespace "
        "runs a sidecar with a proxy per remote PAN service, and services bind and publish 0.0.0.0:PORT, which "
        "on Linux connects to the local namespace, i.e. to the sidecar. **Added latency is one-way per link** "
        f"(a round trip gains twice that); jitter sd {cfg['jitter_ms']:g} ms, loss {cfg['loss']:g} "
        f"(as +200 ms retransmission). A sender writes {cfg['rate']:g} JSON rows/s with their send time into "
        "the forwarder's ingest port (not proxied); the probe client pulls the stream from each publisher "
        f"(long poll w=1000). Query delay = receive time - send time; window {cfg['seconds']:g} s per phase, "
        "the proxies are reconfigured live between phases. 'Expected' = rows sent in the window; 'missed' = "
        "indices the subscriber never got (cumulative).",
        "",
        common.markdown_table(["Added ms", "Mbit/s", "Path", "Count", "Expected", "p50 ms", "p90 ms", "p99 ms",
                               "max ms", "Missed"], rows),
        "",
        common.image_link(SECTION, "query delay vs added latency"),
        "",
        f"Linear fit of p50 over the latencies: {fits or '-'}. With long polls every proxied hop costs between "
        "one latency (the poll was already parked) and three (the tuple arrived while the next poll was in "
        "flight), so the slope should lie between the hop count and three times it.",
    ]
    return "\n".join(lines)


def skip(reason: str) -> int:
    print(f"pan bench network: skipped: {reason}", file=sys.stderr)
    print(orjson.dumps({"benchmark": "network", "skipped": reason}).decode())
    return 0


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.latencies, args.bandwidths, args.seconds, args.rate = "0,20", "", 2.0, 50.0
    reason = can_run()
    if reason:
        return skip(reason)
    ns = Namespaces(f"{os.getpid() % 100000:05d}")

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        summary = eventloop.run(run_network(args, ns))
    except KeyboardInterrupt as exc:
        print(f"pan bench network: interrupted ({exc}); processes stopped, namespaces removed", file=sys.stderr)
        return 130
    finally:
        common.kill_leftovers()
        ns.delete()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    from benchmarks import plots

    common.publish(summary, args.write, SECTION, lambda: render(summary), lambda png: plots.network(summary, png))
    return 0
