"""`stategate`: run the demo, a node, the pipeline, the producer; ask the cluster; print the
schema, the settings or the registered operations."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import importlib.util
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO, TYPE_CHECKING

from contracts import eventlog, records
from contracts import project as projects
from contracts.coordination import Coordination, CoordinatorError
from contracts.durable import hold
from contracts.project import MAX_PORT, Project, port_number
from contracts.settings import Settings, shown, table
from contracts.tls import CLIENT, serving
from stategate import certificates, cluster_commands, demo, exposure, logs, stopping, workers
from topics import TopicsError, open_log

if TYPE_CHECKING:
    from gateway.workers.roles import Role
    from spark_pipeline.spark import LazySpark

Command = Callable[[Project, argparse.Namespace], int]
log = logging.getLogger("stategate")


NEEDS_SPARK = ("demo", "pipeline")
SERVING = ("node", "pipeline")  # the commands that call or serve nodes
DRAIN_WAIT_S = 600.0  # `cluster drain --wait`: the longest it waits for the node to hold nothing
APPLY_WAIT_S = 600.0  # `apply`: the longest it waits for every node to serve the file
NO_SPARK = (
    "stategate: {} needs Spark, which a node's install leaves out: "
    "pip install 'stategate[pipeline]'"
)


DATA_DIR_LOCK = ".node.lock"  # in a node's data_dir: held by its keeper while it runs
_HELD: list[IO[str]] = []  # the data_dir locks this process holds, open for its life


class ListenError(OSError):
    """An address the pipeline's metrics cannot be served at."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in NEEDS_SPARK and importlib.util.find_spec("pyspark") is None:
        print(NO_SPARK.format(f"`stategate {args.command}`"), file=sys.stderr)
        return 2
    try:
        return _run(args)
    except projects.ConfigError as exc:  # one line naming the file and the entry
        print(f"stategate: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        options = demo.Options(
            args.customers, args.events, args.fresh, args.check, args.rate, args.elastic,
            args.verbose, args.across,
        )  # fmt: skip
        return demo.run(Path(args.dir), options)
    if args.command == "settings":
        return print_settings()
    if args.command == "certs":
        ca = certificates.create(Path(args.dir), args.node, args.host)
        print(f"a CA ({ca}) and certificates for {', '.join([*args.node, CLIENT])} in {args.dir}")
        return 0
    command: Command = COMMANDS[args.command]
    serving = args.command in SERVING
    return command(projects.load(args.config, serving=serving), args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stategate", description=__doc__)
    parser.add_argument("--version", action="version", version=metadata.version("stategate"))
    commands = parser.add_subparsers(dest="command", required=True)

    run_demo = commands.add_parser(
        "demo", help="generate bookings, follow them with the pipeline, start 3 nodes"
    )
    run_demo.add_argument("--dir", default=".demo", help="the demo's folder (default .demo)")
    run_demo.add_argument("--customers", type=int, default=50_000)
    run_demo.add_argument("--events", type=int, default=250_000)
    run_demo.add_argument("--fresh", action="store_true", help="delete the demo data first")
    run_demo.add_argument(
        "--rate", type=float, default=20.0, help="live bookings per second (default 20)"
    )
    run_demo.add_argument("--check", action="store_true", help="run the example queries, stop")
    run_demo.add_argument(
        "--elastic",
        action="store_true",
        help="with a coordinator (an etcd of its own): prints the command that adds a node; "
        "with --check, runs it",
    )
    run_demo.add_argument(
        "--across",
        action="store_true",
        help="laid out as across machines: the snapshots in a bucket on an S3 server of its "
        "own (S3Proxy), TLS on every link (a dev CA in .demo/certs)",
    )
    run_demo.add_argument(
        "--verbose",
        action="store_true",
        help="echo every line the pipeline logs; the nodes log at DEBUG (in .demo/logs/)",
    )

    node = commands.add_parser("node", help="serve one gateway node")
    node.add_argument("--config", required=True)
    node.add_argument("--node", required=True, help="the node id in the config")
    node.add_argument(
        "--address", help="host:port: join an elastic cluster as a node the config lacks"
    )
    node.add_argument("--data-dir", help="with --address: the node's own folder")
    node.add_argument("--follow", type=int, help=argparse.SUPPRESS)  # the keeper's pid
    node.add_argument("--lifeline", type=int, help=argparse.SUPPRESS)  # the keeper's pipe

    cluster = commands.add_parser(
        "cluster", help="an elastic cluster: its status, drain a node or call it off, rebalance"
    )
    cluster.add_argument("action", choices=["status", "drain", "undrain", "rebalance"])
    cluster.add_argument("node", nargs="?", help="drain, undrain: the node")
    cluster.add_argument(
        "--wait",
        nargs="?",
        type=_seconds,
        const=DRAIN_WAIT_S,
        metavar="SECONDS",
        help=f"drain: return once the node holds nothing (at most {DRAIN_WAIT_S:g} s, or SECONDS)",
    )
    cluster.add_argument("--config", required=True)

    apply = commands.add_parser(
        "apply",
        help="what a changed project file does to the running cluster; then wait until every "
        "node serves it, saying how far it is",
    )
    apply.add_argument("--config", required=True)
    apply.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    apply.add_argument(
        "--force",
        action="store_true",
        help="remove stores that open subscriptions read (they are ended when their node "
        "restarts without them)",
    )
    apply.add_argument(
        "--wait",
        type=_seconds,
        default=APPLY_WAIT_S,
        metavar="SECONDS",
        help=f"the longest it waits (default {APPLY_WAIT_S:g} s; then it exits 1)",
    )

    pipeline = commands.add_parser("pipeline", help="compute and publish the state snapshots")
    pipeline.add_argument("--config", required=True)
    pipeline.add_argument("--master", help="Spark master URL (default: local[2])")
    pipeline.add_argument("--no-notify", action="store_true", help="do not tell the nodes")
    pipeline.add_argument(
        "--follow",
        action="store_true",
        help="keep running: publish new records every settings.trigger_interval_s (SIGTERM "
        "stops it after the micro-batch under way)",
    )
    pipeline.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        type=_listen_address,
        help="with --follow: serve Prometheus metrics (freshness by stage) at "
        "http://HOST:PORT/metrics",
    )

    produce = commands.add_parser("produce", help="append JSON lines from stdin to a topic")
    produce.add_argument("--config", required=True)
    produce.add_argument("--topic", required=True)
    produce.add_argument(
        "--skip-bad",
        action="store_true",
        help="append the lines that fit the topic, report each one that does not (exit 1)",
    )

    schema = commands.add_parser("schema", help="print the GraphQL SDL of a project")
    schema.add_argument("--config", default=str(demo.PROJECT_TEMPLATE))

    operations = commands.add_parser(
        "operations", help="print the registered operations' hashes (JSON: name -> SHA-256)"
    )
    operations.add_argument("--config", required=True)

    commands.add_parser("settings", help="print the settings table (Markdown)")

    certs = commands.add_parser(
        "certs", help="make a dev CA and certificates for [tls] (a demo or test cluster)"
    )
    certs.add_argument("--dir", required=True, help="the folder to write them to")
    certs.add_argument(
        "--node", action="append", default=[], help="a node's id: NODE.pem and NODE.key (repeat)"
    )
    certs.add_argument(
        "--host",
        action="append",
        default=[],
        help="a host name or address every certificate is valid for (repeat; loopback always)",
    )
    return parser


