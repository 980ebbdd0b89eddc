"""The real-data presets build and run (slow: decode CIFAR-10 / compute log-mels once, cached after)."""

import os

import pytest

from felix_jax.experiment import get_preset
from felix_jax.experiment.runner import run
from tests.conftest import shared_data_dir

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def data_env(monkeypatch):
    root = shared_data_dir()
    if root is None:
        pytest.skip("no offline data folder (set FELIX_JAX_DATA)")
    monkeypatch.setenv("FELIX_JAX_DATA", str(root))


@pytest.mark.parametrize("preset,strategy,regime", [
    ("cifar10-small", "felix", "mobiperf"),
    ("cifar10-small", "refl", "avail50"),
    ("speech-small", "oort-async-oracle", "avail90"),
])
def test_real_data_preset_runs(preset, strategy, regime):
    sc = get_preset(preset).with_overrides({"strategy": strategy, "availability": regime, "max_aggregations": "3",
                                            "target_accuracy": "none"})
    s = run(sc, None).summary
    assert s["aggregations"] == 3 and s["bytes_total"] > 0
    assert os.environ["FELIX_JAX_DATA"]
