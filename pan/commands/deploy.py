"""`pan deploy install|up|status|logs|down|simulate` and `pan cluster up|down|status`.

Every failure is one line per host (or per problem) and exit code 1 or 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("deploy", help="run a workflow's peers on many hosts over SSH (an inventory)")
    sub = p.add_subparsers(dest="deploy_command", required=True, metavar="STEP")

    def step(name: str, help_text: str, handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help_text)
        s.add_argument("inventory", help="inventory JSON (pan/deploy/inventory.py)")
        s.add_argument("--workflow", help="the workflow to deploy (default: the inventory's)")
        s.set_defaults(handler=handler)
        return s

    s = step("install", "build the wheel, copy it with the workflow to every host, make the venvs", cmd_install)
    s.add_argument("--project", type=Path, help="the project's folder to build the wheel from (default: this one)")
    s = step("certs", "a private CA and a TLS certificate per host address, for the workflow's tls (needs pan[tls])",
             cmd_certs)
    s.add_argument("--out", required=True, type=Path, help="folder for ca.pem, ADDRESS.pem and ADDRESS.key")
    s.add_argument("--days", type=int, default=30)
    step("up", "start every peer and the repository, detached; all or nothing", cmd_up)
    s = step("status", "host, process, alive, /health, streams published", cmd_status)
    s.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    s = step("logs", "a peer's (or the repository's) log", cmd_logs)
    s.add_argument("peer", help="a peer's name, or 'repository'")
    s.add_argument("-f", "--follow", action="store_true")
    s.add_argument("-n", "--lines", type=int, default=200)
    step("down", "stop everything up started, and check nothing is left", cmd_down)
    s = step("simulate", "copy a split folder to a host and run `pan simulate` there (extra args after --)",
             cmd_simulate)
    s.add_argument("--host", help="the inventory host to run on (required)")
    s.add_argument("--data", type=Path, help="folder written by `pan split` (required)")
    s.add_argument("--slaves", metavar="HOST,...",
                   help="more inventory hosts: each feeds a share of the input, all on the WeakTrueTime clock of "
                   "--host (their master) and from one start time")
    s.add_argument("extra", nargs=argparse.REMAINDER, help="more `pan simulate` options, after --")

    p = subparsers.add_parser("cluster", help="a test cluster on this machine: namespaces with sshd (root)")
    sub = p.add_subparsers(dest="cluster_command", required=True, metavar="STEP")
    s = sub.add_parser("up", help="make the namespaces, bridge, veths and sshds")
    s.add_argument("--name", default="pan")
    s.add_argument("--hosts", type=int, default=5)
    s.add_argument("--subnet", type=int, help="which /24 of 198.18.0.0/15 (default: the first free one)")
    s.add_argument("--bandwidth-mbit", type=float, default=0.0, help="tbf on both ends of every link (0: none)")
    s.add_argument("--delay-ms", type=float, default=0.0, help="netem delay on both ends of every link (0: none)")
    s.set_defaults(handler=cmd_cluster_up)
    s = sub.add_parser("down", help="remove everything the cluster made, and whatever runs in its namespaces")
    s.add_argument("--name", default="pan")
    s.set_defaults(handler=cmd_cluster_down)
    s = sub.add_parser("status", help="each host's address, namespace and sshd")
    s.add_argument("--name", default="pan")
    s.set_defaults(handler=cmd_cluster_status)


def _fail(command: str, lines: list[str], code: int = 2) -> int:
    for line in lines:
        print(f"pan deploy {command}: {line}", file=sys.stderr)
    return code


def _inventory(args: argparse.Namespace) -> Any:
    from pan.deploy.inventory import InventoryError, load_inventory

    try:
        return load_inventory(args.inventory, args.workflow)
    except InventoryError as exc:
        _fail(args.deploy_command, exc.problems)
        return None


def _run(coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return 130


def cmd_install(args: argparse.Namespace) -> int:
    from pan.deploy import install
    from pan.deploy.ssh import on_hosts

    inventory = _inventory(args)
    if inventory is None:
        return 2
    with install.stage_dir() as stage:
        try:
            bundle = install.bundle(inventory, inventory.workflow_path, inventory.workflow,
                                    args.project or install.project_folder(), Path(stage))
        except install.InstallError as exc:
            return _fail("install", [str(exc)])
        done, errors = _run(on_hosts(inventory.hosts.values(), lambda c: install.install_host(c, bundle)))
    for name in inventory.hosts:
        if name in done:
            print(done[name])
    return _fail("install", [str(e) for e in errors], 1) if errors else 0


def cmd_certs(args: argparse.Namespace) -> int:
    from pan.deploy import install

    inventory = _inventory(args)
    if inventory is None:
        return 2
    if args.days < 1:
        return _fail("certs", ["--days must be >= 1"])
    try:
        tls = install.make_certs(inventory, args.out, args.days)
    except (install.InstallError, OSError) as exc:
        return _fail("certs", [str(exc)], 1)
    print(json.dumps({"tls": tls}, indent=1))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from pan.deploy import control

    inventory = _inventory(args)
    if inventory is None:
        return 2
    return _run(control.up(inventory, inventory.workflow, report=print))


def cmd_down(args: argparse.Namespace) -> int:
    from pan.deploy import control

    inventory = _inventory(args)
    if inventory is None:
        return 2
    return _run(control.down(inventory, report=print))


def cmd_status(args: argparse.Namespace) -> int:
    from pan.deploy import control

    inventory = _inventory(args)
    if inventory is None:
        return 2
    rows, errors = _run(control.status(inventory, inventory.workflow))
    if args.json:
        print(json.dumps({"rows": rows, "errors": errors}))
    else:
        header = ["host", "process", "pid", "alive", "health", "streams"]
        table = [header] + [[str(r[k] if r[k] is not None else "-") for k in header] for r in rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        for line in errors:
            print(line, file=sys.stderr)
    return 1 if errors or not all(r["alive"] and r["health"] == "ok" for r in rows) else 0


def cmd_logs(args: argparse.Namespace) -> int:
    from pan.deploy import control
    from pan.deploy.ssh import HostError

    inventory = _inventory(args)
    if inventory is None:
        return 2
    known = [control.REPOSITORY, *(p for h in inventory.hosts.values() for p in h.peers)]
    if args.peer not in known:
        return _fail("logs", [f"no peer {args.peer!r}; known: {', '.join(known)}"])
    try:
        return _run(control.logs(inventory, args.peer, args.follow, args.lines))
    except HostError as exc:
        return _fail("logs", [str(exc)], 1)


def cmd_simulate(args: argparse.Namespace) -> int:
    from pan.deploy import control
    from pan.deploy.ssh import HostError

    problem = _split_simulate_options(args)
    if problem:
        return _fail("simulate", [problem])
    inventory = _inventory(args)
    if inventory is None:
        return 2
    if args.host not in inventory.hosts:
        return _fail("simulate", [f"no host {args.host!r}; known: {', '.join(inventory.hosts)}"])
    if not args.data.is_dir():
        return _fail("simulate", [f"--data {args.data} is not a folder"])
    slaves = [h.strip() for h in (args.slaves or "").split(",") if h.strip()]
    unknown = [h for h in slaves if h not in inventory.hosts]
    if unknown:
        return _fail("simulate", [f"--slaves: no host {h!r}; known: {', '.join(inventory.hosts)}" for h in unknown])
    if args.host in slaves or len(set(slaves)) != len(slaves):
        return _fail("simulate", ["--slaves: each host once, and not --host itself (the master)"])
    try:
        return _run(control.simulate(inventory, args.host, args.data, args.extra, slaves))
    except HostError as exc:
        return _fail("simulate", [str(exc)], 1)


def _split_simulate_options(args: argparse.Namespace) -> str | None:
    """`--host`, `--data` and `--workflow` given after INVENTORY land in the REMAINDER (argparse matches it
    right after the positional): take them out of it; what follows `--` (and anything else) goes to `pan
    simulate`. A problem, as one line, or None."""
    extra, tail = list(args.extra), []
    if "--" in extra:
        cut = extra.index("--")
        extra, tail = extra[:cut], extra[cut + 1:]
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--host")
    own.add_argument("--data", type=Path)
    own.add_argument("--workflow")
    own.add_argument("--slaves")
    found, rest = own.parse_known_args(extra)
    for name in ("host", "data", "workflow", "slaves"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(found, name))
    args.extra = rest + tail
    missing = [f"--{name}" for name in ("host", "data") if getattr(args, name) is None]
    return f"{' and '.join(missing)} required" if missing else None


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from pan.deploy import cluster

    try:
        state = cluster.up(args.name, args.hosts, subnet=args.subnet, bandwidth_mbit=args.bandwidth_mbit,
                           delay_ms=args.delay_ms)
    except cluster.ClusterError as exc:
        print(f"pan cluster up: {exc}", file=sys.stderr)
        return 2
    for host in state.hosts:
        print(f"{host.name}  {host.address}  namespace {host.namespace}  sshd pid {host.sshd_pid}")
    print(f"client key {state.client_key}, known hosts {state.known_hosts}; "
          f'inventories name it with "cluster": "{state.name}"')
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    from pan.deploy import cluster

    try:
        removed = cluster.down(args.name)
    except cluster.ClusterError as exc:
        print(f"pan cluster down: {exc}", file=sys.stderr)
        return 2
    for line in removed or [f"no cluster {args.name}: nothing to remove"]:
        print(line)
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from pan.deploy import cluster

    try:
        rows = cluster.status(args.name)
    except cluster.ClusterError as exc:
        print(f"pan cluster status: {exc}", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r['host']}  {r['address']}  namespace {'yes' if r['namespace'] else 'MISSING'}  "
              f"sshd {'alive' if r['sshd'] else 'DEAD'}  ssh {'answers' if r['ssh_answers'] else 'SILENT'}  "
              f"processes {r['processes']}")
    return 0 if all(r["namespace"] and r["sshd"] and r["ssh_answers"] for r in rows) else 1
