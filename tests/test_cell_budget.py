"""``--cell-budget-s``: a cell cut by its budget counts as finished (stop reason wall_budget): a rerun
of the matrix keeps it, as the README says, and ``felix-jax run --resume`` on its folder continues it
from the snapshot the cut left."""

from __future__ import annotations

import json
import time

from felix_jax.cli import main
from felix_jax.experiment import get_preset
from felix_jax.experiment.matrix import run_matrix


def test_a_budget_cut_cell_is_kept_and_resumes_with_run_resume(tmp_path, monkeypatch):
    from felix_jax.fleet.simulator import FleetSimulator

    original = FleetSimulator._checkpoint

    def slow(self):
        original(self)
        time.sleep(0.2)  # the budget runs out at the first checkpoint, on any machine

    base = get_preset("tiny").with_overrides({"max_aggregations": "6", "target_accuracy": "none",
                                              "num_train": "300"})
    out = tmp_path / "cmp"
    monkeypatch.setattr(FleetSimulator, "_checkpoint", slow)
    (cut,) = run_matrix(base, ["fedbuff"], ["avail100"], [0], out, progress=False, log=lambda s: None,
                        plot=False, cell_budget_s=0.1)
    monkeypatch.setattr(FleetSimulator, "_checkpoint", original)
    assert cut["stop_reason"] == "wall_budget" and cut["aggregations"] < 6
    run_dir = tmp_path / "cmp" / "runs" / "fedbuff-avail100-seed0"
    assert (run_dir / "snapshot" / "LATEST").is_file()
    said = []
    (kept,) = run_matrix(base, ["fedbuff"], ["avail100"], [0], out, progress=False, log=said.append, plot=False)
    assert kept["stop_reason"] == "wall_budget" and kept.get("_kept") and any("kept" in s for s in said)
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["aggregations"] == 6
    (done,) = run_matrix(base, ["fedbuff"], ["avail100"], [0], out, progress=False, log=lambda s: None, plot=False)
    assert done["stop_reason"] == "max_aggregations" and done["aggregations"] == 6
