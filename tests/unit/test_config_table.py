"""The table of known broker configs (`kafkafast/config_def.py`) is complete and consistent:
every config the broker reads is in it (so none is ever reported as unknown), and every
default passes its own type and validator."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kafkafast.config_def import BROKER_CONFIGS, is_known

PACKAGE = Path(__file__).resolve().parents[2] / "kafkafast"
BROKER_SIDE = ("broker", "runtime", "cluster", "storage", "security", "metrics", "testing")
CLIENT_SIDE = {PACKAGE / "security" / "client.py"}  # a client's properties, not the broker's
READ = re.compile(r"""(?:config|cfg|props)\.(?:get|get_int|get_bool)\(\s*["']([a-z0-9._-]+)["']""")


def broker_reads() -> set[str]:
    keys = set()
    for part in BROKER_SIDE:
        for path in (PACKAGE / part).rglob("*.py"):
            if path not in CLIENT_SIDE:
                keys.update(READ.findall(path.read_text(encoding="utf-8")))
    return keys


def test_every_config_the_broker_reads_is_known():
    reads = broker_reads()
    assert {"metrics.port", "kafkafast.shm.partition.slots", "quota.window.num"} <= reads  # the scan finds them
    assert sorted(k for k in reads if not is_known(k)) == []


@pytest.mark.parametrize("name", sorted(BROKER_CONFIGS))
def test_default_passes_its_own_validation_and_is_documented(name):
    key = BROKER_CONFIGS[name]
    key.parse(key.default)
    assert key.doc.strip()
