"""The clients' split on record: every run writes how its training data was divided.

- ``partition.csv``: a row per client: ``client``, ``samples``, ``repaired`` (1 where the
  ``min_samples`` repair gave it samples), ``top_class_share`` (its largest class over its samples)
  and ``label_0 ... label_{K-1}`` (its samples of each class);
- ``partition.json``: how it was drawn (``method``), the data set's size and classes, the repaired
  clients and the summary (:func:`split_summary`: min / median / mean / max samples per client, the
  mean top-class share over clients holding samples, clients with one sample);
- ``partition.png`` (with the run's figures): samples per client, largest first, and each client's
  label shares in the same order.

A pool partition's clients draw with replacement, so their sizes may sum past the data set's.
Past :data:`DETAIL_LIMIT` clients (a fleet of millions) the per-client label counts are not kept:
the summary is computed over every client in chunks, the sizes go to ``partition.npz``
(``samples``, ``repaired``) instead of the CSV, and the figure draws the sizes only.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

SPLIT_JSON = "partition.json"
SPLIT_CSV = "partition.csv"
SPLIT_FIGURE = "partition.png"
SPLIT_NPZ = "partition.npz"
SPLIT_FILES = (SPLIT_CSV, SPLIT_JSON, SPLIT_FIGURE, SPLIT_NPZ)
DETAIL_LIMIT = 100_000  # clients up to which the label counts per client are kept and written (CSV)
_CHUNK = 1 << 16  # clients per chunk of the summary of a larger fleet


def split_summary(counts: np.ndarray, label_counts: np.ndarray | None, repaired,
                  top_share_mean: float | None = None) -> dict:
    """The summary statistics of a split of ``counts`` samples per client, ``label_counts``
    ``(clients, classes)``; the top-class share is averaged over the clients holding samples
    (``top_share_mean``: that mean computed elsewhere, for a fleet whose label counts are not kept)."""
    counts = np.asarray(counts, np.int64)
    if label_counts is not None:
        held = counts > 0
        top = label_counts.max(axis=1)[held] / counts[held] if held.any() else np.zeros(0)
        top_share_mean = float(top.mean()) if top.size else None
    return {"num_clients": int(counts.size), "total": int(counts.sum()), "min": int(counts.min()),
            "median": float(np.median(counts)), "mean": float(counts.mean()), "max": int(counts.max()),
            "mean_top_class_share": top_share_mean,
            "clients_with_one_sample": int((counts == 1).sum()), "repaired_clients": len(repaired)}


def _top_share_mean(partition, labels: np.ndarray, num_classes: int) -> float | None:
    """The mean top-class share over the clients holding samples, in chunks of clients (no
    ``(clients, classes)`` table of the whole fleet)."""
    labels = np.asarray(labels).astype(np.int64).ravel()
    total, held = 0.0, 0
    for lo in range(0, partition.num_clients, _CHUNK):
        table = partition.index_table[lo:lo + _CHUNK]
        counts = partition.counts[lo:lo + _CHUNK].astype(np.int64)
        mask = np.arange(table.shape[1])[None, :] < counts[:, None]
        rows = np.nonzero(mask)[0]
        hist = np.bincount(rows * num_classes + labels[table[mask]],
                           minlength=counts.size * num_classes).reshape(counts.size, num_classes)
        has = counts > 0
        total += float((hist.max(axis=1)[has] / counts[has]).sum())
        held += int(has.sum())
    return total / held if held else None


class Split:
    """A run's split: samples and label counts per client, the repaired clients, the summary."""

    def __init__(self, counts, label_counts, repaired=(), method: str = "", num_samples: int | None = None,
                 num_classes: int | None = None, top_share_mean: float | None = None):
        self.counts = np.asarray(counts, np.int64)
        self.label_counts = None if label_counts is None else np.asarray(label_counts, np.int64)
        self.num_classes = self.label_counts.shape[1] if self.label_counts is not None else int(num_classes or 0)
        self.repaired = tuple(int(c) for c in repaired)
        self.method = method
        self.num_samples = int(self.counts.sum()) if num_samples is None else int(num_samples)
        self.summary = split_summary(self.counts, self.label_counts, self.repaired, top_share_mean)

    @classmethod
    def of(cls, partition, labels: np.ndarray, num_classes: int) -> "Split":
        if partition.num_clients > DETAIL_LIMIT:  # a fleet of millions: the summary over all, no table
            return cls(partition.counts, None, partition.repaired, partition.method, partition.num_samples,
                       num_classes, _top_share_mean(partition, labels, num_classes))
        return cls(partition.counts, partition.label_histogram(labels, num_classes), partition.repaired,
                   partition.method, partition.num_samples)

    def top_class_share(self) -> np.ndarray:
        return np.where(self.counts > 0, self.label_counts.max(axis=1) / np.maximum(self.counts, 1), 0.0)