def run_node(project: Project, args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.runtime.process import refuse_unused_modules

    refuse_unused_modules()

    from gateway.workers.channel import address as channel_address
    from gateway.workers.lifeline import Lifeline
    from gateway.workers.roles import ALONE, Role
    from stategate.app import create_app
    from stategate.reloading import Hangup
    from stategate.server import Server
    from stategate.server_protocol import node_protocol

    if args.address is not None:
        project = _joining(project, args)
    address = project.cluster.node(args.node).address
    following = args.follow is not None
    if following and args.lifeline is None:
        print("stategate: --follow is for a keeper's followers, with --lifeline", file=sys.stderr)
        return 2
    if not following and not _may_listen(address, project):
        return 2
    count = workers.count(project.settings)  # a follower runs where its keeper may
    followers = workers.FollowerProcesses(args, count - 1) if count > 1 and not following else None
    if followers is not None:
        followers.prefork(main)  # before this process runs a thread of its own
    try:
        if not following:
            _hold(project.cluster.node(args.node))
            _check_coordinator(project, args.node)
        context = None if project.tls is None else serving(project.tls, args.node)
        worker = f"{args.node} worker {os.getpid()}"  # "node1 worker 42"
        logs.configure(worker if following else args.node, project.settings)
        if following:
            lifeline = Lifeline(args.lifeline, args.follow)
            lifeline.watch()  # from here on, the keeper's end stops this worker
            role = Role(channel_address(args.node, args.follow), count, lifeline=lifeline)
        elif followers is not None:
            role = Role(channel_address(args.node, os.getpid()), count, followers=followers)
        else:
            role = ALONE
        sock = _bound(address, role, following)
        app = create_app(project, args.node, role)  # a ConfigError: [auth]'s keys
    except projects.ConfigError as exc:
        return _refused(exc, followers)
    if followers is not None:
        followers.start()
    # SIGTERM or SIGINT: uvicorn stops accepting, closes idle connections and WebSockets
    # (1012), lets requests under way finish (a request runs at most request_timeout_s),
    # runs the app's shutdown, then ends the process by the signal.
    config = uvicorn.Config(
        app.asgi,
        log_config=None,
        log_level=project.settings.log_level,
        access_log=False,
        loop="uvloop",
        http=node_protocol(project.settings, app),
        ws="websockets-sansio",  # waits while a slow client's socket buffer is full
        ws_max_size=project.settings.max_request_bytes,
        timeout_keep_alive=int(project.settings.keep_alive_s),
        timeout_graceful_shutdown=_grace_s(project.settings),
    )
    if context is not None:
        config.load()
        config.ssl = context
    # SIGHUP: the project file and the certificate read again, in this worker and its followers
    Hangup(project, lambda: _read(args), app, args.node, context, followers).install()
    # Ended by SIGINT as by SIGTERM: at once, once uvicorn re-raises it after the shutdown,
    # not by a KeyboardInterrupt through the interpreter's exit, where DuckDB's binding
    # reports its module's type objects as leaked (nanobind), dozens of lines a worker.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    Server(config).run(sockets=[sock])
    return 0


def _read(args: argparse.Namespace) -> Project:
    """The node's project as at its start: the file, and the node the command line adds."""
    project = projects.load(args.config)
    return _joining(project, args) if args.address is not None else project


def _joining(project: Project, args: argparse.Namespace) -> Project:
    """The project with the node the command line describes (an elastic cluster's new node)."""
    if project.cluster.coordinator is None:
        raise projects.ConfigError("--address joins an elastic cluster: set [cluster] coordinator")
    table = {"id": args.node, "address": args.address, "data_dir": args.data_dir or args.node}
    node = projects.node_entry(table, project.cluster, project.path.parent)
    projects.apart(project, node)
    return dataclasses.replace(project, cluster=project.cluster.with_node(node))


def _hold(node: projects.Node) -> None:
    """Hold the node's data_dir while this process lives (a lock on a file in it, taken
    after its first followers were forked: they hold none), so that another node's process
    started on the same folder is refused: ConfigError when one holds it."""
    try:
        held = hold(node.data_dir, DATA_DIR_LOCK)
    except OSError as exc:
        raise projects.ConfigError(f"node {node.id!r}: data_dir {node.data_dir}: {exc}") from None
    if held is None:
        raise projects.ConfigError(
            f"{node.data_dir} is in use by another node's process: give node {node.id!r} a "
            "data_dir of its own"
        )
    _HELD.append(held)


def _check_coordinator(project: Project, node: str) -> None:
    """With a coordinator: ConfigError unless it answers `node` (the node does not start)."""
    url = project.cluster.coordinator
    if url is None:
        return
    coordination = Coordination(url, project.cluster.name, tls=project.tls, holder=node)

    async def check() -> None:
        await coordination.connect()
        await coordination.close()

    try:
        asyncio.run(check())
    except CoordinatorError as exc:
        raise projects.ConfigError(f"the coordinator: {exc}") from None


def run_cluster(project: Project, args: argparse.Namespace) -> int:
    if args.action in ("drain", "undrain") and not args.node:
        print(f"stategate: cluster {args.action} needs the node", file=sys.stderr)
        return 2
    if args.wait is not None and args.action != "drain":
        print("stategate: --wait goes with cluster drain", file=sys.stderr)
        return 2
    return cluster_commands.run(project, args.action, args.node, args.wait)


def _grace_s(settings: Settings) -> int:
    """How long a stopping node waits for requests under way: as long as one may run."""
    return int(settings.request_timeout_s) + 1


def _bound(address: str, role: Role, following: bool) -> socket.socket:
    try:
        return workers.bound(address, shared=role.kind != "alone", first=not following)
    except OSError as exc:
        raise projects.ConfigError(f"cannot listen on {address}: {exc}") from exc


def _refused(exc: projects.ConfigError, followers: workers.FollowerProcesses | None) -> int:
    """A node that will not start: its one line, its forked followers told to end quietly,
    and what prefork froze given back to the collector, so that the interpreter's exit
    frees DuckDB's objects before its binding counts them as leaked."""
    print(f"stategate: {exc}", file=sys.stderr)
    if followers is not None:
        followers.stop()
    gc.unfreeze()
    return 2


def _may_listen(address: str, project: Project) -> bool:
    refused = exposure.refusal(address, project.cluster.secret, project.tls)
    if refused is not None:
        print(f"stategate: {refused}", file=sys.stderr)
    return refused is None


def run_pipeline(project: Project, args: argparse.Namespace) -> int:
    """One run, or --follow until SIGTERM or SIGINT; either way a stop publishes nothing
    half-done (the manifest names layers only once they are all written), stops Spark and
    its JVM, and ends the process by the signal (stategate/stopping.py)."""
    from pyspark.sql import SparkSession

    from contracts import tracing
    from spark_pipeline.dead_letter import BadRecordError
    from spark_pipeline.job import run
    from spark_pipeline.plan import LogBehindError
    from spark_pipeline.spark import LazySpark, json_logging

    if project.tls is not None and not args.no_notify:
        project.tls.client()  # a ConfigError now, not once a run has published
    _yield_to_reads(project.settings.pipeline_niceness)
    logs.configure("pipeline", project.settings)
    tracing.configure("pipeline")  # its publications' spans (OTEL_TRACES_EXPORTER)
    stop = stopping.StopRequest().install()

    def started(session: SparkSession, seconds: float) -> None:
        context = session.sparkContext
        log.info(
            "Spark %s started in %.1f s (master %s, %d task slots)",
            session.version,
            seconds,
            context.master,
            context.defaultParallelism,
        )
        if threading.current_thread() is threading.main_thread():
            stop.install()  # again: PySpark's context takes SIGINT for itself there

    # small batches and runs are built here: Spark starts when one needs the executors
    as_json = project.settings.log_format == "json"
    spark = LazySpark(args.master, json_logging() if as_json else None, started=started)
    status = 0
    try:
        if args.follow:
            follow(project, spark, stop, notify=not args.no_notify, metrics=args.metrics)
        elif not stop.requested:
            report = run(project, spark, notify=not args.no_notify, stopping=stop.event)
            print(report.to_json().decode(), flush=True)
    except BadRecordError as exc:  # settings.bad_records = "fail": nothing was published
        log.error("stopped: %s", exc)
        status = 1
    except (TopicsError, LogBehindError, ListenError) as exc:  # one line: what to change
        print(f"stategate: {exc}", file=sys.stderr)
        status = 2
    except Exception as exc:
        if not stop.requested:
            raise
        log.info(
            "stopped before publishing (%s): nothing of this run is visible; the next run "
            "reads its records again",
            type(exc).__name__,
        )
    finally:
        ran = spark.started is not None
        spark.close()
    if stop.requested:
        if ran:
            log.info("Spark stopped")
        stop.exit()
    return status


def _yield_to_reads(niceness: int) -> None:
    """Raise this process's niceness to `niceness`, before it starts a thread: Linux sets a
    thread's, and a thread or process started after inherits it. Never lowered: that takes
    privileges, and whoever started it nicer meant it."""
    if niceness > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, niceness)


