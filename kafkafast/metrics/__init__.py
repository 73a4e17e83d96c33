"""Prometheus metrics of a broker, aggregated over its worker processes.

`metrics.port` (off by default) makes the broker serve `/metrics` from its supervisor (or
its single process with --workers 0). Names and labels are those the Prometheus JMX
exporter's standard Kafka rules give Kafka's own MBeans, so Kafka dashboards and alerts
work unchanged.

Two sources, one endpoint:
* `recorder`: counters and histograms written by every worker as it answers requests
  (request counts and times, produce/fetch traffic and failures per topic, per-worker
  counts, log flush and ZooKeeper latencies, and, in cluster mode, the ISR shrinks/expands its
  leaders get accepted by the controller) (prometheus_client's multiprocess mode: one mmap'd
  file per process in a directory the supervisor creates before forking; the endpoint sums
  them, and the files of a worker that died keep counting, so totals never go backwards when
  a worker is replaced); `server` turns the latency histograms' fine buckets into the
  quantiles the JMX exporter serves for Kafka's histograms;
* `state`: gauges computed at scrape time — partitions, leaders, under-replicated, under/at
  min ISR and offline partitions and replicas, the active controller (asked of the broker
  itself over the Kafka protocol), log size and offsets per partition, the consumer groups it
  coordinates and their lag, connections per listener (the kernel's socket table), worker
  restarts (the supervisor's children), each worker's event-loop busy fraction and the
  process_* series of the supervisor and every worker (/proc).
"""
