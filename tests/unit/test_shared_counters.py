"""The shared counters area (kafkafast/runtime/shared_counters.py): admissions by several
forked processes never exceed a limit, a full per-IP table reports the address as
untracked instead of refusing it, a dead worker's columns are cleared, and quota samples
are Kafka's sliding window shared by every process."""
from __future__ import annotations

import os

from kafkafast.runtime.shared_counters import (ADMITTED, IP_REFUSED, IP_UNTRACKED, WAIT, SharedCounters,
                                               ip_key)

BIG = 2**31 - 1


def reserve(c: SharedCounters, worker: int, *, ip: str | None = None, ip_cap: int = BIG, max_total: int = BIG,
            listener: int = 0, listener_max: int = BIG, protected: bool = False, pending: bool = False):
    return c.reserve(worker, listener, max_total=max_total, listener_max=listener_max, protected=protected,
                     ip=ip_key(ip) if ip else None, ip_cap=ip_cap, pending=pending)


def test_forked_workers_admit_exactly_max_connections_between_them(tmp_path):
    c = SharedCounters.create(3, str(tmp_path))
    pids = []
    for w in range(3):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                c.after_fork()
                admitted = sum(reserve(c, w, ip="10.1.1.1", ip_cap=250, max_total=200)[0] == ADMITTED
                               for _ in range(100))
                code = 0 if admitted <= 100 else 1
            finally:
                os._exit(code)
        pids.append(pid)
    for pid in pids:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert c.total() == 200  # 300 attempts, never more than max.connections
    assert c.ip_connections("10.1.1.1") == 200
    assert reserve(c, 0, max_total=200)[0] == WAIT


def test_per_ip_cap_listener_cap_and_protected_listener():
    c = SharedCounters.create(2, None)
    assert reserve(c, 0, ip="192.0.2.1", ip_cap=2)[0] == ADMITTED
    assert reserve(c, 1, ip="192.0.2.1", ip_cap=2)[0] == ADMITTED
    assert reserve(c, 1, ip="192.0.2.1", ip_cap=2) == (IP_REFUSED, -1)
    assert c.total() == 2  # a refused connection is not counted
    assert reserve(c, 0, ip="::1", ip_cap=1)[0] == ADMITTED  # IPv6 is its own address
    assert reserve(c, 0, listener=1, listener_max=1)[0] == ADMITTED
    assert reserve(c, 1, listener=1, listener_max=1)[0] == WAIT
    assert reserve(c, 1, listener=2, max_total=4)[0] == WAIT
    assert reserve(c, 1, listener=2, max_total=4, protected=True)[0] == ADMITTED  # the inter-broker listener
    assert c.listener_total(0) == 3 and c.listener_total(1) == 1 and c.listener_total(2) == 1


def test_release_and_a_dead_workers_columns_free_their_slots():
    c = SharedCounters.create(2, None)
    _, e0 = reserve(c, 0, ip="192.0.2.7", ip_cap=2, pending=True)
    reserve(c, 1, ip="192.0.2.7", ip_cap=2, pending=True)
    assert c.pending() == 2
    c.setup_done(0)
    c.release(0, 0, e0, False)
    assert (c.total(), c.pending(), c.ip_connections("192.0.2.7")) == (1, 1, 1)
    c.clear_worker(1)  # worker 1 died: its connections died with it
    assert (c.total(), c.pending(), c.ip_connections("192.0.2.7")) == (0, 0, 0)
    assert reserve(c, 0, ip="192.0.2.7", ip_cap=1)[0] == ADMITTED


def test_a_full_ip_table_reports_untracked_and_reuses_entries_without_connections():
    c = SharedCounters.create(1, None, ip_entries=4)
    entries = [reserve(c, 0, ip=f"198.51.100.{i}", ip_cap=5) for i in range(4)]
    assert all(r == ADMITTED for r, _ in entries)
    assert reserve(c, 0, ip="198.51.100.200", ip_cap=5) == (IP_UNTRACKED, -1)  # admitted, counted by the worker
    c.release(0, 0, entries[2][1], False)  # an address without connections gives its entry up
    result, entry = reserve(c, 0, ip="198.51.100.200", ip_cap=5)
    assert (result, entry) == (ADMITTED, entries[2][1])
    assert c.ip_connections("198.51.100.200") == 1 and c.ip_connections("198.51.100.2") == 0


def test_quota_samples_form_kafkas_sliding_window():
    c = SharedCounters.create(1, None, quota_entries=2, samples=3)
    t = 5_000_000
    assert c.record_rate(("producer_byte_rate", "a"), 1000, t, 1000) == (1000.0, 1.0)  # at least one window
    assert c.record_rate(("producer_byte_rate", "a"), 500, t + 400, 1000) == (1500.0, 1.0)
    assert c.record_rate(("producer_byte_rate", "a"), 500, t + 2500, 1000) == (2000.0, 2.5)
    # t + 2500 opened a second sample, which t + 3200 adds to; the first (from t) is older than 3 windows
    assert c.record_rate(("producer_byte_rate", "a"), 100, t + 3200, 1000) == (600.0, 1.0)
    assert c.record_rate(("producer_byte_rate", "b"), 7, t + 3200, 1000) == (7.0, 1.0)
    # both entries in use within the window: a third entity gets no shared place...
    assert c.record_rate(("producer_byte_rate", "c"), 7, t + 3300, 1000) is None
    # ...until one has not recorded for quota.window.num windows
    assert c.record_rate(("producer_byte_rate", "c"), 7, t + 6400, 1000) == (7.0, 1.0)


def test_a_dynamic_config_written_by_one_worker_applies_on_the_others_at_once(tmp_path, monkeypatch):
    """A quota set through one worker holds on every worker from its next request on: the
    writer bumps the configs generation in the shared area, so the others re-read the file
    however recently they last looked (here never again by the time check)."""
    from kafkafast.broker import dynamic_configs
    from kafkafast.broker.dynamic_configs import DynamicConfigs

    monkeypatch.setattr(dynamic_configs, "RELOAD_INTERVAL", 3600.0)
    c = SharedCounters.create(3, str(tmp_path))
    workers = [DynamicConfigs(str(tmp_path)) for _ in range(3)]
    for d in workers[:2]:
        d.share_generation(c)
    for d in workers:
        d.refresh(force=True)
        assert d.quotas() == {}
    entity = (("client-id", "slow"),)
    workers[0].alter_quotas([(entity, {"producer_byte_rate": 1_000_000.0})])
    assert c.configs_generation() == 1
    assert workers[1].quotas() == {entity: {"producer_byte_rate": 1_000_000.0}}
    assert workers[2].quotas() == {}  # not sharing the generation: only after its next time check
    workers[1].alter_quotas([(entity, {"producer_byte_rate": None})])
    assert c.configs_generation() == 2
    assert workers[0].quotas() == {}  # and removing it, the other way round
