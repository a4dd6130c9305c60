"""The SparkSession the pipeline runs in: local[2] on a laptop, whatever spark-submit says on a
cluster."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from snapshot_store import ENVIRONMENT

JVM_EXIT_S = 20.0  # how long stop_spark waits for the driver's JVM to exit
CANCEL_EVERY_S = 0.5
JSON_LOGGING = Path(__file__).resolve().parent / "log4j2-json.properties"


def spark_session(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the session; `conf` adds settings for a session created here."""
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ.setdefault(name, sys.executable)
    builder = (
        SparkSession.builder.appName("stategate-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    master = master or (None if _master_configured() else "local[2]")
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    for name in ENVIRONMENT:  # an executor reaches the object store as its driver does
        if name in os.environ:  # (Spark's UI redacts the secret's value: spark.redaction.regex)
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    spark = builder.getOrCreate()
    context = spark.sparkContext
    context.setLogLevel("WARN")
    local = (context.master or "").startswith("local")
    if local and not context.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    return spark


def _master_configured() -> bool:
    """True under spark-submit or the pyspark shell, which choose the master themselves."""
    return (
        "PYSPARK_GATEWAY_PORT" in os.environ
        or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
        or SparkSession.getActiveSession() is not None
    )


@contextlib.contextmanager
def cancelled_on(stopping: threading.Event, spark: SparkSession) -> Iterator[None]:
    """While the block runs, once `stopping` is set, cancel every Spark job, and again every
    CANCEL_EVERY_S: a job submitted after a cancel is cancelled too."""

    def cancel() -> None:
        if stopping.is_set():
            with contextlib.suppress(Exception):  # the context is stopping anyway
                spark.sparkContext.cancelAllJobs()

    with every(CANCEL_EVERY_S, cancel, "cancel-on-stop"):
        yield


@contextlib.contextmanager
def every(seconds: float, tick: Callable[[], bool | None], name: str) -> Iterator[None]:
    """While the block runs, call `tick` every `seconds` on a thread of its own, until it
    returns False."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(seconds):
            if tick() is False:
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def json_logging() -> dict[str, str]:
    """The settings that make a driver started here log JSON lines (log4j2-json.properties)
    from its first line (but for the JVM's own notices, printed before logging starts)."""
    return {"spark.driver.extraJavaOptions": f'-Dlog4j2.configurationFile="{JSON_LOGGING}"'}


def stop_spark(spark: SparkSession) -> None:
    """Stop the session and the JVM it runs in when this process started it (a child process
    that ends once its stdin closes), so that nothing of Spark outlives the pipeline: local
    executors and their Python workers end with it."""
    gateway = SparkContext._gateway
    spark.stop()
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None  # a new session starts a new JVM
    if proc is None:
        return  # spark-submit started this process: the JVM is its parent
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(JVM_EXIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class LazySpark:
    """A Spark session started on first use, for a pipeline that builds its small batches
    in the driver: it never pays the JVM's start (~19 CPU-s and 10-13 s here) unless a
    batch past `driver_batch_records`, a compaction or a first build needs the executors.
    Once closed it starts nothing more, so no JVM outlives a stop."""

    def __init__(
        self,
        master: str | None,
        conf: dict[str, str] | None = None,
        started: Callable[[SparkSession, float], None] | None = None,
    ) -> None:
        self._master, self._conf, self._on_start = master, conf, started
        self._session: SparkSession | None = None
        self._owned = True  # started here: close() stops it
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def of(cls, session: SparkSession) -> LazySpark:
        """A session started by someone else (tests): used, never stopped."""
        lazy = cls(None)
        lazy._session, lazy._owned = session, False
        return lazy

    @property
    def started(self) -> SparkSession | None:
        return self._session

    def get(self) -> SparkSession:
        with self._lock:
            if self._closed:
                raise RuntimeError("the pipeline is stopping: Spark is not started")
            if self._session is None:
                began = time.monotonic()
                self._session = spark_session(self._master, self._conf)
                if self._on_start is not None:
                    self._on_start(self._session, time.monotonic() - began)
            return self._session

    def close(self) -> None:
        """Stop Spark if it started; start it no more."""
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
        if session is not None and self._owned:
            stop_spark(session)
