"""A run records the files it reads; compare, --resume and run --config notice when one changed."""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import numpy as np
import pytest

from felix_jax.cli import main
from felix_jax.experiment import Scenario, get_preset
from felix_jax.experiment.inputs import (InputsChanged, changed_in_folder, changed_inputs, fingerprint,
                                         fingerprint_inputs, input_files, warn_changed_inputs)
from felix_jax.experiment.matrix import finished_summary

TRACE = "client,time_s,state\n1,0,AVL_TRAIN\n2,0,AVL_TRAIN\n3,0,AVL_TRAIN\n"
PLUGIN = textwrap.dedent('''
    import flax.linen as nn
    from felix_jax import plugins
    from felix_jax.models.base import make_model

    class Small(nn.Module):
        num_classes: int

        @nn.compact
        def __call__(self, x):
            return nn.Dense(self.num_classes)(nn.relu(nn.Dense(WIDTH)(x.reshape((x.shape[0], -1)))))

    @plugins.model("test-fingerprinted-mlp")
    def make(input_shape, num_classes):
        return make_model("test-fingerprinted-mlp", Small(num_classes), input_shape, num_classes)
''')


def _npz(path, seed=0, n=120):
    rng = np.random.default_rng(seed)
    np.savez(path, train_x=rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8), train_y=rng.integers(0, 4, n),
             test_x=rng.integers(0, 256, (20, 8, 8, 3), dtype=np.uint8), test_y=rng.integers(0, 4, 20))


