"""`pan bench cluster`: the query delay of BP_wholeGame_A with the peers on a namespace cluster, against one machine.

The 3-peer full game runs on `pan cluster` hosts (pan/deploy/cluster.py: namespaces on a bridge in
198.18.0.0/15): the repository on h1, peer1-peer3 on h2-h4, and the client (the sensor simulator in real time
and the observing subscriber, `benchmarks/cluster_parts.py` with `benchmarks/query_delay.py`'s harness) on h5.
Conditions, each repeated ``--reps`` times, interleaved so that a change of load hits all of them alike:

- **one machine**: the reference of the ratios: the same processes as on the cluster (the repository, then
  ``pan run --peer`` per peer, each in a session of its own, then the client attaching to them as
  `pan replay --attach` does), on 127.0.0.1 of this machine instead of in namespaces (`WorkflowRun` says why
  the process layout must be the same);
- **cluster**: every link a plain veth on the bridge;
- **cluster +N ms**: the kernel has no netem, so delay comes from `benchmarks/delay_proxy.py`: every service
  binds and publishes 0.0.0.0:PORT, and each host runs a sidecar (`benchmarks/network_parts.py`) with a proxy
  on 127.0.0.1:PORT per service of another host, which delays each direction by N ms (one-way, per link);
  **cluster +0 ms** is the proxies without delay, their own cost;
- **cluster B Mbit/s**: ``tbf`` on both ends of every host's veth, no proxies.

Query delay as in `pan bench query-delay`: receive time at the client - send time of the newest sensor row
the tuple answers (one kernel clock for all namespaces).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common

HELP = "query delay of BP_wholeGame_A on a namespace cluster (+0/10/50 ms per link, 10/100 Mbit/s) vs one machine"
SECTION = "cluster-bench"
STREAM = "BP_wholeGame_A"
WORKFLOW = common.REPO_ROOT / "workflows" / "full_game_3_peers.json"
PLACES = {"peer1": "h2", "peer2": "h3", "peer3": "h4"}  # the repository on h1, the client on h5
HOSTS = 5
START_S = 60.0
PARTS = [sys.executable, "-m", "benchmarks.cluster_parts"]
SIDECAR = [sys.executable, "-m", "benchmarks.network_parts", "sidecar"]


@dataclass(frozen=True)
class Condition:
    name: str
    cluster: bool = True
    delay_ms: float | None = None  # None: no proxies
    bandwidth_mbit: float = 0.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--latencies", default="0,10,50", help="added one-way ms per link, comma list (0: the proxies "
                   "without delay)")
    p.add_argument("--bandwidths", default="10,100", help="tbf rates (Mbit/s) on every link, comma list")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of generated match per replay")
    p.add_argument("--quick", action="store_true", help="smoke mode: 1 rep of 8 s, one machine, cluster, +10 ms")
    p.add_argument("--write", type=Path, help="update this Markdown report (e.g. docs/benchmarks.md)")


def conditions(latencies: list[float], bandwidths: list[float]) -> list[Condition]:
    plan = [Condition("one machine", cluster=False), Condition("cluster")]
    plan += [Condition(f"cluster +{ms:g} ms", delay_ms=ms) for ms in latencies]
    plan += [Condition(f"cluster {mbit:g} Mbit/s", bandwidth_mbit=mbit) for mbit in bandwidths]
    return plan


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


# --- the workflow on the hosts -----------------------------------------------------------


def placed(workflow: dict[str, Any], addresses: dict[str, str], proxied: bool) -> dict[str, Any]:
    """Every worker on its host's address (proxied: 0.0.0.0, which the host's sidecar serves for the others)."""
    def where(host: str) -> str:
        return "0.0.0.0" if proxied else addresses[host]

    workers = [{**w, "host": where(PLACES[w["peer"]])} for w in workflow["workers"]]
    return {**workflow, "repository": {**workflow["repository"], "host": where("h1")}, "workers": workers}


def services(workflow: dict[str, Any]) -> dict[str, list[int]]:
    """Host -> the ports its services listen on (the repository's, every worker's and ingest port)."""
    ports: dict[str, list[int]] = {"h1": [int(workflow["repository"]["port"])]}
    for w in workflow["workers"]:
        host = ports.setdefault(PLACES[w["peer"]], [])
        host.append(int(w["port"]))
        ingest = w.get("params", {}).get("ingest_port")
        if isinstance(ingest, int):
            host.append(ingest)
    return ports


def routes(workflow: dict[str, Any], addresses: dict[str, str], host: str) -> list[dict[str, Any]]:
    """The sidecar routes of ``host``: a proxy for every service of every other host."""
    return [{"port": port, "host": addresses[other]}
            for other, ports in services(workflow).items() if other != host for port in ports]


# --- one repetition -----------------------------------------------------------------------


class WorkflowRun:
    """The service processes of one repetition; ``stop()`` ends them all.

    The one-machine reference starts exactly the processes the cluster starts (the repository, then one
    ``pan run --peer`` per peer, each a `pan.launch.processes.Child` in a session of its own), only without
    ``ip netns exec`` and on 127.0.0.1. The layout matters on a shared machine: with the kernel's autogroup
    scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) CPU time is shared out per session, so one
    ``pan run`` holding all peers got a quarter of the cluster's share under load and its delay was many
    times the cluster's for that reason alone.
    """

    def __init__(self, state: Any, condition: Condition, work: Path) -> None:
        self.state = state
        self.condition = condition
        self.work = work
        hosts = [f"h{k}" for k in range(1, HOSTS + 1)]
        self.addresses = ({h.name: h.address for h in state.hosts} if condition.cluster
                          else dict.fromkeys(hosts, common.HOST))
        self.children: list[common.Child] = []

    def in_host(self, host: str, *args: str) -> list[str]:
        """``args`` as a command on ``host`` (on one machine: as they are)."""
        if not self.condition.cluster:
            return list(args)
        return ["ip", "netns", "exec", self.state.host(host).namespace, *args]

    async def start(self, workflow: dict[str, Any]) -> Path:
        proxied = self.condition.delay_ms is not None
        data = placed(workflow, self.addresses, proxied)
        path = self.work / "workflow.json"
        path.write_text(json.dumps(data))
        if proxied:
            for host in self.addresses:
                config = json.dumps({"routes": routes(data, self.addresses, host)})
                sidecar = await self._start(self.in_host(host, *SIDECAR, config), stdin=True)
                await sidecar.send(json.dumps({"delay_ms": self.condition.delay_ms}).encode())
                if not await sidecar.readline(10):
                    raise RuntimeError(f"the sidecar of {host} did not take its delay: {sidecar.stderr_tail()}")
        repo = data["repository"]
        await self._start(self.in_host("h1", sys.executable, "-m", "pan", "repository", "--host", repo["host"],
                                       "--port", str(repo["port"])), ready=False)
        await wait_for_repository(self.addresses["h1"], int(repo["port"]), self.children[-1])
        for peer, host in PLACES.items():
            await self._start(self.in_host(host, sys.executable, "-m", "pan", "run", str(path), "--peer", peer),
                              ready=False)
        return path

    async def _start(self, args: list[str], **options: Any) -> common.Child:
        if not options.get("stdin"):  # nobody reads a service's stdout: a file, not a pipe that could fill
            options["log"] = self.work / f"service{len(self.children)}.log"
        child = common.Child(args, grace_s=12, **options)
        self.children.append(child)
        await child.start()
        return child

    async def stop(self) -> None:
        for child in reversed(self.children):
            await child.stop()
        self.children.clear()


async def wait_for_repository(address: str, port: int, starter: common.Child) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        try:
            await asyncio.to_thread(urllib.request.urlopen, f"http://{address}:{port}/health", timeout=2)
            return
        except OSError:
            await asyncio.sleep(0.3)
    raise RuntimeError(f"the repository on {address} did not answer within {START_S:g} s: {starter.stderr_tail()}")


async def measure(args: list[str], config: dict[str, Any], timeout_s: float) -> list[float]:
    """Run the client (`benchmarks/cluster_parts.py`) and return the delays of STREAM (ms)."""
    client = common.Child([*args, *PARTS, json.dumps(config)], ready=False, grace_s=30)
    async with client:
        line = await client.readline(timeout_s)
    if not line:
        raise RuntimeError(f"the client gave no result: {client.stderr_tail()}")
    return list(json.loads(line)[STREAM])


async def repetition(state: Any, condition: Condition, data: Path, work: Path, timeout_s: float) -> list[float]:
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    config = {"data": str(data), "work": str(work / "client"), "streams": [STREAM], "attach": True}
    workflow = json.loads(WORKFLOW.read_text())
    if condition.cluster:
        from pan.deploy import netns

        for host in state.hosts:  # tbf on both ends of every link, or none
            netns.shape(None, host.veth, bandwidth_mbit=condition.bandwidth_mbit)
            netns.shape(host.namespace, "eth0", bandwidth_mbit=condition.bandwidth_mbit)
    else:  # free ports: other programs on this machine may hold the workflow's
        from pan.workflow.parser import on_free_ports

        workflow = on_free_ports(workflow)
    run = WorkflowRun(state, condition, work)
    try:
        config["workflow"] = str(await run.start(workflow))
        return await measure(run.in_host("h5"), config, timeout_s)
    finally:
        await run.stop()


# --- the command ---------------------------------------------------------------------------


async def run_all(args: argparse.Namespace, state: Any, data: Path, root: Path) -> dict[str, Any]:
    plan = conditions(floats(args.latencies), floats(args.bandwidths))
    per_rep: dict[str, list[dict[str, Any]]] = {c.name: [] for c in plan}
    header = common.run_header("cluster")  # the machine with its load average at the start
    load = [list(os.getloadavg())]
    timeout_s = args.seconds + 240
    for rep in range(args.reps):
        for n, condition in enumerate(plan):
            delays = await repetition(state, condition, data, root / f"r{rep}c{n}", timeout_s)
            summary = common.summarize_ms(delays)
            per_rep[condition.name].append(summary)
            print(f"cluster rep {rep + 1}/{args.reps} {condition.name}: {STREAM} p50 "
                  f"{common.fmt(summary['p50_ms'])} ms (n={summary['count']})", file=sys.stderr, flush=True)
        load.append(list(os.getloadavg()))
    results: dict[str, Any] = {
        **header,
        "config": {"reps": args.reps, "seconds": args.seconds, "latencies_ms": floats(args.latencies),
                   "bandwidths_mbit": floats(args.bandwidths), "workflow": WORKFLOW.name, "stream": STREAM},
        "conditions": {},
        "load_avg": [round(x, 2) for x in load[0]],
        "load_avg_at_end": [round(x, 2) for x in load[-1]],
        "load_avg_1min_range": [round(min(x[0] for x in load), 2), round(max(x[0] for x in load), 2)],
    }
    reference = None
    for condition in plan:
        p50s = [s["p50_ms"] for s in per_rep[condition.name] if s["p50_ms"] is not None]
        p90s = [s["p90_ms"] for s in per_rep[condition.name] if s["p90_ms"] is not None]
        entry = {"p50_ms_median": round(common.median(p50s), 3) if p50s else None,
                 "p50_ms_min": min(p50s, default=None), "p50_ms_max": max(p50s, default=None),
                 "p90_ms_median": round(common.median(p90s), 3) if p90s else None,
                 "tuples_median": common.median([s["count"] for s in per_rep[condition.name]]),
                 "reps": per_rep[condition.name]}
        if not condition.cluster:
            reference = entry["p50_ms_median"]
        entry["ratio_to_one_machine"] = (round(entry["p50_ms_median"] / reference, 2)
                                         if reference and entry["p50_ms_median"] is not None else None)
        results["conditions"][condition.name] = entry
    return results


def render(results: dict[str, Any]) -> str:
    cfg = results["config"]
    rows = [[name, len(c["reps"]), common.fmt(c["tuples_median"]), common.fmt(c["p50_ms_median"]),
             f"{common.fmt(c['p50_ms_min'])}-{common.fmt(c['p50_ms_max'])}", common.fmt(c["p90_ms_median"]),
             common.fmt(c["ratio_to_one_machine"], 2)]
            for name, c in results["conditions"].items()]
    low, high = results["load_avg_1min_range"]
    return "\n".join([
        *common.report_head("## Cluster: query delay of BP_wholeGame_A on namespace hosts (issue 14)", results),
        "",
        f"Command: `{results['command']}`. Load average (1 min) between {low:g} and {high:g} during the run.",
        "",
        f"`{cfg['workflow']}` with the repository on h1, peer1-peer3 on h2-h4 of a `pan cluster` (network "
        "namespaces on a bridge), and the client (real-time sensor simulator and observing subscriber) on h5; "
        f"{cfg['seconds']:g} s of a generated match per replay, {cfg['reps']} replays per condition, the "
        "conditions interleaved. Delay = receive time at the client - send time of the newest sensor row the "
        "tuple answers. 'one machine': the same processes (repository, one `pan run --peer` per peer, each in "
        "a session of its own, as on the cluster) on 127.0.0.1 of this machine. '+N ms': every link through a "
        "delaying proxy (`benchmarks/delay_proxy.py`, no netem on this kernel), N ms one-way per link, so a round "
        "trip gains 2N; '+0 ms' is the proxies' own cost. "
        "'Mbit/s': `tbf` on both ends of every veth, no proxies. Ratio: median p50 over the one-machine median "
        "p50 of the same run (`benchmarks/cluster_bench.py`).",
        "",
        common.markdown_table(["condition", "reps", "tuples (median)", "p50 ms (median)", "p50 min-max",
                               "p90 ms (median)", "ratio to one machine"], rows),
    ])


def skip(reason: str) -> int:
    print(f"pan bench cluster: skipped: {reason}", file=sys.stderr)
    print(json.dumps({"benchmark": "cluster", "skipped": reason}))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.reps, args.seconds, args.latencies, args.bandwidths = 1, 8.0, "10", ""
    if args.reps < 1 or args.seconds <= 0:
        print("pan bench cluster: --reps must be >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    try:
        floats(args.latencies), floats(args.bandwidths)
    except ValueError:
        print("pan bench cluster: --latencies and --bandwidths are comma lists of numbers", file=sys.stderr)
        return 2
    from pan.deploy import cluster
    from pan.util import eventloop

    reason = cluster.problem()
    if reason:
        return skip(reason)
    name = f"b{os.getpid() % 100000}"
    try:
        state = cluster.up(name, HOSTS)
    except cluster.ClusterError as exc:
        return skip(str(exc))
    try:
        with tempfile.TemporaryDirectory(prefix="pan-cluster-bench-") as tmp:
            root = Path(tmp)
            data = prepare(root, args.seconds)
            results = eventloop.run(run_all(args, state, data, root))
    except KeyboardInterrupt:
        print("pan bench cluster: interrupted; the cluster is removed", file=sys.stderr)
        return 130
    finally:
        common.kill_leftovers()
        cluster.down(name)
    common.publish(results, args.write, SECTION, lambda: render(results))
    return 0


def prepare(root: Path, seconds: float) -> Path:
    """``seconds`` of a generated match (seed 2013), split per sensor without Spark."""
    from benchmarks.query_delay import plain_split
    from simulator.match import generate

    generate(root / "game", seconds / 60, seed=2013)
    return plain_split(root / "game", root / "split")
