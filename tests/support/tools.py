"""Tests that need a tool from outside Python (node and KafkaJS, kcat, Go and Sarama, Burrow,
ZooKeeper and java, systemd-analyze): without it a test is skipped with how to get it, except on CI (CI=true),
where `run.sh test` has installed every tool and a missing one fails the test instead."""
from __future__ import annotations

import os
from typing import NoReturn

import pytest

CI = os.environ.get("CI") == "true"

HOW_TO_GET = {
    "kafkajs": "node and KafkaJS are missing: `bash run.sh test` installs them (as root, Debian's nodejs "
               "and npm; where nodejs comes from NodeSource, npm is part of it and Debian's npm package "
               "conflicts with it), or install Node.js with npm and run `npm install` in tests/js",
    "kcat": "kcat is missing: `bash run.sh test` installs it as root (Debian package: kcat)",
    "sarama": "Go or Sarama is missing: `bash run.sh test` installs them as root (Debian packages: golang-go, "
              "golang-github-shopify-sarama-dev)",
    "zookeeper": "ZooKeeper or java is missing: `bash run.sh test` installs them as root (Debian packages: "
                 "zookeeper, openjdk-17-jre-headless)",
    "burrow": "Burrow is missing: `bash run.sh test` installs it as root (Debian package: burrow)",
    "systemd-analyze": "systemd-analyze is missing: `bash run.sh test` installs it as root (Debian package: "
                       "systemd)",
}


def missing_tool(tool: str) -> NoReturn:
    """Skips the calling test (fails it on CI), saying how to get `tool`."""
    if CI:
        pytest.fail(f"on CI every tool is installed; {HOW_TO_GET[tool]}")
    pytest.skip(HOW_TO_GET[tool])
