"""Writes a benchmark run: results.json (everything), RESULTS.md (tables, ratios, targets)
and chart.png (produce/consume throughput and latency, kafkafast beside Tansu)."""
from __future__ import annotations

import json
from pathlib import Path

MB = 1e6


def _find(rows: list[dict], **kw) -> dict | None:
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return a / b


def targets(res: dict) -> list[dict]:
    out = []
    kf = "kafkafast"
    p_kf = _find(res.get("produce", []), broker=kf, size=1024, partitions=16, acks="1", compression="none")
    p_ta = _find(res.get("produce", []), broker="tansu", size=1024, partitions=16, acks="1", compression="none")
    r = _ratio(p_kf and p_kf["msgs_per_s"], p_ta and p_ta["msgs_per_s"])
    out.append({"target": "produce 1 KiB, acks=1, 16 partitions >= 1.5x Tansu", "value": r, "goal": 1.5,
                "met": r is not None and r >= 1.5, "unit": "x Tansu"})
    c_kf = _find(res.get("consume", []), broker=kf, size=1024)
    c_ta = _find(res.get("consume", []), broker="tansu", size=1024)
    c100 = _find(res.get("consume", []), broker=kf, size=102400)
    ceil = res.get("ceilings", {}).get("loopback_sendfile_Bps")
    for label, field in (("confluent-kafka", "MB_per_s"), ("minimal fetch client", "raw_fetch_MB_per_s")):
        r = _ratio(c_kf and c_kf.get(field), c_ta and c_ta.get(field))
        out.append({"target": f"consume 1 KiB >= 2x Tansu ({label})", "value": r, "goal": 2.0,
                    "met": r is not None and r >= 2.0, "unit": "x Tansu"})
        r = _ratio(c100 and c100.get(field, 0) * MB, ceil)
        out.append({"target": f"consume 100 KiB >= 70% of loopback sendfile ({label})", "value": r, "goal": 0.7,
                    "met": r is not None and r >= 0.7, "unit": "of ceiling"})
    l_kf = _find(res.get("latency", []), broker=kf, fraction=0.5)
    l_ta = _find(res.get("latency", []), broker="tansu", fraction=0.5)
    r = _ratio(l_kf and l_kf["p99_ms"], l_ta and l_ta["p99_ms"])
    out.append({"target": "p99 produce latency at 50% load <= Tansu", "value": r, "goal": 1.0,
                "met": r is not None and r <= 1.0, "unit": "x Tansu (lower is better)"})
    if res.get("profile") == "issue17":  # measures only these rows (no consume phase)
        out = issue17_targets(res, p_kf, p_ta)
    mem = res.get("memory", {}).get(kf)
    if mem:
        v = mem["rss_max_bytes"] / MB
        out.append({"target": f"RSS < 100 MB per worker (after {mem['after_produced_GB']:.1f} GB produced)",
                    "value": v, "goal": 100, "met": v < 100, "unit": "MB (largest process)"})
    return out


