"""The client x version matrix reads its versions from constraints.txt: every client has an
ordinary pin (its newest release, installed here) and older `# matrix:` releases below it."""
from __future__ import annotations

from packaging.version import Version

from tests.support.client_matrix import CODEC_PACKAGES, canonical, matrix_versions, read_constraints, requirements


def test_matrix_lines_are_read_beside_the_pins(tmp_path):
    f = tmp_path / "constraints.txt"
    f.write_text("# a comment\n# matrix: Kafka_Python==2.0.2\nkafka-python==3.0.12\nlz4==4.4.5\n#matrix:aiokafka==0.11.0\n")
    assert read_constraints(f) == ({"kafka-python": "3.0.12", "lz4": "4.4.5"},
                                   {"kafka-python": ["2.0.2"], "aiokafka": ["0.11.0"]})


def test_every_client_has_older_releases_below_its_pin():
    pins, older = read_constraints()
    assert set(older) == set(CODEC_PACKAGES)
    for package in CODEC_PACKAGES:
        versions = matrix_versions(package)
        assert [cv.newest for cv in versions] == [False] * len(older[package]) + [True]
        assert all(Version(cv.version) < Version(pins[package]) for cv in versions[:-1])
        assert all(canonical(p) in pins for p in CODEC_PACKAGES[package])  # codecs pinned too


def test_an_older_release_is_installed_with_pinned_codecs():
    pins, _ = read_constraints()
    (old, _newest) = matrix_versions("kafka-python")
    assert requirements(old) == [f"kafka-python=={old.version}"] + [f"{p}=={pins[p]}" for p in
                                                          ("lz4", "python-snappy", "zstandard", "xxhash")]
