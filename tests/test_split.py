"""The split on record: partition.csv / partition.json / partition.png in every run folder, their
statistics against hand-computed values, the repaired clients of a Dirichlet draw, and a comparison's
split.csv (a line per cell)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from felix_jax.cli import main
from felix_jax.data.partition import dirichlet_partition, partition_from_assignment
from felix_jax.experiment.split import Split, split_summary, split_text, write_split


def test_summary_by_hand(tmp_path):
    # clients 0: labels 0, 0 | 1: labels 0, 1, 1 | 2: label 2
    part = partition_from_assignment(np.array([0, 0, 1, 1, 1, 2]), 3, method="by hand")
    split = Split.of(part, np.array([0, 0, 0, 1, 1, 2]), 3)
    np.testing.assert_array_equal(split.label_counts, [[2, 0, 0], [1, 2, 0], [0, 0, 1]])
    s = split.summary
    assert (s["num_clients"], s["total"], s["min"], s["median"], s["max"]) == (3, 6, 1, 2.0, 3)
    assert s["mean"] == pytest.approx(2.0)
    assert s["mean_top_class_share"] == pytest.approx((1 + 2 / 3 + 1) / 3)  # 0.8889
    assert (s["clients_with_one_sample"], s["repaired_clients"]) == (1, 0)
    assert split_text(s) == ("samples per client 1 / 2 / 3 (min / median / max), mean top-class share 0.89, "
                             "1 of 3 with one sample, 0 repaired")
    write_split(tmp_path, split, plot=True, title="t")
    rows = list(csv.DictReader(open(tmp_path / "partition.csv")))
    assert [r["samples"] for r in rows] == ["2", "3", "1"]
    assert [r["label_1"] for r in rows] == ["0", "2", "0"]
    assert [float(r["top_class_share"]) for r in rows] == pytest.approx([1, 2 / 3, 1], rel=1e-5)
    rec = json.loads((tmp_path / "partition.json").read_text())
    assert rec["method"] == "by hand" and rec["num_samples"] == 6 and rec["num_classes"] == 3
    assert rec["summary"] == s and (tmp_path / "partition.png").stat().st_size > 0


def test_an_empty_client_counts_in_sizes_not_in_the_top_class_share():
    s = split_summary(np.array([0, 4]), np.array([[0, 0], [3, 1]]), repaired=())
    assert (s["min"], s["median"], s["max"]) == (0, 2.0, 4)
    assert s["mean_top_class_share"] == pytest.approx(0.75)


def test_dirichlet_records_the_clients_it_repaired():
    labels = np.repeat(np.arange(2), 10)
    raw = dirichlet_partition(labels, 8, alpha=0.01, seed=3, min_samples=0)  # the same draw, unrepaired
    fixed = dirichlet_partition(labels, 8, alpha=0.01, seed=3, min_samples=1)
    empty = tuple(int(c) for c in np.flatnonzero(raw.counts == 0))
    assert empty and fixed.repaired == empty and raw.repaired == ()
    assert fixed.counts.min() == 1 and Split.of(fixed, labels, 2).summary["repaired_clients"] == len(empty)


def test_every_run_folder_holds_its_split(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--preset", "tiny", "--set", "max_aggregations=1", "--set", "alpha=0.05",
                 "--set", "num_train=300", "--quiet", "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "partition.csv")))
    assert len(rows) == 12
    counts = np.array([int(r["samples"]) for r in rows])
    labels = np.array([[int(r[f"label_{j}"]) for j in range(10)] for r in rows])
    assert counts.sum() == 300 and (labels.sum(axis=1) == counts).all()
    rec = json.loads((out / "partition.json").read_text())
    assert rec["summary"] == split_summary(counts, labels, rec["repaired_clients"])
    assert rec["method"].startswith("dirichlet(alpha=0.05")
    assert (out / "partition.png").is_file()


def test_a_fleet_past_the_detail_limit_keeps_the_summary_and_writes_sizes_only(tmp_path, monkeypatch):
    import felix_jax.experiment.split as split_module

    labels = np.repeat(np.arange(3), 20)
    part = dirichlet_partition(labels, 9, alpha=0.3, seed=1)
    full = Split.of(part, labels, 3)
    monkeypatch.setattr(split_module, "DETAIL_LIMIT", 4)
    monkeypatch.setattr(split_module, "_CHUNK", 4)  # three chunks: 4, 4, 1 clients
    big = Split.of(part, labels, 3)
    assert big.label_counts is None and big.summary == pytest.approx(full.summary)
    write_split(tmp_path, big, plot=True)
    assert not (tmp_path / "partition.csv").exists() and (tmp_path / "partition.png").is_file()
    with np.load(tmp_path / "partition.npz") as z:
        np.testing.assert_array_equal(z["samples"], part.counts)
    assert json.loads((tmp_path / "partition.json").read_text())["per_client"] == "partition.npz"
