"""The alternative users weigh: the same rows copied into PostgreSQL and served by
PostGraphile. Installs and runs both under .bench/peer/ (nothing outside it but Debian's
postgresql package, when it is missing and we are root).

- PostgreSQL (Debian's, 15 on bookworm): its own cluster in .bench/peer/pgdata on a free
  loopback port, trust auth, no unix socket, run as the OS user `pgbench` when we are root
  (postgres refuses to run as root; its cluster then lives in a folder of the system's
  temporary folder, which that user may enter, where the checkout may not be); settings for
  a read benchmark in bench.conf.
- PostGraphile 5 (amber preset) from npm, on Node 22 (PostGraphile 5.1 fails every data query
  on Node 20); when the system node is older, Node 22 comes from the npm package
  node-linux-<arch> into .bench/peer/node22.
- The table: `key text PRIMARY KEY` plus the store's columns, loaded with COPY, a B-tree
  index on each column asked for (what a user ordering by it would create), VACUUM
  ANALYZEd, and a SQL function `<table>_by_keys(keys text[]) RETURNS SETOF <table>`:
  plain PostGraphile has no "key IN list", so the function gives it one
  (`<table>ByKeys(keys:)`). Findings behind these choices: ../shared/peers/postgraphile/.
- @graphile/pg-aggregates (Graphile's own plugin) gives connections `aggregates { sum {..} }`,
  as a PostGraphile user asking for totals would add it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from stategate.launcher import free_ports

POSTGRAPHILE = "postgraphile@5.1.5"
AGGREGATES = "@graphile/pg-aggregates@0.2.0-rc.2"
NODE22 = "22.23.3"
OS_USER = "pgbench"
CONF = """listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
max_connections = 100
shared_buffers = 1GB
effective_cache_size = 8GB
work_mem = 16MB
maintenance_work_mem = 512MB
wal_level = minimal
max_wal_senders = 0
synchronous_commit = off
fsync = off
jit = off
"""
PRESET = """import { PgAggregatesPreset } from "@graphile/pg-aggregates";
export default {
  extends: [PgAggregatesPreset],
  grafserv: { graphiql: false, maxRequestLength: 20_000_000 },
};
"""


class Peer:
    """PostgreSQL + PostGraphile serving one table."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pg_port, self.gql_port = free_ports(2)
        self.home = _pg_home(root)
        self.pgdata = self.home / "pgdata"
        self.bin = _postgres_bin()
        self._node: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gql_port}/graphql"

    # -- setup -------------------------------------------------------------------------------

    def setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.bin is None:
            _apt_install("postgresql")
            self.bin = _postgres_bin()
            if self.bin is None:
                raise RuntimeError("PostgreSQL's binaries are missing after apt-get install")
        if os.geteuid() == 0 and subprocess.run(["id", OS_USER], capture_output=True).returncode:
            _run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                  OS_USER])  # fmt: skip
        self._npm_install()

    def _npm_install(self) -> None:
        modules = self.root / "node_modules"
        wanted = (modules / "postgraphile", modules / "@graphile" / "pg-aggregates")
        if not all((folder / "package.json").exists() for folder in wanted):
            (self.root / "package.json").write_text('{"private": true}\n')
            _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
                  "--prefix", str(self.root), POSTGRAPHILE, AGGREGATES])  # fmt: skip
        if _node_major("node") < 22 and not self._node22():
            folder = self.root / "node22"
            folder.mkdir(exist_ok=True)
            (folder / "package.json").write_text('{"private": true}\n')
            arch = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
            _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
                  "--prefix", str(folder), f"node-linux-{arch}@{NODE22}"])  # fmt: skip

    def _node22(self) -> str | None:
        found = glob.glob(str(self.root / "node22/node_modules/node-linux-*/bin/node"))
        return found[0] if found else None

    # -- postgres ----------------------------------------------------------------------------

    def start_postgres(self) -> None:
        assert self.bin is not None
        self.stop_postgres()  # one left running by an interrupted run: restart it on our port
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._own(self.home)
        if not (self.pgdata / "PG_VERSION").exists():
            shutil.rmtree(self.pgdata, ignore_errors=True)
            self.pgdata.mkdir(parents=True)
            self._own(self.pgdata)
            self.pgdata.chmod(0o700)
            initdb = [f"{self.bin}/initdb", "-D", str(self.pgdata), "-U", "postgres"]
            self._as_pg([*initdb, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-instructions"])
        (self.pgdata / "bench.conf").write_text(CONF.format(port=self.pg_port))
        conf = self.pgdata / "postgresql.conf"
        if "include_if_exists = 'bench.conf'" not in conf.read_text():
            with conf.open("a") as out:
                out.write("\ninclude_if_exists = 'bench.conf'\n")
        log = self.home / "postgres.log"
        log.touch()
        self._own(log)
        self._as_pg([f"{self.bin}/pg_ctl", "-D", str(self.pgdata), "-l", str(log), "-w",
                     "-t", "60", "start"])  # fmt: skip
        exists = self.psql("postgres", "SELECT 1 FROM pg_database WHERE datname = 'state'")
        if exists.strip() != "1":
            self.psql("postgres", "CREATE DATABASE state")

    def psql(self, database: str, sql: str) -> str:
        assert self.bin is not None
        command = [f"{self.bin}/psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U",
                   "postgres", "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-d", database,
                   "-c", sql]  # fmt: skip
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout

    def load(
        self, table: str, columns: dict[str, str], csv: Path, indexes: tuple[str, ...] = ()
    ) -> None:
        """(Re)create `table` (key text PRIMARY KEY, columns...) from a CSV with a header,
        with a B-tree index on each of `indexes`."""
        typed = ", ".join(f"{name} {kind}" for name, kind in columns.items())
        self.psql("state", f"DROP TABLE IF EXISTS {table} CASCADE")
        self.psql("state", f"CREATE TABLE {table} (key text, {typed})")
        self.psql("state", f"\\copy {table} FROM '{csv}' WITH (FORMAT csv, HEADER true)")
        self.psql("state", f"ALTER TABLE {table} ADD PRIMARY KEY (key)")
        for column in indexes:
            self.psql("state", f"CREATE INDEX ON {table} ({column})")
        self.psql(
            "state",
            f"CREATE FUNCTION {table}_by_keys(keys text[]) RETURNS SETOF {table} "
            f"LANGUAGE sql STABLE PARALLEL SAFE AS "
            f"$$ SELECT * FROM {table} WHERE key = ANY(keys) $$",
        )
        self.psql("state", f"VACUUM (ANALYZE) {table}")

    def stop_postgres(self) -> None:
        if self.bin is not None and (self.pgdata / "postmaster.pid").exists():
            self._as_pg([f"{self.bin}/pg_ctl", "-D", str(self.pgdata), "-m", "fast", "stop"],
                        check=False)  # fmt: skip

    # -- postgraphile ------------------------------------------------------------------------

    def start_postgraphile(self, timeout_s: float = 120) -> None:
        preset = self.root / "bench.preset.mjs"
        preset.write_text(PRESET)
        node = self._node22() or "node"
        command = [node, "node_modules/postgraphile/dist/cli-run.js",
                   "-P", f"postgraphile/presets/amber,{preset}",
                   "-c", f"postgres://postgres@127.0.0.1:{self.pg_port}/state", "-s", "public",
                   "-n", "127.0.0.1", "-p", str(self.gql_port)]  # fmt: skip
        env = {**os.environ, "GRAPHILE_ENV": "production", "NODE_ENV": "production"}
        log = (self.root / "postgraphile.log").open("wb")
        self._node = subprocess.Popen(command, cwd=self.root, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._node.poll() is not None:
                raise RuntimeError(f"postgraphile exited; see {self.root / 'postgraphile.log'}")
            try:
                answer = httpx.post(self.url, json={"query": "{ __typename }"}, timeout=2)
                if answer.status_code == 200 and "Query" in answer.text:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"postgraphile did not answer within {timeout_s} s")

    def stop_postgraphile(self) -> None:
        if self._node is not None and self._node.poll() is None:
            self._node.terminate()
            self._node.wait(timeout=30)
        self._node = None

    def processes(self) -> list[psutil.Process]:
        """PostGraphile and every PostgreSQL process (CPU accounting)."""
        found = []
        if self._node is not None:
            found.append(psutil.Process(self._node.pid))
        pid_file = self.pgdata / "postmaster.pid"
        if pid_file.exists():
            postmaster = psutil.Process(int(pid_file.read_text().split()[0]))
            found += [postmaster, *postmaster.children(recursive=True)]
        return found

    def versions(self) -> dict[str, str]:
        package = self.root / "node_modules" / "postgraphile" / "package.json"
        node = self._node22() or "node"
        postgres = self.psql("state", "SHOW server_version").strip()
        node_version = subprocess.run([node, "--version"], capture_output=True, text=True)
        return {
            "postgraphile": json.loads(package.read_text())["version"],
            "node": node_version.stdout.strip(),
            "postgresql": postgres,
        }

    # -- helpers -----------------------------------------------------------------------------

    def _as_pg(self, command: list[str], check: bool = True) -> None:
        if os.geteuid() == 0:
            command = ["runuser", "-u", OS_USER, "--", *command]
        subprocess.run(command, check=check, cwd=self.home)  # a folder it may enter

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, OS_USER)


def _pg_home(root: Path) -> Path:
    """Where PostgreSQL's files go: beside the benchmark's, unless we are root and postgres
    runs as OS_USER, which may not enter the checkout (a clone under /root, a mkdtemp
    folder): then a folder of its own in the system's temporary folder, one per checkout."""
    if os.geteuid() != 0:
        return root
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"stategate-bench-pg-{digest}"


def _postgres_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return str(Path(found[-1]).parent) if found else None


def _node_major(node: str) -> int:
    out = subprocess.run([node, "-p", "process.versions.node"], capture_output=True, text=True)
    return int(out.stdout.split(".")[0]) if out.returncode == 0 else 0


def _apt_install(package: str) -> None:
    if os.geteuid() != 0:
        raise RuntimeError(f"{package} is missing: install it (apt-get install {package})")
    _run(["apt-get", "update", "-q"])
    _run(["apt-get", "install", "-y", "-q", package], env={"DEBIAN_FRONTEND": "noninteractive"})


def _run(command: list[str], env: dict[str, str] | None = None) -> None:
    subprocess.run(command, check=True, env={**os.environ, **(env or {})})
