"""What each network partition costs: runs the scenarios of tests/test_partitions.py (every
process on a host of its own, stategate/hosts.py; root, `ip` and `nft` needed) and prints
their table: answers checked against the oracle, partial, failed and wrong ones, seconds to
detect the fault and to recover once healed, with the machine's load.

    .venv/bin/python -m bench.partitions
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from stategate.hosts import Network

SCENARIOS = "tests/test_partitions.py"
COLUMNS = ("scenario", "answers", "partial", "failed", "wrong", "detect_s", "recover_s")


def main() -> int:
    why = Network.unavailable()
    if why is not None:
        print(f"bench.partitions: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "outcomes.jsonl"
        env = {**os.environ, "STATEGATE_PARTITIONS_TABLE": str(table)}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", SCENARIOS], env=env)
        rows = (
            [json.loads(line) for line in table.read_text().splitlines()] if table.exists() else []
        )
    load = os.getloadavg()[0]
    print(f"\n| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
    for row in rows:
        print(f"| {' | '.join(str(row[c]) for c in COLUMNS)} |")
    print(f"\n(load {load:.2f} at the end; pytest exit {done.returncode})")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
