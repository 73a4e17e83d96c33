"""The package's jar: the JVM columnar reader (format `kafkafast_arrow`) and the `kafkafast`
provider that gives the Python source the batch save modes of Spark's Kafka sink. Built from
the Java sources shipped in this package (`java/*.java`) with the JDK's javac against the
installed pyspark's jars, on first use, into a cache directory keyed by the sources and the
pyspark version; later calls return the built jar.

    spark = (SparkSession.builder.config("spark.jars", pyspark_kafkafast.jar_path())...)
    spark.read.format("kafkafast_arrow").option("kafka.bootstrap.servers", ...).option("subscribe", t).load()
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

SOURCES = sorted((Path(__file__).with_name("java")).glob("*.java"))
# the DataSourceRegister classes: format kafkafast_arrow, and format kafkafast's save modes
CLASS_NAMES = ("io.kafkafast.spark.KafkafastArrowSource", "io.kafkafast.spark.KafkafastProvider")
REGISTER = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def _cache_dir() -> Path:
    base = os.environ.get("KAFKAFAST_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kafkafast")
    return Path(base)


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    found = shutil.which("javac")
    if found is None:
        raise RuntimeError("the kafkafast_arrow reader is built with javac (a JDK 17 or newer): none found; "
                           "install one (Debian: openjdk-17-jdk-headless) or set JAVA_HOME")
    return found


def jar_path() -> str:
    """The path of the package's jar, building it first if these sources and pyspark have none yet."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in SOURCES) + pyspark.__version__.encode()).hexdigest()[:16]
    cache = _cache_dir()
    jar = cache / f"kafkafast-spark-arrow-{digest}.jar"
    if jar.exists():
        return str(jar)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.exists():
            return str(jar)
        with tempfile.TemporaryDirectory(prefix="kafkafast-javac-") as tmp:
            classes = Path(tmp) / "classes"
            proc = subprocess.run([_javac(), "-nowarn", "--release", "17", "-cp", str(jars / "*"), "-d", str(classes),
                                   *map(str, SOURCES)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"javac failed building the kafkafast_arrow reader:\n{proc.stderr[-4000:]}")
            partial = cache / f".{jar.name}.{os.getpid()}"
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n\n")
                z.writestr(REGISTER, "".join(name + "\n" for name in CLASS_NAMES))
                for f in sorted(classes.rglob("*.class")):
                    z.write(f, f.relative_to(classes).as_posix())
            os.replace(partial, jar)
    return str(jar)
