"""The baselines reviewers ask for (issue 62): FedAvgM and FedAdagrad's server steps, q-FedAvg's
weights, each against hand-computed values; the named strategies, their fleet settings and a few
aggregations of each from the command line (FedProx itself: tests/test_fedprox.py)."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.experiment import STRATEGIES, get_preset
from felix_jax.experiment.resolution import fleet_config
from felix_jax.experiment.runner import build_simulator
from felix_jax.fleet.server_optimizer import make_server_optimizer, server_step
from felix_jax.policies import make_aggregator
from felix_jax.policies.aggregators import BufferInfo
from felix_jax.policies.aggregators.base import weighted_mean_delta
from tests.conftest import CompileCount

W0 = {"w": jnp.array([1.0, 2.0])}
DELTA1 = {"w": jnp.array([0.25, -0.2])}
DELTA2 = {"w": jnp.array([0.1, 0.1])}


def _two_steps(opt):
    step = jax.jit(server_step, static_argnums=0)
    w1, state = step(opt, W0, opt.init(W0), DELTA1)
    w2, _ = step(opt, w1, state, DELTA2)
    return np.asarray(w1["w"]), np.asarray(w2["w"])


def test_fedavgm_steps_by_hand():
    """Hsu et al. 2019: v <- beta v + Delta; w <- w + eta v (beta 0.9, eta 0.5)."""
    w1, w2 = _two_steps(make_server_optimizer("momentum", 0.5, 0.9))
    v1 = np.array([0.25, -0.2])
    np.testing.assert_allclose(w1, [1.0, 2.0] + 0.5 * v1, rtol=1e-6)  # [1.125, 1.9]
    v2 = 0.9 * v1 + np.array([0.1, 0.1])  # [0.325, -0.08]
    np.testing.assert_allclose(w2, w1 + 0.5 * v2, rtol=1e-6)  # [1.2875, 1.86]
    np.testing.assert_allclose(w2, [1.2875, 1.86], rtol=1e-6)


def test_fedadagrad_two_steps_by_hand():
    """Reddi et al., ICLR 2021, Alg. 2 (FedAdagrad): m <- b1 m + (1 - b1) Delta; v <- v + Delta^2;
    w <- w + eta m / (sqrt(v) + tau), from m = 0, v = tau^2 (b1 0.9, tau 0.1, eta 0.5)."""
    w1, w2 = _two_steps(make_server_optimizer("adagrad", 0.5, 0.9, 0.1))
    d1, d2 = np.array([0.25, -0.2]), np.array([0.1, 0.1])
    m1, v1 = 0.1 * d1, 0.01 + d1 ** 2  # [0.025, -0.02], [0.0725, 0.05]
    np.testing.assert_allclose(w1, [1.0, 2.0] + 0.5 * m1 / (np.sqrt(v1) + 0.1), rtol=1e-6)  # [1.033852, 1.969098]
    m2, v2 = 0.9 * m1 + 0.1 * d2, v1 + d2 ** 2  # [0.0325, -0.008], [0.0825, 0.06]
    np.testing.assert_allclose(w2, w1 + 0.5 * m2 / (np.sqrt(v2) + 0.1), rtol=1e-6)
    np.testing.assert_allclose(w2, [1.075817, 1.957502], rtol=1e-5)


def test_server_optimizers_compile_once_and_keep_adam_as_before():
    """A second step of each compiles nothing; adam at the defaults is the transformation it was (b1 0.9,
    b2 0.99, eps 1e-3): its first step by hand, -lr g / (|g| + eps) with g = -Delta."""
    for name in ("momentum", "adagrad"):
        opt = make_server_optimizer(name, 0.1)
        p, s = server_step(opt, W0, opt.init(W0), DELTA1)
        with CompileCount() as compiles:
            server_step(opt, p, s, DELTA2)
        assert compiles.count == 0, name
    adam = make_server_optimizer("adam", 0.1)
    new, _ = server_step(adam, W0, adam.init(W0), DELTA1)
    np.testing.assert_allclose(np.asarray(new["w"]), [1.0 + 0.1 * 0.25 / (0.25 + 1e-3), 2.0 - 0.1 * 0.2 / (0.2 + 1e-3)],
                               rtol=1e-5)


def _qfedavg_update(losses, deltas, q, lipschitz):
    """The server's update for two clients, as the simulator computes it: the aggregator's weights over
    the accepted rows, the weighted sum / K, the sgd(1) server step from w = 0."""
    stacked = {"w": jnp.asarray(deltas, jnp.float32)}
    norms = np.linalg.norm(np.asarray(deltas), axis=1)
    info = BufferInfo(np.zeros(2, np.int64), np.array([10.0, 90.0]), np.zeros(2), np.zeros(2), norms,
                      start_loss=np.asarray(losses, np.float64))
    agg = make_aggregator("qfedavg", q=q, lipschitz=lipschitz)
    weights = agg.weights(info)
    mean = weighted_mean_delta(stacked, jnp.asarray(weights, jnp.float32), normalize=agg.normalize)
    opt = make_server_optimizer("sgd", agg.server_lr)
    new, _ = server_step(opt, {"w": jnp.zeros(2)}, opt.init({"w": jnp.zeros(2)}), mean)
    return np.asarray(new["w"])


def test_qfedavg_update_on_two_hand_made_clients():
    """Li et al., ICLR 2020, Alg. 2 with w^t = 0, client local models w_1 = [1, 0] (loss 1) and
    w_2 = [0, 0.5] (loss 4), q = 1, L = 2:
    Delta w_k = L (w^t - w_k): [-2, 0], [0, -1];  Delta_k = F_k^q Delta w_k: [-2, 0], [0, -4];
    h_k = q F_k^{q-1} ||Delta w_k||^2 + L F_k^q: 4 + 2 = 6, 1 + 8 = 9;
    w^{t+1} = w^t - sum Delta_k / sum h_k = [2, 4] / 15."""
    got = _qfedavg_update([1.0, 4.0], [[1.0, 0.0], [0.0, 0.5]], q=1.0, lipschitz=2.0)
    np.testing.assert_allclose(got, [2 / 15, 4 / 15], rtol=1e-5)
    # the paper's equations written out for any q: the same
    q, lip, f = 2.5, 3.0, np.array([0.7, 1.9]) + 1e-10
    local = np.array([[0.3, -0.1], [-0.2, 0.4]])
    dw = lip * (0.0 - local)
    big_delta = f[:, None] ** q * dw
    h = q * f ** (q - 1) * (dw ** 2).sum(1) + lip * f ** q
    np.testing.assert_allclose(_qfedavg_update(f - 1e-10, local, q, lip), 0.0 - big_delta.sum(0) / h.sum(), rtol=1e-5)
    # q = 0: h_k = L, the plain mean of the local models whatever the losses (FedAvg's objective, uniform p_k)
    np.testing.assert_allclose(_qfedavg_update([1.0, 4.0], local, 0.0, 2.0), local.mean(0), rtol=1e-5)


# ---------------------------------------------------------------- the named strategies
BASELINES = {"fedprox": ("sync", "fedprox", "Li et al., MLSys 2020"),
             "fedprox-async": ("async", "fedbuff", "Li et al., MLSys 2020"),
             "fedavgm": ("sync", "fedavg", "Hsu et al., 2019"),
             "fedadagrad": ("sync", "fedavg", "Reddi et al., ICLR 2021"),
             "qfedavg": ("sync", "qfedavg", "Li et al., ICLR 2020")}


def test_each_baseline_is_a_named_strategy_with_its_mode_knowledge_and_paper(capsys):
    from felix_jax.cli import main

    assert main(["run", "--list"]) == 0
    out = capsys.readouterr().out
    for name, (mode, aggregator, paper) in BASELINES.items():
        st = STRATEGIES[name]
        assert (st.mode, st.knowledge.value, st.aggregator) == (mode, "none", aggregator)
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        assert f" {mode} " in line and " none " in line and paper in line, line


TINY = get_preset("tiny")


def test_fleet_settings_come_from_the_strategy_unless_the_scenario_sets_them():
    cfg = lambda **o: fleet_config(sc := TINY.with_overrides(o), sc.resolve_strategy().strategy)  # noqa: E731
    prox = cfg(strategy="fedprox")
    assert (prox.interruption.value, prox.prox_mu, prox.server_optimizer) == ("partial", 0.01, "sgd")
    assert cfg(strategy="fedprox-async").interruption.value == "partial"
    assert (cfg(strategy="fedprox", interruption="resume", prox_mu="0.1").interruption.value,
            cfg(strategy="fedprox", prox_mu="0.1").prox_mu) == ("resume", 0.1)
    assert cfg(strategy="fedavgm").server_optimizer == "momentum"
    assert cfg(strategy="fedadagrad").server_optimizer == "adagrad"
    assert cfg(strategy="fedavgm", server_optimizer="sgd").server_optimizer == "sgd"
    plain = cfg(strategy="fedavg")
    assert (plain.interruption.value, plain.prox_mu, plain.server_optimizer) == ("resume", 0.0, "sgd")
    # q-FedAvg's L is 1 / the clients' step size unless set
    assert TINY.with_overrides({"strategy": "qfedavg"}).resolve_strategy().aggregator.lipschitz == 1 / 0.1
    assert TINY.with_overrides({"strategy": "qfedavg", "aggregator.lipschitz": "4"}).resolve_strategy() \
        .aggregator.lipschitz == 4.0


def test_qfedavg_swaps_onto_felixs_selectors():
    resolved = TINY.with_overrides({"strategy": "felix", "aggregator": "qfedavg"}).resolve_strategy()
    st = resolved.strategy
    assert (st.label, st.mode, st.eval_selector) == ("felix[aggregator=qfedavg]", "async", "tierselect-eval")
    assert resolved.aggregator.lipschitz == 1 / TINY.learning_rate and resolved.aggregator.q == 1.0


@pytest.mark.parametrize("args", [["strategy=fedprox"], ["strategy=fedprox-async"], ["strategy=fedavgm"],
                                  ["strategy=fedadagrad"], ["strategy=qfedavg"],
                                  ["strategy=felix", "aggregator.name=qfedavg"]])
def test_three_aggregations_of_each_from_the_command_line(tmp_path, args):
    from felix_jax.cli import main

    sets = [a for kv in args + ["max_aggregations=3", "target_accuracy=none"] for a in ("--set", kv)]
    assert main(["run", "--preset", "tiny", "--quiet", "--out", str(tmp_path / "run"), *sets]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["aggregations"] == 3 and summary["stop_reason"] == "max_aggregations"
    assert math.isfinite(summary["final_accuracy"])
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert {"prox_mu", "server_momentum", "server_tau", "interruption"} <= set(config["fleet"])


@pytest.mark.parametrize("strategy", ["fedprox", "fedadagrad"])
def test_killed_and_resumed_run_equals_uninterrupted(strategy, tmp_path):
    """FedProx's partial updates pending at the snapshot run the steps they finished after the resume
    (the engine's step limits come back from the tasks); FedAdagrad's server state is restored."""
    from tests.test_snapshot import assert_same_run, killed_and_resumed, scenario

    sc = scenario(strategy, max_aggregations="6")
    uninterrupted = build_simulator(sc).run()
    if strategy == "fedprox":
        assert uninterrupted.accounting.partial_updates > 0
    assert_same_run(uninterrupted, killed_and_resumed(sc, tmp_path / "snapshot", kill_at_version=4, every=2))
