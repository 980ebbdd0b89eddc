"""``JAX_ENABLE_X64=1`` runs: every scan carry and reduction keeps its dtype when defaults widen to 64 bits."""

import json
import os
import subprocess
import sys

import pytest


# slow tier: the default tier's test_cli_probes.py::test_runs_in_float64 runs the same preset through the same
# command under JAX_ENABLE_X64=1 (two aggregations); this one takes three and checks the accuracy's range
@pytest.mark.slow
def test_tiny_run_with_x64_enabled(tmp_path):
    env = {**os.environ, "JAX_ENABLE_X64": "1"}
    cmd = [sys.executable, "-m", "felix_jax.cli", "run", "--preset", "tiny", "--set", "max_aggregations=3",
           "--quiet", "--out", str(tmp_path / "run")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "max_aggregations" and summary["aggregations"] == 3
    assert 0.0 <= summary["final_accuracy"] <= 1.0
