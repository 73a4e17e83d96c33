"""Prometheus metrics of a broker, aggregated over its worker processes.

`metrics.port` (off by default) makes the broker serve `/metrics` from its supervisor (or
its single process with --workers 0). Names and labels are those the Prometheus JMX
exporter's standard Kafka rules give Kafka's own MBeans, so Kafka dashboards and alerts
work unchanged.

Two sources, one endpoint:
* `recorder`: counters and histograms written by every worker as it answers requests
  (and, in cluster mode, the ISR shrinks/expands its leaders get accepted by the controller)
  (prometheus_client's multiprocess mode: one mmap'd file per process in a directory the
  supervisor creates before forking; the endpoint sums them, and the files of a worker
  that died keep counting, so totals never go backwards when a worker is replaced);
* `state`: gauges computed at scrape time — partitions, leaders, under-replicated and
  offline partitions, the active controller (asked of the broker itself over the Kafka
  protocol), log size per partition (the segment files), consumer groups and their lag,
  connections per listener (the kernel's socket table) and worker restarts (the
  supervisor's children).
"""