def write_split(out: str | Path, split: Split, plot: bool = True, title: str = "") -> list[Path]:
    """``partition.csv`` (``partition.npz`` past :data:`DETAIL_LIMIT` clients), ``partition.json`` and
    (``plot``) ``partition.png`` in ``out``."""
    out = Path(out)
    k = split.num_classes
    per_client = SPLIT_CSV if split.label_counts is not None else SPLIT_NPZ
    (out / SPLIT_JSON).write_text(json.dumps({
        "method": split.method, "num_samples": split.num_samples, "num_classes": k,
        "summary": split.summary, "repaired_clients": list(split.repaired), "per_client": per_client}, indent=2))
    written = [out / per_client, out / SPLIT_JSON]
    if split.label_counts is None:
        np.savez(out / SPLIT_NPZ, samples=split.counts.astype(np.int32),
                 repaired=np.asarray(split.repaired, np.int32))
    else:
        _write_csv(out / SPLIT_CSV, split)
    if plot:
        from .figures.split import split_figure

        written.append(split_figure(split.counts, split.label_counts, split.summary, out / SPLIT_FIGURE, title))
    return written


def _write_csv(path: Path, split: Split) -> None:
    k = split.num_classes
    repaired = np.zeros(split.counts.size, np.int64)
    repaired[list(split.repaired)] = 1
    share = split.top_class_share()
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["client", "samples", "repaired", "top_class_share", *(f"label_{j}" for j in range(k))])
        for i in range(split.counts.size):
            w.writerow([i, int(split.counts[i]), int(repaired[i]), f"{share[i]:.6g}",
                        *(int(v) for v in split.label_counts[i])])


def read_split(run_dir: str | Path) -> dict | None:
    """A run folder's ``partition.json`` (None for a folder without one: a run before the file existed)."""
    path = Path(run_dir) / SPLIT_JSON
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def split_text(summary: dict) -> str:
    """One line of a split's summary, e.g. ``samples per client 1 / 4.0 / 28 (min / median / max), mean
    top-class share 0.93, 2 repaired``."""
    share = summary.get("mean_top_class_share")
    return (f"samples per client {summary['min']} / {summary['median']:g} / {summary['max']} (min / median / max), "
            f"mean top-class share {'-' if share is None else f'{share:.2f}'}, "
            f"{summary['clients_with_one_sample']} of {summary['num_clients']} with one sample, "
            f"{summary['repaired_clients']} repaired")


SPLIT_COLUMNS = ("run_dir", "strategy", "availability", "seed", "num_clients", "total", "min", "median", "mean",
                 "max", "mean_top_class_share", "clients_with_one_sample", "repaired_clients", "method")


def split_rows(rows: list[dict]) -> list[dict]:
    """A comparison's split per cell: each run row (``run_dir``, ``strategy``, ...) with its run folder's
    partition summary (runs without a ``partition.json`` are left out)."""
    out = []
    for r in rows:
        rec = read_split(r["run_dir"])
        if rec is not None:
            out.append({"run_dir": r["run_dir"], "strategy": r["strategy"], "availability": r["availability"],
                        "seed": r["seed"], **rec["summary"], "method": rec.get("method", "")})
    return out


def write_split_csv(rows: list[dict], out: Path) -> Path | None:
    """``split.csv`` in a comparison folder: :func:`split_rows`, one line per cell (None: no cell has one)."""
    cells = split_rows(rows)
    if not cells:
        return None
    with open(Path(out) / "split.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(SPLIT_COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(cells)
    return Path(out) / "split.csv"
