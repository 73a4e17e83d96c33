"""A Spark standalone cluster on loopback, started from the pyspark package: one master
and N workers (`spark-class org.apache.spark.deploy.master.Master` /
`org.apache.spark.deploy.worker.Worker spark://...`), each worker with 1 core and a little
memory, plus the application package a user would ship to it.

Used by tests/integration/test_spark_cluster.py and perf/spark_bench.py. The daemons run
with an environment without PYTHONPATH, so executors import kafkafast and
pyspark_kafkafast only from what the application ships (`package_archive`), as on a real
cluster.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pyspark

from kafkafast.testing.broker_process import free_port

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
ARCHIVE_ALIAS = "kafkafast_env"  # directory the archive is unpacked to in each executor's work dir


def package_archive(dest: Path) -> Path:
    """kafkafast (with its compiled twins, when built) and pyspark_kafkafast as one
    .tar.gz for `spark.archives`: each executor unpacks it into its work dir, and
    `spark.executorEnv.PYTHONPATH` points the Python workers at it (a zip in
    spark.submit.pyFiles would do for pure Python, but extension modules cannot be
    imported from a zip)."""
    path = dest / "kafkafast_env.tar.gz"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if "__pycache__" in info.name else info
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        tar.add(REPO / "kafkafast", arcname="kafkafast", filter=keep)
        tar.add(REPO / "spark" / "pyspark_kafkafast", arcname="pyspark_kafkafast", filter=keep)
    return path


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Spark daemon exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"Spark daemon not listening on {port}: {log.read_text()[-3000:]}")


class StandaloneCluster:
    """Master + `workers` workers of 1 core and `worker_memory` each, under `root`."""

    def __init__(self, root: Path, workers: int = 2, worker_memory: str = "768m") -> None:
        self.root = root
        self.workers = workers
        self.worker_memory = worker_memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.worker_dirs: list[Path] = []

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
                   SPARK_LOG_DIR=str(self.root / "logs"), SPARK_NO_DAEMONIZE="1",
                   PYSPARK_PYTHON=sys.executable)
        return env

    def _launch(self, name: str, args: list[str], port: int) -> tuple[int, subprocess.Popen, Path]:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=self._env(), stdout=out,
                                    stderr=subprocess.STDOUT, cwd=str(self.root), start_new_session=True)
        self.procs.append(proc)
        return port, proc, log

    def start(self) -> StandaloneCluster:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        _wait_port(*self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                            str(self.port), "--webui-port", str(free_port())], self.port))
        launched = []
        for i in range(self.workers):  # all at once: each JVM's start-up is seconds of CPU
            work = self.root / f"worker{i}"
            work.mkdir()
            self.worker_dirs.append(work)
            port = free_port()
            launched.append(self._launch(f"worker{i}", [
                "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--port", str(port),
                "--webui-port", str(free_port()), "--cores", "1", "--memory", self.worker_memory,
                "--work-dir", str(work)], port))
        for worker in launched:
            _wait_port(*worker)
        self._wait_registered()
        return self

    def _wait_registered(self, timeout: float = 60.0) -> None:
        """Until the master's log says every worker registered."""
        log = self.root / "master.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.read_text(errors="replace").count("Registering worker") >= self.workers:
                return
            time.sleep(0.3)
        raise RuntimeError(f"workers did not register: {log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs.clear()


def cluster_session(cluster: StandaloneCluster, archive: Path, app: str = "kafkafast-cluster", *,
                    register: bool = False):
    """A SparkSession on the cluster that ships `archive` to every executor (1 core,
    512m each, both workers used). The `kafkafast` format is found by Spark's discovery of
    installed `pyspark_*` data-source packages on the driver; `register=True` registers it
    explicitly instead."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark_kafkafast.jvm import jar_path

    spark = (SparkSession.builder.master(cluster.url).appName(app)
             .config("spark.jars", jar_path())  # kafkafast_arrow, and kafkafast's default save mode
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "1g")
             .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
             .config("spark.cores.max", str(cluster.workers))
             .config("spark.archives", f"{archive}#{ARCHIVE_ALIAS}")
             .config("spark.executorEnv.PYTHONPATH", ARCHIVE_ALIAS)
             .config("spark.pyspark.python", sys.executable)
             .config("spark.python.worker.reuse", "true")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    if register:
        from pyspark_kafkafast import register as register_source
        register_source(spark)
    return spark


def wait_executors(spark, count: int, timeout: float = 90.0) -> None:
    """Until `count` executors (besides the driver) have registered with the application."""
    sc = spark.sparkContext
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = sc._jsc.sc().getExecutorMemoryStatus()  # includes the driver
        if status.size() - 1 >= count:
            return
        time.sleep(0.3)
    raise RuntimeError(f"fewer than {count} executors registered")


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
