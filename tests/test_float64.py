"""``JAX_ENABLE_X64=1`` runs: every scan carry and reduction keeps its dtype when defaults widen to 64 bits."""

import json
import os
import subprocess
import sys


def test_tiny_run_with_x64_enabled(tmp_path):
    env = {**os.environ, "JAX_ENABLE_X64": "1"}
    cmd = [sys.executable, "-m", "felix_jax.cli", "run", "--preset", "tiny", "--set", "max_aggregations=3",
           "--quiet", "--out", str(tmp_path / "run")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "max_aggregations" and summary["aggregations"] == 3
    assert 0.0 <= summary["final_accuracy"] <= 1.0