def follow(
    project: Project,
    spark: LazySpark,
    stop: stopping.StopRequest,
    notify: bool,
    metrics: str | None = None,
) -> None:
    """Run the continuous pipeline until the stop, then stop it cleanly; on SIGHUP, follow
    the project file read again (PipelineLoop.take), in this process."""
    from spark_pipeline.loop import PipelineLoop

    follower = PipelineLoop(project, spark, notify=notify)
    if metrics is not None:
        try:
            follower.serve_metrics(metrics)
        except OSError as exc:
            raise ListenError(f"cannot listen on {metrics}: {exc}") from None
    stop.on_stop(follower.request_stop)
    hangup = threading.Event()
    signal.signal(signal.SIGHUP, lambda signum, frame: hangup.set())
    try:
        follower.start()
        while follower.wait(hangup):
            hangup.clear()
            newer = _read_again(follower.project)
            if newer is not None:
                follower.take(newer)
    finally:
        follower.stop()
    print(json.dumps(dataclasses.asdict(follower.progress), default=str), flush=True)


def _seconds(text: str) -> float:
    """A --wait: a finite number of seconds, not negative (argparse words a refusal)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return seconds


def _listen_address(text: str) -> str:
    """A --metrics address: [host]:port, a port 1-65535 (argparse words a refusal)."""
    host, colon, port = text.rpartition(":")
    if not colon or port_number(port) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (a port 1-{MAX_PORT})")
    return text


def _read_again(project: Project) -> Project | None:
    """The pipeline's project file read again on SIGHUP, when it loads and differs; None,
    with one line saying why, when there is nothing to take."""
    try:
        newer = projects.load(project.path)
    except projects.ConfigError as exc:
        log.error("SIGHUP: nothing changed: %s", exc)
        return None
    if newer == project:
        log.info("SIGHUP: the project file read again: nothing changed")
        return None
    if newer.cluster.partitions != project.cluster.partitions:
        log.error(
            "SIGHUP: nothing changed: [cluster] partitions differ (%d, the file %d), which "
            "takes a log of as many partitions and a rebuild: a restart",
            project.cluster.partitions,
            newer.cluster.partitions,
        )
        return None
    added, removed, changed = projects.stores_changed(project, newer)
    kinds = {"stores added": added, "stores removed": removed, "stores changed": changed}
    said = [f"{kind}: {', '.join(names)}" for kind, names in kinds.items() if names]
    log.info(
        "SIGHUP: the project file read again (%s): following it from here",
        "; ".join(said) or "its stores unchanged",
    )
    return newer


def run_produce(project: Project, args: argparse.Namespace) -> int:
    """Read and check every line, then append them all; a line that does not fit the topic
    (contracts/records.py) appends nothing, or with --skip-bad is reported and left out (exit
    status 1 then). SIGTERM or SIGINT while reading ends the process at once, appending
    nothing; during the append it is held until every record is appended and the summary
    printed, then ends the process."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C as SIGTERM: no traceback
    topic = project.topics.get(args.topic)
    if topic is None:
        print(f"stategate: unknown topic {args.topic!r}", file=sys.stderr)
        return 2
    good, refused = [], 0
    for number, raw in enumerate(sys.stdin.buffer, 1):
        if not raw.strip():
            continue
        try:
            line = _utf8(raw)
            good.append(records.parse_line(topic, line, eventlog.now_ms()))
        except records.BadRecord as exc:
            refused += 1
            if not args.skip_bad:
                print(f"stategate: line {number}: {exc}; nothing was appended", file=sys.stderr)
                return 2
            print(f"stategate: line {number}: {exc}; left out", file=sys.stderr)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, stopping.SIGNALS)
    events = open_log(project)
    try:
        counts = events.append(topic, good)
        summary = {"appended": sum(counts.values()), "refused": refused, "partitions": counts}
        print(json.dumps(summary), flush=True)
    except TopicsError as exc:
        print(f"stategate: {exc}; nothing more was appended", file=sys.stderr)
        return 2
    finally:
        events.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a stop that came: ends it here
    return 1 if refused else 0


