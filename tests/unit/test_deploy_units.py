"""deploy/: the systemd units install into a scratch root and pass `systemd-analyze
verify` with no warning; their settings, the three-node example and the sysctl file are
checked for what the docs promise."""
from __future__ import annotations

import configparser
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from kafkafast.config import BrokerConfig
from tests.support.tools import missing_tool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
SYSTEM_UNIT_DIRS = ("/lib/systemd/system", "/usr/lib/systemd/system")


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """[section] -> key -> values (systemd keys repeat), with systemd's syntax rules:
    comments start with # or ;, a line is key=value, no key outside a section."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}:{n}: setting outside a section"
        assert "=" in line, f"{path.name}:{n}: not key=value: {line!r}"
        key, value = line.split("=", 1)
        assert key.strip() and key.strip() == key, f"{path.name}:{n}: bad key {key!r}"
        current.setdefault(key, []).append(value.strip())
    return sections


def test_units_parse_and_set_limits():
    assert {u.name for u in UNITS} == {"kafkafast.service", "zookeeper.service"}
    for unit in UNITS:
        s = parse_unit(unit)
        assert set(s) == {"Unit", "Service", "Install"}, unit.name
        svc = s["Service"]
        assert int(svc["LimitNOFILE"][0]) >= 65536
        assert svc["MemoryMax"][0][-1] in "GM" and svc["MemorySwapMax"] == ["0"]
        assert svc["Restart"] == ["on-failure"]
        assert s["Install"]["WantedBy"] == ["multi-user.target"]
    broker = parse_unit(DEPLOY / "systemd" / "kafkafast.service")["Service"]
    assert broker["ExecStart"][0].split()[1:4] == ["broker", "-c", "/etc/kafkafast/server.properties"]
    assert broker["KillMode"] == ["mixed"] and broker["KillSignal"] == ["SIGTERM"]
    assert "health --bootstrap-server ${KAFKAFAST_BOOTSTRAP} --wait" in broker["ExecStartPost"][0]


def _scratch_root(tmp_path: Path) -> Path:
    """A root with the units in etc/systemd/system, systemd's own units (for the targets
    they depend on) and stand-ins for the programs they run."""
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in UNITS:
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
    system_units = next(d for d in SYSTEM_UNIT_DIRS if os.path.isdir(d))
    shutil.copytree(system_units, root / "usr/lib/systemd/system", symlinks=True)
    for unit in UNITS:
        for key in ("ExecStart", "ExecStartPost"):
            for cmd in parse_unit(unit)["Service"].get(key, []):
                program = root / cmd.split()[0].lstrip("-@+!").lstrip("/")
                program.parent.mkdir(parents=True, exist_ok=True)
                program.write_text("#!/bin/sh\n")
                program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return root


def test_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        missing_tool("systemd-analyze")  # (the units' syntax is also checked by test_units_parse_and_set_limits)
    if not any(os.path.isdir(d) for d in SYSTEM_UNIT_DIRS):
        pytest.skip("no systemd unit directory to take the standard targets from")
    root = _scratch_root(tmp_path)
    names = [f"/etc/systemd/system/{u.name}" for u in UNITS]
    proc = subprocess.run(["systemd-analyze", "verify", f"--root={root}", *names], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # warnings (a bad value is only "ignored") count as failures

    bad = root / "etc/systemd/system/kafkafast.service"
    bad.write_text(bad.read_text().replace("LimitNOFILE=1048576", "LimitNOFILE=lots"))
    proc = subprocess.run(["systemd-analyze", "verify", f"--root={root}", names[0]], capture_output=True, text=True,
                          timeout=60)
    assert "LimitNOFILE" in proc.stderr or "resource value" in proc.stderr  # the check would catch a typo


def test_units_are_sandboxed_systemd_analyze_security(tmp_path):
    """Both units score OK under `systemd-analyze security` (8.5 EXPOSED before the sandboxing
    directives): what a service may reach beyond its own directories and sockets."""
    if shutil.which("systemd-analyze") is None:
        missing_tool("systemd-analyze")
    if not any(os.path.isdir(d) for d in SYSTEM_UNIT_DIRS):
        pytest.skip("no systemd unit directory to take the standard targets from")
    root = _scratch_root(tmp_path)
    for unit in UNITS:
        proc = subprocess.run(["systemd-analyze", "security", "--offline=true", f"--root={root}", "--no-pager",
                               f"/etc/systemd/system/{unit.name}"], capture_output=True, text=True, timeout=60)
        m = re.search(rf"Overall exposure level for {re.escape(unit.name)}: (\d+\.\d+) (\w+)", proc.stdout)
        assert m, proc.stdout + proc.stderr
        assert float(m.group(1)) < 3.0 and m.group(2) == "OK", (unit.name, m.group(0))
        for directive in ("ProtectSystem=", "PrivateTmp=", "NoNewPrivileges=", "PrivateDevices=",
                          "CapabilityBoundingSet=", "ProtectKernelTunables=", "SystemCallArchitectures="):
            assert not re.search(rf"✗ {directive}\S* ", proc.stdout), (unit.name, directive)


def test_three_node_example_is_consistent():
    brokers = [BrokerConfig.load(str(DEPLOY / "three-node" / f"broker-{i}.properties"), {}) for i in (1, 2, 3)]
    assert [b.node_id for b in brokers] == [1, 2, 3]
    assert len({b.get("zookeeper.connect") for b in brokers}) == 1
    assert [b.get("advertised.listeners") for b in brokers] == [f"PLAINTEXT://kf{i}:9092" for i in (1, 2, 3)]
    for b in brokers:
        assert int(b.get("default.replication.factor")) == 3 and int(b.get("min.insync.replicas")) == 2
    zk = configparser.ConfigParser()
    zk.read_string("[zk]\n" + (DEPLOY / "three-node" / "zoo.cfg").read_text())
    servers = {k: v for k, v in zk["zk"].items() if k.startswith("server.")}
    assert servers == {f"server.{i}": f"kf{i}:2888:3888" for i in (1, 2, 3)}
    hosts = {h.split(":")[0] for h in brokers[0].get("zookeeper.connect").split("/")[0].split(",")}
    assert hosts == {"kf1", "kf2", "kf3"}


def test_sysctl_names_exist_in_the_kernel():
    names = []
    for line in (DEPLOY / "sysctl" / "60-kafkafast.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert value.strip(), line
            names.append(key.strip())
    assert {"vm.dirty_background_ratio", "vm.dirty_ratio", "net.core.somaxconn", "vm.swappiness"} <= set(names)
    if not os.path.isdir("/proc/sys/vm"):
        pytest.skip("no /proc/sys to check the names against")
    missing = [n for n in names if not os.path.exists("/proc/sys/" + n.replace(".", "/"))
               and not n.startswith("net.")]  # net.* may be hidden in a network namespace
    assert missing == []


def test_logrotate_config_rotates_the_broker_log():
    text = (DEPLOY / "logrotate" / "kafkafast").read_text()
    body = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert body[0] == "/var/log/kafkafast/*.log {" and body[-1] == "}"
    assert "copytruncate" in body and any(line.startswith("rotate ") for line in body)
    if shutil.which("logrotate"):
        proc = subprocess.run(["logrotate", "-d", str(DEPLOY / "logrotate" / "kafkafast")], capture_output=True,
                              text=True, timeout=30)
        assert "error" not in proc.stderr.lower(), proc.stderr


def test_every_deploy_path_the_docs_name_exists():
    """README, docs and deploy/ itself name deploy files (one three-node example, no stale copies)."""
    root = DEPLOY.parent
    texts = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             *(p for p in sorted(DEPLOY.rglob("*")) if p.is_file() and p.suffix != ".json")]
    named = set()
    for path in texts:
        for m in re.finditer(r"deploy/[A-Za-z0-9_./-]*[A-Za-z0-9_]", path.read_text(errors="replace")):
            named.add(m.group(0).replace("broker-N.", "broker-1."))
    assert "deploy/three-node/broker-1.properties" in named
    missing = sorted(n for n in named if not (root / n).exists())
    assert missing == [], missing
    assert not (DEPLOY / "cluster").exists()


def test_stop_timeout_covers_the_controlled_shutdown_retries():
    broker = parse_unit(DEPLOY / "systemd" / "kafkafast.service")["Service"]
    stop_s = int(broker["TimeoutStopSec"][0])
    for i in (1, 2, 3):
        cfg = BrokerConfig.load(str(DEPLOY / "three-node" / f"broker-{i}.properties"), {})
        assert cfg.get_bool("controlled.shutdown.enable")
        retries = cfg.get_int("controlled.shutdown.max.retries")
        backoff_s = cfg.get_int("controlled.shutdown.retry.backoff.ms") / 1000
        assert stop_s >= retries * backoff_s + 30, (stop_s, retries, backoff_s)