def _later(path):
    """The file's modification time moved on (a touch), its content unchanged."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_a_fingerprint_by_hand(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"abc")
    fp = fingerprint(str(f))
    assert fp["size"] == 3 and fp["mtime_ns"] == os.stat(f).st_mtime_ns
    import hashlib

    assert fp["blake2b"] == hashlib.blake2b(b"abc", digest_size=16).hexdigest()
    record = {str(f): {"role": "trace", **fp}}
    assert changed_inputs(record) == []
    _later(f)  # same content, a new time: read, found equal
    assert changed_inputs(record) == []
    f.write_bytes(b"abd")  # same size, new content
    assert changed_inputs(record) == [f"trace {f} (content changed)"]
    f.unlink()
    assert changed_inputs(record) == [f"trace {f} (missing)"]
    assert changed_inputs(None) == [] and changed_inputs({str(f): {"role": "scenario", **fp}}) == []


def test_the_files_a_scenario_reads(tmp_path, monkeypatch):
    _npz(tmp_path / "d.npz")
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "p.csv").write_text("train_delay_s\n1\n2\n")
    (tmp_path / "m.py").write_text(PLUGIN.replace("WIDTH", "8").replace("fingerprinted", "listed"))
    (tmp_path / "s.json").write_text("{}")
    sc = get_preset("tiny").with_overrides({"dataset": str(tmp_path / "d.npz"), "availability": str(tmp_path / "t.csv"),
                                            "device_profile": str(tmp_path / "p.csv"),
                                            "plugins": str(tmp_path / "m.py")})
    got = input_files(sc, tmp_path / "s.json")
    assert got == {str((tmp_path / n).resolve()): role for n, role in (
        ("d.npz", "dataset"), ("t.csv", "trace"), ("p.csv", "device_profile"), ("m.py", "plugin"),
        ("s.json", "scenario"))}
    assert input_files(get_preset("tiny")) == {}  # embedded digits, a synthetic regime: nothing read
    monkeypatch.setenv("FELIX_JAX_DATA", str(tmp_path))
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "felix_reference_300clients.npz").write_bytes(b"x")
    ref = str((tmp_path / "traces" / "felix_reference_300clients.npz").resolve())
    assert input_files(get_preset("tiny").with_overrides({"availability": "mobiperf"})) == {ref: "trace"}


def test_compare_reruns_a_cell_whose_data_plugin_or_trace_changed(tmp_path):
    data, trace, plugin = tmp_path / "d.npz", tmp_path / "t.csv", tmp_path / "m.py"
    _npz(data)
    trace.write_text(TRACE)
    plugin.write_text(PLUGIN.replace("WIDTH", "16"))
    out = tmp_path / "cmp"
    argv = ["compare", "--scenario", "tiny", "--strategies", "fedbuff", "--availability", str(trace), "--set",
            f"dataset={data}", "--set", f"plugins={plugin}", "--set", "model=test-fingerprinted-mlp", "--set",
            "num_clients=6", "--set", "concurrency=2", "--set", "max_aggregations=2", "--set",
            "target_accuracy=none", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    run_dir = next((out / "runs").iterdir())
    config = json.loads((run_dir / "config.json").read_text())
    assert {rec["role"] for rec in config["inputs"].values()} == {"dataset", "trace", "plugin"}
    sc = Scenario.from_file(run_dir / "config.json")
    assert finished_summary(sc, run_dir) is not None  # nothing changed: kept
    for path, new in ((data, lambda: _npz(data, seed=1)), (plugin, lambda: plugin.write_text(PLUGIN.replace(
            "WIDTH", "4"))), (trace, lambda: trace.write_text(TRACE.replace("3,0,", "3,60,")))):
        saved = path.read_bytes()
        new()
        _later(path)
        assert finished_summary(sc, run_dir) is None, path  # not shown as current
        assert [c.split(" ")[1] for c in changed_in_folder(run_dir)] == [str(path.resolve())]
        path.write_bytes(saved)  # the same bytes again (a new time): current again
        assert finished_summary(sc, run_dir) is not None, path
    # end to end: the data set changes, the second compare runs the cell again
    first = json.loads((run_dir / "summary.json").read_text())
    _npz(data, seed=1)
    _later(data)
    log = []
    from felix_jax.experiment.matrix import run_matrix

    base = get_preset("tiny").with_overrides({"dataset": str(data), "plugins": str(plugin), "num_clients": "6",
                                              "model": "test-fingerprinted-mlp", "concurrency": "2",
                                              "max_aggregations": "2", "target_accuracy": "none"})
    rows = run_matrix(base, ["fedbuff"], [str(trace)], [0], out, progress=False, log=log.append, plot=False)
    assert not rows[0].get("_kept") and any("content changed" in line and "run again" in line for line in log), log
    second = json.loads((run_dir / "summary.json").read_text())
    assert changed_in_folder(run_dir) == []
    assert second["final_accuracy"] != first["final_accuracy"] or second != first


def test_resume_refuses_and_run_config_warns_when_an_input_changed(tmp_path, capsys):
    data = tmp_path / "d.npz"
    _npz(data)
    out = tmp_path / "r"
    sc = get_preset("tiny").with_overrides({"dataset": str(data), "num_clients": "6", "concurrency": "2"})
    (out / "snapshot").mkdir(parents=True)
    (out / "snapshot" / "LATEST").write_text("0")
    (out / "config.json").write_text(json.dumps({"scenario": sc.to_json(), "inputs": fingerprint_inputs(sc)}))
    _npz(data, seed=2)
    _later(data)
    from felix_jax.experiment.runner import run

    with pytest.raises(InputsChanged) as caught:
        run(sc, out, resume=True)
    assert str(caught.value) == (f"{out}: cannot resume: a file it reads changed since it ran: dataset "
                                 f"{data.resolve()} (content changed); rerun it with --overwrite, or give --out "
                                 "another folder")
    with pytest.raises(SystemExit) as cli:
        main(["run", "--resume", str(out), "--quiet"])
    assert str(cli.value).startswith("felix-jax run: ") and "cannot resume" in str(cli.value)
    assert warn_changed_inputs(out / "config.json") == [f"dataset {data.resolve()} (content changed)"]
    assert "warning:" in capsys.readouterr().err
    shutil.rmtree(out)


def test_a_run_a_plugin_stopped_may_have_its_plugin_fixed(tmp_path):
    plugin = tmp_path / "p.py"
    plugin.write_text("x = 1\n")
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    record = {str(plugin.resolve()): {"role": "plugin", **fingerprint(str(plugin.resolve()))}}
    (run_dir / "config.json").write_text(json.dumps({"inputs": record}))
    plugin.write_text("x = 2\n")
    _later(plugin)
    (run_dir / "summary.json").write_text(json.dumps({"stop_reason": "interrupted"}))
    assert changed_in_folder(run_dir) == [f"plugin {plugin.resolve()} (content changed)"]
    (run_dir / "summary.json").write_text(json.dumps({"stop_reason": "plugin_error"}))  # the fix is expected
    assert changed_in_folder(run_dir) == []
