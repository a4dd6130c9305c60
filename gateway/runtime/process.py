"""Process-wide tuning of a serving node's Python, applied once by the process's entry
(stategate/cli.py, stategate/app.py), never by a library call.

- pyarrow imports pandas, when it can, at its first conversion from numpy or Python values,
  to check for pandas' types. A node uses neither pandas' API nor its types: refused, a start
  costs 1.6 CPU-s instead of 2.1 and the node 37 MiB less (the test project, 6 starts each).

- What start-up built (the schema, the snapshots' tables and indexes) lives as long as the
  process: frozen out of every collection (gc.freeze).
- A request allocates thousands of short-lived objects (rows, records, dicts): at Python's
  700 allocations the young generation would be collected several times per large request;
  GC_YOUNG_THRESHOLD instead.
- A waiting thread gets the GIL after SWITCH_INTERVAL_S (gateway/runtime/lanes.py).
"""

from __future__ import annotations

import gc
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec

from gateway.runtime.lanes import share_the_gil

GC_YOUNG_THRESHOLD = 20_000


UNUSED_MODULES = frozenset({"pandas"})


class _Refused(MetaPathFinder):
    """Refuses to import `names`: a library that merely prefers them goes on without."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object, target: object = None) -> ModuleSpec | None:
        if fullname in self.names:
            raise ImportError(f"a serving node does not import {fullname}")
        return None


def refuse_unused_modules() -> None:
    """Before the node is built: nothing has imported them yet."""
    sys.meta_path.insert(0, _Refused(UNUSED_MODULES))


def tune_for_serving() -> None:
    """Once the node has started."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    share_the_gil()
