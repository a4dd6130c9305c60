"""Process-wide tuning of a serving node's Python, applied once by the process's entry when
the node has started (stategate/app.py), never by a library call.

- What start-up built (the schema, the snapshots' tables and indexes) lives as long as the
  process: frozen out of every collection (gc.freeze).
- A request allocates thousands of short-lived objects (rows, records, dicts): at Python's
  700 allocations the young generation would be collected several times per large request;
  GC_YOUNG_THRESHOLD instead.
- A waiting thread gets the GIL after SWITCH_INTERVAL_S (gateway/runtime/lanes.py).
"""

from __future__ import annotations

import gc

from gateway.runtime.lanes import share_the_gil

GC_YOUNG_THRESHOLD = 20_000


def tune_for_serving() -> None:
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    share_the_gil()
