"""The printed table and the comparison rows (ratio, target, PASS/MISS)."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

from bench.driver import Stats


@dataclass
class Comparison:
    name: str
    value: float | None
    unit: str  # "x", "ms", "qps", "s"
    target: str  # "<= 2", "" for information only
    ok: bool | None  # None: no target, or not measured
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def verdict(self) -> str:
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return "n/a"
        return "" if self.ok is None else ("PASS" if self.ok else "MISS")


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def at_most(name: str, value: float | None, limit: float, unit: str, detail: str) -> Comparison:
    ok = None if value is None else value <= limit
    return Comparison(name, value, unit, f"<= {limit:g}{unit}", ok, detail)


def below(name: str, value: float | None, limit: float, unit: str, detail: str) -> Comparison:
    ok = None if value is None else value < limit
    return Comparison(name, value, unit, f"< {limit:g}{unit}", ok, detail)


def at_least(name: str, value: float | None, limit: float, unit: str, detail: str) -> Comparison:
    ok = None if value is None else value >= limit
    return Comparison(name, value, unit, f">= {limit:g}{unit}", ok, detail)


def info(name: str, value: float | None, unit: str, detail: str) -> Comparison:
    return Comparison(name, value, unit, "", None, detail)


def machine() -> dict[str, Any]:
    import duckdb

    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "?"

    cpu = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        java = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=20
        ).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        java = "?"
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "duckdb": duckdb.__version__,
        "pyspark": version("pyspark"),
        "strawberry": version("strawberry-graphql"),
        "starlette": version("starlette"),
        "uvicorn": version("uvicorn"),
        "httpx": version("httpx"),
        "java": java,
    }


def _num(value: float | None, width: int, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-".rjust(width)
    return f"{value:,.{digits}f}".rjust(width)


HEADER = (
    f"{'case':<50} {'conc':>4} {'count':>6} {'p50 ms':>9} {'p99 ms':>9} {'qps':>9} "
    f"{'cli cpu':>7} {'srv ms/op':>9} {'load':>5}"
)


def stats_line(s: Stats) -> str:
    flag = f"  [{s.errors} errors: {s.first_error}]" if s.errors else ""
    note = f"  {s.note}" if s.note else ""
    return (
        f"{s.name:<50} {s.concurrency:>4} {s.count:>6} {_num(s.p50_ms, 9)} {_num(s.p99_ms, 9)} "
        f"{_num(s.qps, 9, 1)} {_num(s.client_cpu, 7)} {_num(s.server_cpu_ms, 9)} "
        f"{_num(s.load1, 5, 1)}{note}{flag}"
    )


def comparison_lines(comparisons: list[Comparison]) -> list[str]:
    lines = [f"{'comparison':<58} {'value':>10} {'target':>11} {'result':>6}  how"]
    lines.append("-" * 120)
    for c in comparisons:
        digits = 1 if c.unit in ("qps", "MiB") else 2
        value = _num(c.value, 10, digits)
        unit = c.unit if c.value is not None else ""
        lines.append(
            f"{c.name:<58} {value}{unit:<3} {c.target:>8} {c.verdict:>6}  {c.detail}".rstrip()
        )
    return lines


def header_lines(machine_info: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    m = machine_info
    return [
        f"machine: nproc={m['nproc']} cpu={m['cpu']!r} mem={m['memory_gib']} GiB "
        f"load@start={m['loadavg_at_start']}",
        f"         python {m['python']}, duckdb {m['duckdb']}, pyspark {m['pyspark']}, "
        f"strawberry {m['strawberry']}, starlette {m['starlette']}, uvicorn {m['uvicorn']}, "
        f"httpx {m['httpx']}, {m['java']}",
        "workload: " + ", ".join(f"{k}={v}" for k, v in workload.items()),
    ]
