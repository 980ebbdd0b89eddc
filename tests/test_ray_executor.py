"""The Ray executor (the optional ``ray`` extra): batches as Ray tasks on a local instance started
here give the local path's results, in the same folder layout, and a half-finished sweep resumes."""

import json

import pytest

ray = pytest.importorskip("ray")

from felix_jax.experiment import get_preset  # noqa: E402
from felix_jax.experiment.compare import run_matrix  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


# the default tier: one strategy over two seeds, 4 aggregations a cell; the slow tier: two strategies
# over two seeds, the preset's whole runs
@pytest.mark.parametrize("strategies,overrides", [
    (["felix"], {"max_aggregations": "4"}),
    pytest.param(["felix", "oort"], {}, marks=pytest.mark.slow)], ids=["one-strategy-4-aggregations", "full"])
def test_ray_batches_equal_the_local_path(local_ray, tmp_path, strategies, overrides):
    base = get_preset("tiny").with_overrides(overrides)
    cells = dict(strategies=strategies, regimes=["avail50"], seeds=[0, 1])
    local = run_matrix(base, **cells, out=tmp_path / "local", progress=False, plot=False, batch=2)
    # one cell finished earlier: kept, not rerun (a half-finished sweep)
    first = run_matrix(base, ["felix"], ["avail50"], [0], tmp_path / "ray", progress=False, plot=False)
    stamp = (tmp_path / "ray" / "runs" / "felix-avail50-seed0" / "summary.json").stat().st_mtime_ns
    remote = run_matrix(base, **cells, out=tmp_path / "ray", progress=False, plot=False, batch=2, executor="ray")
    assert len(first) == 1 and len(remote) == len(local) == 2 * len(strategies)
    assert (tmp_path / "ray" / "runs" / "felix-avail50-seed0" / "summary.json").stat().st_mtime_ns == stamp
    for a, b in zip(local, remote):
        assert (a["strategy"], a["seed"]) == (b["strategy"], b["seed"])
        name = a["run_dir"].split("/runs/")[1]
        assert (tmp_path / "ray" / "runs" / name / "metrics.csv").read_bytes() == \
            (tmp_path / "local" / "runs" / name / "metrics.csv").read_bytes(), name
        assert a["time_to_target_s"] == b["time_to_target_s"] and a["bytes_total"] == b["bytes_total"]
    ran = [f"{s}-avail50-seed{k}" for s in strategies for k in (0, 1)][1:]  # all but the kept cell
    done = [json.loads((tmp_path / "ray" / "runs" / n / "summary.json").read_text()) for n in ran]
    assert all(d["batch"]["experiments"] == 2 or d["batch"]["experiments"] == 1 for d in done)