def _utf8(raw: bytes) -> str:
    """A line of the producer's input as text; BadRecord when it is not UTF-8 (whatever the
    locale: Python's reading would turn the bytes into lone surrogates)."""
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        message = f"not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise records.BadRecord("not_json", message) from None


def print_schema(project: Project, args: argparse.Namespace) -> int:
    from resolvers.schema.build import sdl

    sys.stdout.write(sdl(project))
    return 0


def print_operations(project: Project, args: argparse.Namespace) -> int:
    """The manifest of settings.operations: each operation's name and the SHA-256 of its
    canonical text, which clients send instead of the text (README: Persisted operations)."""
    from resolvers.execution.operations import Operations
    from resolvers.schema.build import build_schema

    if project.operations_file is None:
        print(f"stategate: {project.path}: settings.operations is not set", file=sys.stderr)
        return 2
    operations = Operations(build_schema(project), project.settings, project.operations_file)
    manifest = {op.name: op.hash for op in operations.persisted.registry.operations}
    print(json.dumps(manifest, indent=2))
    return 0


def print_settings() -> int:
    print("| setting | default | meaning |\n| --- | --- | --- |")
    for name, default, meaning in table():
        print(f"| `{name}` | {shown(default)} | {meaning} |")
    return 0


def run_apply(project: Project, args: argparse.Namespace) -> int:
    from stategate import applying

    return applying.run(project, args.dry_run, args.wait, args.force)


COMMANDS: dict[str, Command] = {
    "apply": run_apply,
    "cluster": run_cluster,
    "node": run_node,
    "operations": print_operations,
    "pipeline": run_pipeline,
    "produce": run_produce,
    "schema": print_schema,
}

if __name__ == "__main__":
    sys.exit(main())
