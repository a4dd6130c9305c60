"""`stategate`: run the demo, a node, the pipeline, the producer; print the schema."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx

from gateway import config, launcher
from gateway.partitioner import serialize_key

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "demo" / "stategate.toml"
# The demo's bookings span the week before this instant, so the example queries find them.
DEMO_END_MS = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stategate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="generate bookings, run the pipeline, start 3 nodes")
    demo.add_argument("--config", default=str(DEMO_CONFIG))
    demo.add_argument("--customers", type=int, default=50_000)
    demo.add_argument("--events", type=int, default=250_000)
    demo.add_argument("--fresh", action="store_true", help="delete the demo data first")
    demo.add_argument("--check", action="store_true", help="run the example queries and stop")

    node = commands.add_parser("node", help="serve one gateway node")
    node.add_argument("--config", required=True)
    node.add_argument("--node", required=True, help="the node id in the config")

    pipeline = commands.add_parser("pipeline", help="compute and publish the state snapshots")
    pipeline.add_argument("--config", required=True)
    pipeline.add_argument("--master", help="Spark master URL (default: local[2])")
    pipeline.add_argument("--no-notify", action="store_true", help="do not tell the nodes")

    produce = commands.add_parser("produce", help="append JSON lines from stdin to a topic")
    produce.add_argument("--config", required=True)
    produce.add_argument("--topic", required=True)

    store = commands.add_parser("store", help="serve the snapshot store to remote nodes")
    store.add_argument("--config", required=True)
    store.add_argument("--listen", default="0.0.0.0:8100", help="host:port (default 0.0.0.0:8100)")

    schema = commands.add_parser("schema", help="print the GraphQL SDL of a project")
    schema.add_argument("--config", default=str(DEMO_CONFIG))

    args = parser.parse_args(argv)
    try:
        project = config.load(args.config)
    except config.ConfigError as exc:
        print(f"stategate: {exc}", file=sys.stderr)
        return 2
    return COMMANDS[args.command](project, args)


def run_node(project: config.Project, args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app

    host, port = project.cluster.node(args.node).address.rsplit(":", 1)
    uvicorn.run(
        create_app(project, args.node),
        host=host,
        port=int(port),
        log_level="warning",
        loop="uvloop",
        http="httptools",
        timeout_keep_alive=30,  # longer than the peers' pool expiry (gateway/node.py)
    )
    return 0


def run_pipeline(project: config.Project, args: argparse.Namespace) -> int:
    from spark_pipeline.job import run
    from spark_pipeline.session import spark_session

    report = run(project, spark_session(args.master), notify=not args.no_notify)
    print(json.dumps(report, indent=2, default=str))
    return 0


def run_produce(project: config.Project, args: argparse.Namespace) -> int:
    from spark_pipeline import eventlog

    topic = project.topics.get(args.topic)
    if topic is None:
        print(f"stategate: unknown topic {args.topic!r}", file=sys.stderr)
        return 2
    records = []
    for number, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            serialize_key(item["key"], topic.key_type)
            if not isinstance(item.get("value"), dict | None):
                raise TypeError("value must be a JSON object or null (a tombstone)")
            records.append(
                eventlog.Record(
                    item["key"], item.get("value"), item.get("timestamp") or eventlog.now_ms()
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            print(f"stategate: line {number}: {exc}; nothing was appended", file=sys.stderr)
            return 2
    counts = eventlog.produce(project.log_dir, topic, project.cluster.partitions, records)
    print(json.dumps({"appended": sum(counts.values()), "partitions": counts}))
    return 0


def serve_store(project: config.Project, args: argparse.Namespace) -> int:
    import uvicorn

    from spark_pipeline.store_server import create_store_app

    host, port = args.listen.rsplit(":", 1)
    uvicorn.run(
        create_store_app(project),
        host=host,
        port=int(port),
        log_level="warning",
        timeout_keep_alive=30,  # longer than the nodes' pool expiry (gateway/node.py)
    )
    return 0


def print_schema(project: config.Project, args: argparse.Namespace) -> int:
    from resolvers.schema import sdl

    sys.stdout.write(sdl(project))
    return 0


def run_demo(project: config.Project, args: argparse.Namespace) -> int:
    from spark_pipeline import demo_data
    from spark_pipeline.job import run
    from spark_pipeline.session import spark_session

    data_root = project.log_dir.parent
    if args.fresh and data_root.exists():
        shutil.rmtree(data_root)
    if not project.log_dir.exists():
        print(f"generating {args.events} bookings of {args.customers} customers ...", flush=True)
        demo_data.generate(
            project, customers=args.customers, events=args.events, end_ms=DEMO_END_MS
        )
    print("running the pipeline (Spark, local mode) ...", flush=True)
    report = run(project, spark_session(None), notify=False)
    print(f"published: {report.get('partitions', report)}", flush=True)
    children = [launcher.start_node(project, n.id) for n in project.cluster.nodes]
    try:
        for n, child in zip(project.cluster.nodes, children, strict=True):
            launcher.wait_healthy(n.url, child)
        first = project.cluster.nodes[0]
        print(_examples(project, first.url), flush=True)
        if args.check:
            return _check(project)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(10)
    return 0


EXAMPLE = (DEMO_CONFIG.parent / "example.graphql").read_text()


def _examples(project: config.Project, url: str) -> str:
    query = (
        '{ latestBooking(key: "C000001") { record { trip price } meta { partitions { node } } } }'
    )
    payload = json.dumps({"query": query})
    lines = [
        "",
        "The cluster is up: " + ", ".join(f"{n.id} {n.url}" for n in project.cluster.nodes),
        f"GraphQL playground: {url}/graphql   (any node answers any query)",
        f"Partition map:      {url}/cluster",
        "",
        "Try this in the playground:",
        EXAMPLE,
        "",
        "or with curl:",
        f"  curl -s {url}/graphql -H 'content-type: application/json' -d '{payload}'",
        "",
        "Ctrl-C stops the nodes.",
    ]
    return "\n".join(lines)


def _check(project: config.Project) -> int:
    """Ask the example queries of every node; fail loudly on any error."""
    for node in project.cluster.nodes:
        response = httpx.post(f"{node.url}/graphql", json={"query": EXAMPLE}, timeout=30)
        body = response.json()
        if response.status_code != 200 or body.get("errors"):
            print(f"{node.id}: {json.dumps(body)[:2000]}", file=sys.stderr)
            return 1
        data = body["data"]
        empty = [name for name, value in data.items() if not _has_rows(value)]
        if empty:
            print(f"{node.id}: no rows from {empty}", file=sys.stderr)
            return 1
        print(f"{node.id}: ok, {json.dumps(data['latestBooking']['record'], ensure_ascii=False)}")
    return 0


def _has_rows(value: dict) -> bool:
    rows = value.get("record") or value.get("entries") or value.get("records")
    return bool(rows or value.get("windows"))


COMMANDS = {
    "demo": run_demo,
    "node": run_node,
    "pipeline": run_pipeline,
    "produce": run_produce,
    "schema": print_schema,
    "store": serve_store,
}

if __name__ == "__main__":
    sys.exit(main())