def issue17_targets(res: dict, p_kf: dict | None, p_ta: dict | None) -> list[dict]:
    """Issue 17's produce and latency targets (profile `issue17`)."""
    out = []
    r = _ratio(p_kf and p_kf["msgs_per_s"], p_ta and p_ta["msgs_per_s"])
    out.append({"target": "issue 17: produce 1 KiB, acks=1, 16 partitions >= 1.3x Tansu", "value": r, "goal": 1.3,
                "met": r is not None and r >= 1.3, "unit": "x Tansu"})
    if p_kf and p_ta and len(p_kf.get("repeats", ())) == len(p_ta.get("repeats", ())) > 1:
        # the repeats alternate brokers, so repeat i of each ran under about the same machine load
        pairs = sorted(a["msgs_per_s"] / b["msgs_per_s"] for a, b in zip(p_kf["repeats"], p_ta["repeats"]))
        r = pairs[len(pairs) // 2] if len(pairs) % 2 else (pairs[len(pairs) // 2 - 1] + pairs[len(pairs) // 2]) / 2
        out.append({"target": f"issue 17: the same, median of per-repeat ratios (range {pairs[0]:.2f}-{pairs[-1]:.2f})",
                    "value": r, "goal": 1.3, "met": r >= 1.3, "unit": "x Tansu"})
    r = _ratio(p_kf and p_kf["broker_cpu_s_per_GB"], p_ta and p_ta["broker_cpu_s_per_GB"])
    out.append({"target": "issue 17: broker CPU-s/GB (same row) <= 0.5x Tansu", "value": r, "goal": 0.5,
                "met": r is not None and r <= 0.5, "unit": "x Tansu (lower is better)"})
    lat = res.get("latency", [])
    for q in ("p50_ms", "p99_ms"):
        l_kf = _find(lat, broker="kafkafast", fraction=0.5)
        l_ta = _find(lat, broker="tansu", fraction=0.5)
        r = _ratio(l_kf and l_kf[q], l_ta and l_ta[q])
        out.append({"target": f"issue 17: {q[:3]} latency at 50% load <= Tansu", "value": r, "goal": 1.0,
                    "met": r is not None and r <= 1.0, "unit": "x Tansu (lower is better)"})
    l80 = _find(lat, broker="kafkafast", fraction=0.8)
    r = _ratio(l80 and l80["achieved_rate"], l80 and l80["target_rate"])
    out.append({"target": "issue 17: at 80% load kafkafast reaches the offered rate (>= 0.98)", "value": r,
                "goal": 0.98, "met": r is not None and r >= 0.98, "unit": "of offered"})
    return out


def _fmt(v, spec: str = ".2f") -> str:
    if v is None:
        return "-"
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


def markdown(res: dict) -> str:
    m = res.get("machine", {})
    lines = [f"# kafkafast vs Tansu — profile `{res.get('profile')}`", "",
             f"Run {res.get('started')}, {res.get('elapsed_s', 0):.0f} s. Command: `{res.get('command')}`", "",
             f"Machine: {m.get('cpu')}, {m.get('cpus')} CPUs, {m.get('memory_GB')} GiB, Linux {m.get('kernel')}, "
             f"Python {m.get('python')}, confluent-kafka {m.get('confluent_kafka')}, {m.get('tansu')}. "
             f"kafkafast: {res.get('workers')} workers, data on disk; Tansu: memory storage. "
             "The machine is shared (other jobs run beside the benchmark): read ratios, not absolutes.", ""]
    if res.get("loadavg_start"):
        lines += [f"Load average (1/5/15 min) at start {' / '.join(f'{x:.2f}' for x in res['loadavg_start'])}, at end "
                  f"{' / '.join(f'{x:.2f}' for x in res.get('loadavg_end') or ())} (2 cores).", ""]
    for name, cmd in res.get("broker_commands", {}).items():
        lines.append(f"- `{name}`: `{cmd}`")
    lines.append("")
    ceil = res.get("ceilings")
    if ceil:
        lines += ["## Machine ceilings", "", "| ceiling | MB/s |", "|---|---:|"]
        for k, v in ceil.items():
            lines.append(f"| {k.replace('_Bps', '')} | {v / MB:.0f} |")
        lines.append("")
    lines += ["## Targets", "", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for t in targets(res):
        if t["value"] is None:  # a row this run did not measure (profile, phase skipped, no Tansu)
            lines.append(f"| {t['target']} | not measured | {t['goal']} | not measured |")
        else:
            lines.append(f"| {t['target']} | {_fmt(t['value'])} {t['unit']} | {t['goal']} | "
                         f"{'yes' if t['met'] else '**no**'} |")
    lines.append("")
    prod = res.get("produce", [])
    if prod:
        lines += ["## Produce throughput (median of repeats; range in msg/s)", "",
                  "linger.ms=5, batch.size=1 MiB, idempotence off; only acknowledged messages count. "
                  "`client-bound`: the load processes were >= 80% busy, so the broker may be faster than shown.", "",
                  "| size | partitions | acks | codec | kafkafast msg/s | MB/s | Tansu msg/s | MB/s | ratio | kafkafast CPU-s/GB | Tansu CPU-s/GB | notes |",
                  "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        keys = []
        for r in prod:
            k = (r["size"], r["partitions"], r["acks"], r["compression"])
            if k not in keys:
                keys.append(k)
        for k in keys:
            kf = _find(prod, broker="kafkafast", size=k[0], partitions=k[1], acks=k[2], compression=k[3])
            ta = _find(prod, broker="tansu", size=k[0], partitions=k[1], acks=k[2], compression=k[3])
            notes = []
            for who, r in (("kafkafast", kf), ("Tansu", ta)):
                if r and r["client_bound"]:
                    notes.append(f"{who} client-bound")
                if r and r["errors"]:
                    notes.append(f"{who} {r['errors']} errors")
            lines.append(
                f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {_fmt(kf and kf['msgs_per_s'], '.0f')} | {_fmt(kf and kf['MB_per_s'], '.1f')} "
                f"| {_fmt(ta and ta['msgs_per_s'], '.0f')} | {_fmt(ta and ta['MB_per_s'], '.1f')} "
                f"| {_fmt(_ratio(kf and kf['msgs_per_s'], ta and ta['msgs_per_s']))} "
                f"| {_fmt(kf and kf['broker_cpu_s_per_GB'], '.1f')} | {_fmt(ta and ta['broker_cpu_s_per_GB'], '.1f')} | {', '.join(notes)} |")
        lines.append("")
    cons = res.get("consume", [])
    if cons:
        sf = (ceil or {}).get("loopback_sendfile_Bps")
        lines += ["## Consume throughput (assign from the beginning of a preloaded topic, page cache warm)", "",
                  "confluent-kafka: consumers (one process per share of the partitions) read every record. "
                  "Minimal fetch client: one connection sends Fetch requests for all partitions and discards "
                  "the bytes; it shows what the broker itself delivers (librdkafka keeps one fetch in flight "
                  "per connection and decodes every record, so it is the limit in the first columns).", "",
                  "| size | partitions | kafkafast MB/s | Tansu MB/s | ratio | kafkafast / sendfile ceiling | minimal client: kafkafast MB/s | Tansu MB/s | ratio | kafkafast / sendfile ceiling | kafkafast CPU-s/GB | Tansu CPU-s/GB | notes |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for size in sorted({r["size"] for r in cons}):
            kf = _find(cons, broker="kafkafast", size=size)
            ta = _find(cons, broker="tansu", size=size)
            notes = [f"{w} client-bound" for w, r in (("kafkafast", kf), ("Tansu", ta)) if r and r["client_bound"]]
            notes += [f"{w} incomplete" for w, r in (("kafkafast", kf), ("Tansu", ta)) if r and not r["complete"]]
            lines.append(f"| {size} | {(kf or ta)['partitions']} | {_fmt(kf and kf['MB_per_s'], '.1f')} | {_fmt(ta and ta['MB_per_s'], '.1f')} "
                         f"| {_fmt(_ratio(kf and kf['MB_per_s'], ta and ta['MB_per_s']))} "
                         f"| {_fmt(_ratio(kf and kf['MB_per_s'] * MB, sf))} "
                         f"| {_fmt(kf and kf.get('raw_fetch_MB_per_s'), '.1f')} | {_fmt(ta and ta.get('raw_fetch_MB_per_s'), '.1f')} "
                         f"| {_fmt(_ratio(kf and kf.get('raw_fetch_MB_per_s'), ta and ta.get('raw_fetch_MB_per_s')))} "
                         f"| {_fmt(_ratio(kf and kf.get('raw_fetch_MB_per_s', 0) * MB, sf))} "
                         f"| {_fmt(kf and kf['broker_cpu_s_per_GB'], '.1f')} | {_fmt(ta and ta['broker_cpu_s_per_GB'], '.1f')} | {', '.join(notes)} |")
        lines.append("")
    lat = res.get("latency", [])
    if lat:
        lines += ["## Produce->ack latency at fixed rates (1 KiB, acks=1, linger.ms=5, 16 partitions)", "",
                  f"Rates are fractions of the slower broker's maximum ({_fmt(min(res.get('latency_max_rates', {0: 0}).values()), '.0f')} msg/s).", "",
                  "| load | rate msg/s | broker | achieved | p50 ms | p99 ms | p99.9 ms | max ms |",
                  "|---:|---:|---|---:|---:|---:|---:|---:|"]
        for r in lat:
            lines.append(f"| {r['fraction']:.0%} | {r['target_rate']:.0f} | {r['broker']} | {r['achieved_rate']:.0f} | {r['p50_ms']:.2f} "
                         f"| {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['max_ms']:.2f} |")
        lines.append("")
    mem = res.get("memory", {})
    if mem:
        lines += ["## Broker memory at the end of the run", "",
                  "| broker | processes | largest RSS MB | RSS sum MB | PSS sum MB | after GB produced |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, m in mem.items():
            lines.append(f"| {name} | {m['processes']} | {m['rss_max_bytes'] / MB:.1f} | {m['rss_sum_bytes'] / MB:.1f} "
                         f"| {m['pss_sum_bytes'] / MB:.1f} | {m['after_produced_GB']:.2f} |")
        lines.append("")
    if res.get("skipped"):
        lines += ["## Skipped or failed measurements", ""] + [f"- {x}" for x in res["skipped"]] + [""]
    if res.get("notes"):
        lines += ["## Notes", "", res["notes"], ""]
    return "\n".join(lines)


def chart(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    brokers = ["kafkafast", "tansu"]
    colors = {"kafkafast": "#1f77b4", "tansu": "#ff7f0e"}
    prod = res.get("produce", [])
    keys = []
    for r in prod:
        k = (r["size"], r["partitions"], r["acks"], r["compression"])
        if k not in keys:
            keys.append(k)
    ax = axes[0]
    w = 0.4
    for i, b in enumerate(brokers):
        vals = [(_find(prod, broker=b, size=k[0], partitions=k[1], acks=k[2], compression=k[3]) or {}).get("MB_per_s", 0) for k in keys]
        ax.bar([x + i * w for x in range(len(keys))], vals, w, label=b, color=colors[b])
    ax.set_xticks([x + w / 2 for x in range(len(keys))])
    ax.set_xticklabels([f"{k[0]}B p{k[1]} a{k[2]}{'' if k[3] == 'none' else ' ' + k[3]}" for k in keys], rotation=70, fontsize=7)
    ax.set_ylabel("MB/s")
    ax.set_title("produce throughput")
    ax.legend()
    cons = res.get("consume", [])
    sizes = sorted({r["size"] for r in cons})
    ax = axes[1]
    w2 = 0.2
    for i, b in enumerate(brokers):
        vals = [(_find(cons, broker=b, size=s) or {}).get("MB_per_s", 0) for s in sizes]
        ax.bar([x + i * w2 for x in range(len(sizes))], vals, w2, label=f"{b} (confluent-kafka)", color=colors[b])
        vals = [(_find(cons, broker=b, size=s) or {}).get("raw_fetch_MB_per_s", 0) for s in sizes]
        ax.bar([x + (i + 2) * w2 for x in range(len(sizes))], vals, w2, label=f"{b} (minimal client)",
               color=colors[b], hatch="//", alpha=0.6)
    sf = res.get("ceilings", {}).get("loopback_sendfile_Bps")
    if sf:
        ax.axhline(sf / MB, color="grey", linestyle="--", label="loopback sendfile")
    ax.set_xticks([x + 1.5 * w2 for x in range(len(sizes))])
    ax.set_xticklabels([f"{s} B" for s in sizes])
    ax.set_ylabel("MB/s")
    ax.set_title("consume throughput")
    ax.legend()
    lat = res.get("latency", [])
    ax = axes[2]
    fracs = sorted({r["fraction"] for r in lat})
    for i, b in enumerate(brokers):
        for j, (q, style) in enumerate((("p50_ms", "o-"), ("p99_ms", "s--"), ("p999_ms", "^:"))):
            vals = [(_find(lat, broker=b, fraction=f) or {}).get(q) for f in fracs]
            ax.plot([f * 100 for f in fracs], vals, style, color=colors[b], label=f"{b} {q[:-3]}")
    ax.set_xlabel("% of the slower broker's max rate")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.set_title("produce->ack latency (1 KiB, acks=1)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(res: dict, out: Path) -> None:
    res["targets"] = targets(res)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "RESULTS.md").write_text(markdown(res))
    chart(res, out / "chart.png")
