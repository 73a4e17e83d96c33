"""Fixtures for the Spark tests: one local[2] SparkSession, kept small, shared by every test
module that takes it (starting one and its first job is 8-10 s of CPU; the tests set no session
configuration and name their temporary views apart). A module that needs a SparkSession of
its own (the standalone cluster's) stops the shared one first (one SparkContext per
process); the next module that takes it starts it again. tests/conftest.py stops it when
the session ends.

The `kafkafast` data source lives in `spark/pyspark_kafkafast`; Spark's Python workers find
it (and the `kafkafast` client) through PYTHONPATH, set before the JVM starts so every
worker the JVM forks inherits it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
SPARK_DIR = REPO / "spark"


def spark_python_path() -> str:
    parts = [str(SPARK_DIR), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


def make_spark_session(app: str = "kafkafast-tests"):
    """A local[2] session sized for a shared 2-core machine: no UI, 4 shuffle partitions, loopback only."""
    os.environ["PYTHONPATH"] = spark_python_path()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if str(SPARK_DIR) not in sys.path:
        sys.path.insert(0, str(SPARK_DIR))
    from pyspark.sql import SparkSession
    from pyspark_kafkafast.jvm import jar_path

    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.jars", jar_path())  # kafkafast_arrow, and kafkafast's default save mode
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "1g")
             .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
             .config("spark.python.worker.reuse", "true")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    from pyspark_kafkafast import register
    register(spark)
    return spark


_shared: list = []  # the shared session, while one runs


def shared_spark_session():
    """The shared local[2] SparkSession (started on first use, or again after
    `stop_shared_spark_session`, or once something else stopped it)."""
    if _shared and _shared[0].sparkContext._jsc is None:  # stopped (pyspark's SparkContext.stop)
        _shared.clear()
    if not _shared:
        _shared.append(make_spark_session())
    return _shared[0]


def stop_shared_spark_session() -> None:
    while _shared:
        _shared.pop().stop()


@pytest.fixture(scope="module")
def spark() -> Iterator:
    session = shared_spark_session()
    yield session
    # what a module started it leaves stopped: no streaming query runs on into the next module
    for query in session.streams.active:
        query.stop()
