"""Network namespaces and link shaping with iproute2: the parts that `pan cluster` and `pan bench network` share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


class NetnsError(RuntimeError):
    """A command of iproute2 failed; the message is one line for the user."""


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run an iproute2 (or other) command; ``NetnsError`` with its stderr when ``check`` and it fails."""
    result = subprocess.run(list(args), capture_output=True, text=True, check=False, timeout=60)
    if check and result.returncode != 0:
        raise NetnsError(f"`{' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def can_create_namespaces(tool_problem: str | None = None) -> str | None:
    """None if namespaces can be made here, else the reason (one line). ``tool_problem``: a caller's own check."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "needs root (ip netns add, tc)"
    if tool_problem:
        return tool_problem
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (apt-get install iproute2)"
    probe = f"panprobe{os.getpid()}"
    result = sh("ip", "netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"cannot create network namespaces: {result.stderr.strip()}"
    sh("ip", "netns", "del", probe, check=False)
    return None


def exec_args(namespace: str, *args: str) -> list[str]:
    """``args`` run inside ``namespace``."""
    return ["ip", "netns", "exec", namespace, *args]


def shape(namespace: str | None, device: str, *, bandwidth_mbit: float = 0.0, delay_ms: float = 0.0) -> None:
    """Egress shaping of one device: ``tbf`` for bandwidth, ``netem`` for delay (both: netem, then tbf under it).

    Zero for both removes any shaping. A kernel without netem gives a ``NetnsError`` that says so."""
    where = ["-n", namespace] if namespace else []
    sh("tc", *where, "qdisc", "del", "dev", device, "root", check=False)
    tbf = []
    if bandwidth_mbit > 0:
        burst = max(32_000, int(bandwidth_mbit * 1e6 / 8 / 100))  # >= 10 ms worth of bytes
        tbf = ["tbf", "rate", f"{bandwidth_mbit}mbit", "burst", str(burst), "latency", "200ms"]
    if delay_ms > 0:
        result = sh("tc", *where, "qdisc", "add", "dev", device, "root", "handle", "1:", "netem", "delay",
                    f"{delay_ms}ms", check=False)
        if result.returncode != 0:
            reason = "this kernel has no netem" if "unknown" in result.stderr.lower() else result.stderr.strip()
            raise NetnsError(f"cannot add {delay_ms:g} ms of delay on {device}: {reason}")
        if tbf:
            sh("tc", *where, "qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:", *tbf)
    elif tbf:
        sh("tc", *where, "qdisc", "add", "dev", device, "root", *tbf)


def namespaces() -> set[str]:
    """The names of the network namespaces that exist now."""
    out = sh("ip", "netns", "list", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def pids_in(namespace: str) -> list[int]:
    """Every process that runs in ``namespace`` (``ip netns pids``)."""
    out = sh("ip", "netns", "pids", namespace, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]
