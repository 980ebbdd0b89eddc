"""A run's results folder: config.json, metrics.csv, summary.json, distributions.json, accuracy.png."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np

from ..fleet.simulator import RunRecord

METRIC_COLUMNS = ["time_s", "hours", "version", "accuracy", "loss", "bytes_total", "staleness_mean", "interval_s"]


def summarize(record: RunRecord, seed: int, batches: dict) -> dict:
    intervals = np.diff(record.aggregation_times) if len(record.aggregation_times) > 1 else np.zeros(0)
    acc = [c.accuracy for c in record.checkpoints]
    out = {
        "time_to_target_s": record.time_to_target_s,
        "time_to_target_h": None if record.time_to_target_s is None else record.time_to_target_s / 3600,
        "bytes_total": record.accounting.bytes_total,
        "aggregations": len(record.aggregation_times) - 1,
        "final_accuracy": acc[-1] if acc else None,
        "best_accuracy": max(acc) if acc else None,
        "seed": seed,
        "agg_interval_p50_s": float(np.percentile(intervals, 50)) if len(intervals) else None,
        "agg_interval_p95_s": float(np.percentile(intervals, 95)) if len(intervals) else None,
        "stop_reason": record.stop_reason,
        "end_time_s": record.end_time_s,
        "host_seconds": record.host_seconds,
        "events": record.events_processed,
        "host_ms_per_event": 1000 * record.host_seconds / max(record.events_processed, 1),
        "cohort": batches,
    }
    out.update(record.accounting.summary())
    return out


def write_results(out_dir: str | Path, config: dict, record: RunRecord, summary: dict, plot: bool = True) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))
    with open(out / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(METRIC_COLUMNS)
        for c in record.checkpoints:
            d = dataclasses.asdict(c)
            w.writerow([d["time_s"], d["time_s"] / 3600, d["version"], d["accuracy"], d["loss"], d["bytes_total"],
                        d["staleness_mean"], d["interval_s"]])
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    a = record.accounting
    (out / "distributions.json").write_text(json.dumps({
        "staleness": a.staleness, "agg_weights": a.agg_weights, "utility_age": a.utility_age,
        "aggregation_times_s": record.aggregation_times}))
    if plot:
        plot_accuracy(record, out / "accuracy.png", title=config.get("scenario", {}).get("strategy", ""),
                      target=config.get("scenario", {}).get("target_accuracy"))
    return out


def plot_accuracy(record: RunRecord, path: Path, title: str = "", target: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    hours = [c.time_s / 3600 for c in record.checkpoints]
    ax.plot(hours, [c.accuracy for c in record.checkpoints], lw=1.2)
    if target:
        ax.axhline(target, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("virtual hours")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
