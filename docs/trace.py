"""Draw docs/trace.png: the two traces of a record's way from the log to a client, as the
nodes and the pipeline export them (README: Traces).

    .venv/bin/python docs/trace.py

The demo's project on the file log in a scratch folder, 3 nodes and `stategate pipeline`
exporting OTLP/HTTP to a receiver in this process (tests/otlp.py); one booking appended and
published, then its customer asked of node1 (another node owns it). The spans received are
drawn as two waterfalls, each on its own time axis, in headless Chromium.
"""

from __future__ import annotations

import html
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.one_key import demo_built
from contracts.eventlog import Record, now_ms
from contracts.partitioner import partition_for
from stategate.launcher import Processes, wait_serving
from tests.otlp import Receiver, Span
from tests.projects import append

OUT = Path(__file__).with_name("trace.png")
CHROMIUM = "/usr/bin/chromium"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
QUERY = "query($k: String!) { customerTotals(key: $k) { record { bookings revenue } } }"
SHOWN = ("stategate.partition", "stategate.version", "stategate.replica", "stategate.peer")


def main() -> int:
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    os.environ.update({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_BSP_SCHEDULE_DELAY": "100",
                       "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="stategate-trace-") as work:
        project = demo_built(Path(work), 20_000)
        processes = Processes(Path(work) / "logs")
        try:
            processes.start_nodes(project)
            wait_serving(project, [n.id for n in project.cluster.nodes])
            hosted = project.cluster.hosted_by("node1")
            key = next(f"C{i:06d}" for i in range(1000)
                       if partition_for(f"C{i:06d}", "string", 9) not in hosted)  # fmt: skip
            booking = {"trip": "Berlin→Hamburg", "price": 39.9, "seats": 2}
            append(project, "bookings", [Record(key, booking, now_ms())])
            command = [sys.executable, "-m", "stategate.cli", "pipeline", "--config",
                       str(project.path)]  # fmt: skip
            subprocess.run(command, check=True, capture_output=True, timeout=300)
            publication = receiver.where(
                lambda spans: [
                    s
                    for s in spans
                    if s.name == "publish"
                    and s.attributes["stategate.partition"] == partition_for(key, "string", 9)
                ]  # fmt: skip
            )[0]
            installs = receiver.where(
                lambda spans: [s for s in spans if s.parent == publication.id]
                if len([s for s in spans if s.parent == publication.id]) >= 2 else []
            )  # fmt: skip
            httpx.post(f"{project.cluster.nodes[0].url}/graphql",
                       json={"query": QUERY, "variables": {"k": key}},
                       headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"})  # fmt: skip
            request = receiver.of(TRACE, {"graphql request", "partition read"})
        finally:
            processes.stop_all()
    page = _page([publication, *installs], request)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        view = browser.new_page(viewport={"width": 1200, "height": 400}, device_scale_factor=1)
        view.set_content(page)
        view.locator("main").screenshot(path=str(OUT))
        browser.close()
    print(f"wrote {OUT}")
    return 0


def _page(publication: list[Span], request: list[Span]) -> str:
    published = next(s for s in publication if s.name == "publish")
    return f"""<!doctype html><meta charset="utf-8"><style>
body {{ margin: 0; font: 13px system-ui, sans-serif; color: #1f2328; background: #fff; }}
main {{ padding: 14px 18px; width: 1164px; }}
h2 {{ font-size: 14px; margin: 14px 0 6px; }}
.row {{ display: grid; grid-template-columns: 250px 430px 1fr; align-items: center;
        height: 24px; border-bottom: 1px solid #eef0f2; }}
.name {{ white-space: nowrap; overflow: hidden; }}
.node {{ color: #57606a; }}
.lane {{ position: relative; height: 14px; background: #f6f8fa; }}
.bar {{ position: absolute; top: 0; height: 14px; border-radius: 2px; min-width: 2px; }}
.attrs {{ padding-left: 10px; color: #57606a; font-size: 12px; white-space: nowrap; }}
.link {{ color: #8250df; }}
</style><main>
<h2>Trace 1: the pipeline publishes partition {published.attributes["stategate.partition"]}
 version {published.attributes["stategate.version"]}; each replica installs it</h2>
{_waterfall(publication, published.id)}
<h2>Trace 2: a client asks node1 for the customer; the peer's read links to the publication</h2>
{_waterfall(request, published.id)}
</main>"""


COLOURS = {"pipeline": "#bf8700", "node1": "#0969da", "node2": "#1a7f37", "node3": "#cf222e"}


def _waterfall(spans: list[Span], publication: str) -> str:
    start = min(s.start_ns for s in spans)
    width = max(max(s.end_ns for s in spans) - start, 1)
    rows = []
    for span, depth in _ordered(spans):
        left = 100 * (span.start_ns - start) / width
        size = 100 * (span.end_ns - span.start_ns) / width
        shown = [f"{k.removeprefix('stategate.')} {span.attributes[k]}" for k in SHOWN
                 if k in span.attributes]  # fmt: skip
        said = html.escape(" · ".join([f"{(span.end_ns - span.start_ns) / 1e6:.2f} ms", *shown]))
        if publication in span.links:
            said += ' <span class="link">→ links to the publish span</span>'
        colour = COLOURS.get(span.node, "#888")
        rows.append(
            f'<div class="row"><div class="name">{"&nbsp;" * 4 * depth}{html.escape(span.name)}'
            f' <span class="node">· {span.node}</span></div><div class="lane"><div class="bar" '
            f'style="left:{left:.2f}%;width:{size:.2f}%;background:{colour}"></div></div>'
            f'<div class="attrs">{said}</div></div>'
        )
    return "\n".join(rows)


def _ordered(spans: list[Span]) -> list[tuple[Span, int]]:
    """Depth first from the roots (spans whose parent is not among them), by start."""
    ids = {s.id for s in spans}
    found: list[tuple[Span, int]] = []

    def visit(span: Span, depth: int) -> None:
        found.append((span, depth))
        for child in sorted((s for s in spans if s.parent == span.id), key=lambda s: s.start_ns):
            visit(child, depth + 1)

    for root in sorted((s for s in spans if s.parent not in ids), key=lambda s: s.start_ns):
        visit(root, 0)
    return found


if __name__ == "__main__":
    raise SystemExit(main())
