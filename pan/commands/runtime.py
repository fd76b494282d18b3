"""Runtime subcommands: validate, repository, run, peer, subscribe."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

import orjson

from pan.commands.connect import ConnectError, add_connection_arguments, connection, missing_stream, registered_streams
from pan.config.specs import Workflow, WorkflowError
from pan.config.trust import Trust
from pan.http.addresses import is_host
from pan.input.fetcher import default_wire
from pan.input.subscriber import StreamSubscriber, SubscriberError
from pan.launch.launcher import (
    FAILED_FILE,
    RESTART_POLICIES,
    Launcher,
    is_local_host,
    is_loopback,
    repositories_to_start,
)
from pan.launch.lifeline import die_with_launcher
from pan.repository.client import parse_address
from pan.repository.server import DEFAULT_PORT, RepositoryServer
from pan.security.auth import AuthError, SecretSource
from pan.security.tls import TlsError, client_context, make_certificates, server_context
from pan.util import eventloop
from pan.wire import arrow_pages, line_pages
from pan.worker.peer import run_peer
from pan.workflow import prometheus_sd
from pan.workflow.parser import load_workflow
from pan.workflow.preflight import ports_in_use


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("validate", help="check a workflow file")
    p.add_argument("workflow")
    p.set_defaults(handler=cmd_validate)

    p = subparsers.add_parser("repository", help="run the publish/subscribe repository")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--allow-host", action="append", metavar="HOST",
                   help="only publishers on these hosts may register (repeatable; default: any)")
    p.add_argument("--replica", action="append", default=[], metavar="HOST:PORT",
                   help="another repository of the workflow: this one adopts its registrations at start (repeatable)")
    p.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    p.add_argument("--tls-ca", metavar="PEM", help="the CA that signs the replicas' certificates (with --replica)")
    secret = p.add_mutually_exclusive_group()
    secret.add_argument("--secret-file", metavar="PATH",
                        help="the workflow's secret: publish/unpublish must be signed, reads need the read token")
    secret.add_argument("--secret-env", metavar="NAME", help="as --secret-file, from this environment variable")
    p.set_defaults(handler=cmd_repository)

    p = subparsers.add_parser("certs", help="make a private CA and a TLS certificate per host (needs pan[tls])")
    p.add_argument("hosts", nargs="+", metavar="HOST", help="the hosts servers run on (IP addresses or names)")
    p.add_argument("--out", required=True, help="folder for ca.pem, HOST.pem and HOST.key")
    p.add_argument("--days", type=int, default=30, help="validity (default: %(default)s days)")
    p.set_defaults(handler=cmd_certs)

    p = subparsers.add_parser("token", help="print the read token of a workflow with a secret (for readers)")
    p.add_argument("workflow")
    p.set_defaults(handler=cmd_token)

    p = subparsers.add_parser("run", help="start a workflow: the repository if local, and its peers")
    p.add_argument("workflow")
    p.add_argument("--peer", action="append", help="start only this peer (repeatable)")
    p.add_argument("--restart", choices=RESTART_POLICIES, default="no",
                   help="on-failure: start a peer (or the repository) again when it crashes or is killed, waiting "
                        "0.5 s, then twice as long after each failure in a row, at most 30 s (default: %(default)s)")
    p.add_argument("--prometheus-sd", type=Path, metavar="FILE",
                   help="write Prometheus file_sd targets (JSON) for every worker's and repository's /metrics")
    p.add_argument("--log-dir", type=Path, metavar="DIR",
                   help="write each child's output to DIR/<child>.log (default: this terminal)")
    p.add_argument("--fail-fast", action="store_true",
                   help="stop the whole workflow as soon as a peer or the repository ends (exit 1), naming it; "
                        f"with --log-dir also in DIR/{FAILED_FILE}")
    add_state_arguments(p)
    p.set_defaults(handler=cmd_run)

    p = subparsers.add_parser("peer", help="run one peer's workers in this process (used by `pan run`)")
    p.add_argument("workflow")
    p.add_argument("--name", required=True)
    add_state_arguments(p)
    p.set_defaults(handler=cmd_peer)

    p = subparsers.add_parser("subscribe", help="print a stream's tuples as JSON lines")
    p.add_argument("stream")
    add_connection_arguments(p)
    p.add_argument("--wait", action="store_true",
                   help="wait for a publisher of the stream rather than exit when the repository knows none")
    p.add_argument("--from", dest="start", choices=["earliest", "latest"], default="earliest")
    p.add_argument("--count", type=int, help="exit after this many tuples")
    p.add_argument("--norep", action="store_true", help="pull only from the original producer")
    p.add_argument("--page-size", type=int, default=1000)
    p.add_argument("--wait-ms", type=int, default=1000, help="long-poll wait per fetch")
    p.add_argument(
        "--gaps", choices=["write", "skip"], default="write",
        help='write {"gap": {"from": i, "to": j}} and {"reset": {...}} lines where tuples were missed (default), '
        "or skip them",
    )
    p.add_argument(
        "--format", choices=["json", "arrow"], default=None,
        help="page format on the wire (default: json, or arrow with PAN_WIRE=arrow); "
        "the output is JSON lines either way",
    )
    p.set_defaults(handler=cmd_subscribe)


def _load(path: str) -> Workflow | None:
    try:
        return load_workflow(path)
    except WorkflowError as exc:
        print(f"{exc.source}: invalid workflow", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return None


def cmd_validate(args: argparse.Namespace) -> int:
    workflow = _load(args.workflow)
    if workflow is None:
        return 1
    print(f"{args.workflow}: ok ({len(workflow.workers)} workers on {len(workflow.peers())} peers)")
    return 0


def cmd_repository(args: argparse.Namespace) -> int:
    die_with_launcher()  # started by `pan run`: stop when it is gone, even if it was SIGKILLed
    source = SecretSource(file=Path(args.secret_file)) if args.secret_file else (
        SecretSource(env=args.secret_env) if args.secret_env else None)
    try:
        credentials = None if source is None else source.load()
    except AuthError as exc:
        print(f"pan repository: {exc}", file=sys.stderr)
        return 2
    if credentials is None:
        warn_if_open([args.host], "pan repository")
    try:
        replicas = [parse_address(address) for address in args.replica]
    except ValueError as exc:
        print(f"pan repository: --replica: {exc}", file=sys.stderr)
        return 2
    if (args.tls_cert is None) != (args.tls_key is None):
        print("pan repository: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    try:
        tls = None if args.tls_cert is None else (
            server_context(Path(args.tls_cert), Path(args.tls_key)),
            client_context(Path(args.tls_ca)) if args.tls_ca else ssl.create_default_context())
    except TlsError as exc:
        print(f"pan repository: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        # Handlers go in before the banner: whoever reads the banner may signal at once.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = RepositoryServer(args.host, args.port, credentials=credentials, replicas=replicas,
                                  allowed_hosts=None if args.allow_host is None else frozenset(args.allow_host),
                                  tls=tls)
        await server.start()
        print(f"repository listening on {args.host}:{server.port} ({eventloop.running_loop_name()})", file=sys.stderr,
              flush=True)
        try:
            await stop.wait()
        finally:
            await server.stop()

    try:
        eventloop.run(main())
    except OSError as exc:  # the port is taken, or the address is not this machine's
        print(f"pan repository: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    die_with_launcher()  # started by `pan replay` or a demo: stop when it is gone
    workflow = _load(args.workflow)
    if workflow is None:
        return 1
    if workflow.auth is None:
        warn_if_open([r.host for r in workflow.repositories] + [w.host for w in workflow.workers], "pan run")
    try:  # before anything starts: one clear line rather than every child failing
        trust = Trust.of(workflow)
        for host in {r.host for r in workflow.repositories} | {w.host for w in workflow.workers}:
            if is_local_host(host):
                trust.server_tls(host)
    except (AuthError, TlsError) as exc:
        print(f"pan run: {exc}", file=sys.stderr)
        return 2
    if args.fail_fast and args.restart != "no":
        print("pan run: --fail-fast and --restart on-failure cannot go together", file=sys.stderr)
        return 2
    try:
        launcher = Launcher(args.workflow, workflow, args.peer, restart=args.restart, log_dir=args.log_dir,
                            fail_fast=args.fail_fast, state_dir=args.state_dir, fresh_start=args.fresh_start)
    except ValueError as exc:
        print(f"pan run: {exc}", file=sys.stderr)
        return 2
    taken = ports_in_use(workflow, is_local_host, repositories_to_start(workflow), launcher.peers)
    if taken:
        print(f"pan run: port(s) in use: {', '.join(taken)}", file=sys.stderr)
        return 1
    if args.prometheus_sd is not None:
        try:
            prometheus_sd.write(args.prometheus_sd, workflow)
        except OSError as exc:
            print(f"pan run: --prometheus-sd {args.prometheus_sd}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return launcher.run()


def cmd_peer(args: argparse.Namespace) -> int:
    die_with_launcher()  # started by `pan run`: stop when it is gone, even if it was SIGKILLed
    workflow = _load(args.workflow)
    if workflow is None:
        return 1
    if args.name not in workflow.peers():
        print(f"pan peer: {args.workflow} has no peer named {args.name!r}; its peers: "
              f"{', '.join(workflow.peers())}", file=sys.stderr)
        return 2
    return run_peer(workflow, args.name, args.state_dir, args.fresh_start)


def add_state_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", type=Path, metavar="DIR",
                   help="keep the stateful workers' checkpoints in DIR (every checkpoint_s of event time, as the "
                        "workflow says) and restore the newest one on start")
    p.add_argument("--fresh-start", action="store_true",
                   help="with --state-dir: start a worker whose newest checkpoint is refused (corrupt, truncated, "
                        "of another workflow) without it, rather than not at all")


def warn_if_open(hosts: list[str], command: str) -> None:
    """Anyone who reaches a non-loopback address may publish, unpublish and read: say so."""
    exposed = sorted({h for h in hosts if not is_loopback(h)})
    if exposed:
        print(f"{command}: warning: binding {', '.join(exposed)} without a secret: anyone who can reach "
              "it may publish, unpublish and read streams (give the workflow an \"auth\" secret)",
              file=sys.stderr, flush=True)


def cmd_certs(args: argparse.Namespace) -> int:
    bad = [host for host in args.hosts if not is_host(host)]
    if bad or args.days < 1:
        print(f"pan certs: {'--days must be >= 1' if not bad else 'not a host: ' + ', '.join(bad)}", file=sys.stderr)
        return 2
    try:
        files = make_certificates(Path(args.out), args.hosts, days=args.days)
    except (TlsError, OSError) as exc:
        print(f"pan certs: {exc}", file=sys.stderr)
        return 2
    print(orjson.dumps({"ca": str(files.ca), "cert": files.cert, "key": files.key}).decode())
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    workflow = _load(args.workflow)
    if workflow is None:
        return 1
    if workflow.auth is None:
        print(f"pan token: {args.workflow} has no \"auth\" secret: its streams need no token", file=sys.stderr)
        return 2
    try:
        print(workflow.auth.load().read_token)
    except AuthError as exc:
        print(f"pan token: {exc}", file=sys.stderr)
        return 2
    return 0


def up_to_tuples(items: list[Any], tuples: list[Any], wanted: int | None) -> tuple[list[Any], int]:
    """``items`` (``tuples`` with markers among them) up to the ``wanted``-th tuple (None: all), and how many
    tuples that keeps. Tuples are told from markers by identity: encoded, both are bytes."""
    if wanted is None or wanted >= len(tuples):
        return items, len(tuples)
    if wanted <= 0:
        return [], 0
    last = tuples[wanted - 1]
    cut = next(n for n, item in enumerate(items) if item is last)
    return items[: cut + 1], wanted


def cmd_subscribe(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 1:
        print("pan subscribe: --count must be >= 1", file=sys.stderr)
        return 2
    if args.format == "arrow" and not arrow_pages.available():
        print("pan subscribe: --format arrow needs pyarrow (pip install 'pan[arrow]')", file=sys.stderr)
        return 2
    wire = args.format or default_wire()
    try:
        conn = connection(args)
    except ConnectError as exc:
        print(f"pan subscribe: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        streams = await registered_streams(conn, args.connect_timeout)  # one line now, not a silent wait
        if args.stream not in streams and not args.wait:
            raise ConnectError(missing_stream(args.stream, streams))
        out = sys.stdout.buffer
        printed = 0  # tuples, not gap or reset lines
        # Over JSON, line pages: each tuple is printed as the publisher holds it, decoded and encoded by nobody.
        encoded = wire == "json"
        async with StreamSubscriber(
            args.stream,
            conn.repositories,
            start=args.start,
            reset=args.start,
            page_size=args.page_size,
            max_wait_ms=args.wait_ms,
            norep=args.norep,
            gaps=args.gaps == "write",
            wire=wire,
            token=conn.token,
            tls=conn.tls,
            encoded=encoded,
        ) as subscriber:
            while True:
                fetch = await subscriber.fetch()
                items = subscriber.delivered(fetch)
                wanted = None if args.count is None else args.count - printed
                items, tuples = up_to_tuples(items, fetch.tuples, wanted)
                printed += tuples
                if items:
                    line_pages.write(out, items, encoded)
                    out.flush()
                if args.count is not None and printed >= args.count:
                    return

    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        try:
            eventloop.run(main())
        except (SubscriberError, ConnectError) as exc:
            print(f"pan subscribe: {exc}", file=sys.stderr)
            return 1
    return 0
