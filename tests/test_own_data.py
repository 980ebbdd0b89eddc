"""A user's own NPZ on the first try: the default preset fitted to the data (a model that takes its
inputs, the file's name), said in one line; a chosen preset or model stands; partition=pool says
what it needs where the data folder is missing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from felix_jax.cli import main
from felix_jax.experiment import get_preset
from felix_jax.experiment.own_data import npz_input_shape, own_data_defaults


def write_npz(path, shape, classes=4, n=240):
    rng = np.random.default_rng(0)
    np.savez(path, train_x=rng.normal(size=(n, *shape)).astype(np.float32), train_y=rng.integers(0, classes, n),
             test_x=rng.normal(size=(60, *shape)).astype(np.float32), test_y=rng.integers(0, classes, 60))
    return str(path)


def test_the_models_fitted_to_the_inputs(tmp_path):
    base = get_preset("quickstart")
    assert base.model == "cifar_cnn"
    cases = {(16,): "mlp", (32, 32, 3): "cifar_cnn", (8, 8, 1): "mlp", (10, 20): "mlp"}
    for shape, model in cases.items():
        path = write_npz(tmp_path / f"d{len(shape)}_{shape[0]}.npz", shape)
        assert npz_input_shape(path) == shape
        fitted, line = own_data_defaults(base.with_overrides({"dataset": path}), {"dataset": path}, chosen=False)
        assert fitted.model == model and fitted.name == f"d{len(shape)}_{shape[0]}", shape
        assert line.startswith(f"felix-jax run: your data set {path}: model={model} (fits its ")
        assert "target_accuracy=0.8" in line
    path = write_npz(tmp_path / "flat.npz", (16,))
    sets = {"dataset": path, "model": "cifar_cnn_tiny"}
    assert own_data_defaults(base.with_overrides(sets), sets, chosen=False)[0].model == "cifar_cnn_tiny"  # asked for
    assert own_data_defaults(base.with_overrides({"dataset": path}), {"dataset": path}, chosen=True)[1] is None
    assert own_data_defaults(base, {"dataset": "digits"}, chosen=False) == (base, None)  # a built-in data set


def test_the_readmes_own_data_line_runs_on_flat_inputs(tmp_path, capsys):
    path = write_npz(tmp_path / "my_data.npz", (16,))
    out = tmp_path / "run"
    assert main(["run", "--set", f"dataset={path}", "--set", "max_aggregations=1", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"felix-jax run: your data set {path}: model=mlp (fits its flat inputs (16,)" in printed
    scenario = json.loads((out / "config.json").read_text())["scenario"]
    assert (scenario["model"], scenario["name"]) == ("mlp", "my_data")
    assert (out / "partition.json").is_file()


def test_pool_without_the_data_folder_runs_from_the_shipped_sizes(tmp_path, monkeypatch):
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
    monkeypatch.setenv("FELIX_JAX_TEST_NO_SHARED", "1")
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))
    assert main(["run", "--preset", "tiny", "--set", "partition=pool", "--set", "max_aggregations=1", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0
    inputs = json.loads((tmp_path / "run" / "config.json").read_text())["inputs"]
    assert any(path.endswith("traces/reference/felix_reference_300clients.npz") for path in inputs)