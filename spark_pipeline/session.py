"""The SparkSession the pipeline runs in: local[2] on a laptop, whatever spark-submit says on a
cluster."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


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
