"""Aggregator weights and server steps against hand-computed values."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.policies.aggregators import (AGGREGATORS, BufferInfo, DeltaBound, FedAsyncConfig, FedBuffConfig,
                                            REFLBufferInfo, REFLSAAConfig, StalenessFunction, TierFuseConfig,
                                            UtilitySignal, apply_weighted_deltas, clip_or_normalize_deltas,
                                            fedbuff_weight, make_aggregator, make_fedasync, make_fedavg,
                                            make_fedbuff, make_refl_saa, make_tierfuse, relative_change,
                                            update_norms)
from felix_jax.policies.aggregators import deltas as deltas_mod
from felix_jax.policies.aggregators.fedasync import hinge_weight, polynomial_weight
from felix_jax.policies.aggregators.refl_saa import saa_weights
from felix_jax.policies.aggregators.tierfuse import alpha_staleness, beta_utility, tierfuse_weight


def info(staleness, utility=None, num_samples=None, loss_mean=None):
    k = len(staleness)
    ones = np.ones(k)
    return BufferInfo(np.asarray(staleness), ones if num_samples is None else np.asarray(num_samples, float),
                      ones if utility is None else np.asarray(utility, float),
                      ones if loss_mean is None else np.asarray(loss_mean, float), ones)


# ---- weights ---------------------------------------------------------------------------------------------

def test_fedavg_weights_are_sample_counts_and_normalised():
    agg = make_fedavg()
    np.testing.assert_allclose(agg.weights(info([0, 0, 0], num_samples=[10, 30, 60])), [10.0, 30.0, 60.0])
    assert agg.normalize and agg.server_lr == 1.0 and not agg.accepts_stale


def test_fedbuff_inverse_sqrt_and_fedscale_drop():
    # 1/sqrt(1+0) = 1, 1/sqrt(4) = 0.5, 1/sqrt(9) = 1/3, 1/sqrt(16) = 0.25
    np.testing.assert_allclose(fedbuff_weight([0, 3, 8, 15]), [1.0, 0.5, 1 / 3, 0.25], atol=1e-12)
    agg = make_fedbuff()
    assert agg.server_lr == 0.3 and not agg.normalize
    # FedScale variant: tau > 5 dropped; tau = 5 kept at 1/sqrt(6) = 0.40824829
    w = make_fedbuff(FedBuffConfig(max_staleness=5)).weights(info([0, 5, 6]))
    np.testing.assert_allclose(w, [1.0, 0.40824829, 0.0], atol=1e-8)


def test_fedasync_polynomial_hinge_constant():
    # polynomial a=0.5: (1+3)^-0.5 = 0.5, (1+15)^-0.5 = 0.25
    np.testing.assert_allclose(polynomial_weight([0, 3, 15], 0.5), [1.0, 0.5, 0.25])
    # hinge a=10, b=4: 1 while tau <= 4; tau=5: 1/(10*1+1) = 1/11; tau=6: 1/(10*2+1) = 1/21
    np.testing.assert_allclose(hinge_weight([0, 4, 5, 6], 10, 4), [1.0, 1.0, 1 / 11, 1 / 21])
    assert make_fedasync().weights(info([3]))[0] == pytest.approx(0.5)
    hinge = make_fedasync(FedAsyncConfig(function=StalenessFunction.HINGE))
    np.testing.assert_allclose(hinge.weights(info([4, 5])), [1.0, 1 / 11])
    const = make_fedasync(FedAsyncConfig(function=StalenessFunction.CONSTANT, max_staleness=2))
    np.testing.assert_allclose(const.weights(info([0, 2, 3])), [1.0, 1.0, 0.0])


def test_tierfuse_weight_at_median_utility_by_hand():
    # T=3, L=120, sigma=0.4, a=0.25, b=0.1:
    #   alpha = 4^-0.25 = 1/sqrt(2) = 0.70710678
    #   (1+L)^-b = 121^-0.1 = exp(-0.1 * 2 ln 11) = exp(-0.47957905) = 0.61904392
    #   beta = 1.5 - 0.61904392 = 0.88095608 (< 1: the cap does not bind)
    #   w = 0.4 * 0.70710678 + 0.6 * 0.88095608 = 0.28284271 + 0.52857365 = 0.81141636
    agg = make_tierfuse()
    assert agg.weights(info([3], utility=[120.0]))[0] == pytest.approx(0.81141636, abs=1e-6)
    assert make_tierfuse(TierFuseConfig.felix_code()).weights(info([3], utility=[120.0]))[0] == pytest.approx(
        0.81141636, abs=1e-6)
    assert agg.server_lr == 0.3 and not agg.normalize and agg.accepts_stale


def test_tierfuse_components_and_beta_cap():
    # alpha: (1+0)^-.25 = 1, 16^-.25 = 0.5, 81^-.25 = 1/3, 256^-.25 = 0.25
    np.testing.assert_allclose(alpha_staleness([0, 15, 80, 255]), [1.0, 0.5, 1 / 3, 0.25], atol=1e-12)
    # beta: L=0 -> 1.5 - 1 = 0.5; L=1023 -> 1.5 - 1024^-0.1 = 1.5 - 0.5 = 1.0; L=2^20-1 -> 1.5 - 0.25 = 1.25
    big = 2.0 ** 20 - 1
    np.testing.assert_allclose(beta_utility([0, 1023, big], cap=False), [0.5, 1.0, 1.25], atol=1e-12)
    np.testing.assert_allclose(beta_utility([0, 1023, big], cap=True), [0.5, 1.0, 1.0], atol=1e-12)
    # T=0, L=2^20-1: capped 0.4*1 + 0.6*1 = 1.0; uncapped 0.4 + 0.6*1.25 = 1.15
    assert make_tierfuse().weights(info([0], utility=[big]))[0] == pytest.approx(1.0)
    assert make_tierfuse(TierFuseConfig(cap_beta=False)).weights(info([0], utility=[big]))[0] == pytest.approx(1.15)
    # T=15, L=0: 0.4*0.5 + 0.6*0.5 = 0.5
    assert make_tierfuse().weights(info([15], utility=[0.0]))[0] == pytest.approx(0.5)


def test_tierfuse_t_max_drop_or_clamp():
    # L=1023 -> beta = 1; T=5 -> 0.4 * 6^-0.25 + 0.6 = 0.4 * 0.63894310 + 0.6 = 0.85557724
    drop = make_tierfuse(TierFuseConfig(max_staleness=5)).weights(info([5, 6, 40], utility=[1023] * 3))
    np.testing.assert_allclose(drop, [0.85557724, 0.0, 0.0], atol=1e-8)
    clamp = make_tierfuse(TierFuseConfig(max_staleness=5, clamp_staleness=True))
    np.testing.assert_allclose(clamp.weights(info([5, 6, 40], utility=[1023] * 3)), [0.85557724] * 3, atol=1e-8)


def test_tierfuse_mean_loss_signal():
    cfg = TierFuseConfig(utility_signal=UtilitySignal.MEAN_LOSS)
    # loss 0 -> beta 0.5, T=0 -> alpha 1: 0.4 + 0.3 = 0.7 (utility 1023 is ignored)
    assert make_tierfuse(cfg).weights(info([0], utility=[1023.0], loss_mean=[0.0]))[0] == pytest.approx(0.7)


def test_tierfuse_gives_a_late_high_loss_update_more_weight_than_fedbuff():
    # a fresh and a late (T=15) update, both high utility (L=1023 -> beta = 1)
    buf = info([0, 15], utility=[1023.0, 1023.0])
    tf, fb = make_tierfuse().weights(buf), make_fedbuff().weights(buf)
    np.testing.assert_allclose(tf, [1.0, 0.8])  # 0.4*1 + 0.6, 0.4*0.5 + 0.6
    np.testing.assert_allclose(fb, [1.0, 0.25])  # 1/sqrt(16)
    assert tf[1] > fb[1] and tf[1] / tf.sum() > fb[1] / fb.sum()
    # the weight is driven by utility, not only age: a low-utility late update is damped
    assert tierfuse_weight([15], [0.0])[0] < tierfuse_weight([15], [1023.0])[0]


def test_refl_saa_weights_by_hand():
    # fresh -> 1; kept stale (tau <= 5): Lambda_max = max(0.5, 1.0) = 1.0
    #   tau=1, Lambda/max=0.5: 0.65/2 + 0.35*(1 - e^-0.5) = 0.325 + 0.35*0.39346934 = 0.46271427
    #   tau=3, Lambda/max=1.0: 0.65/4 + 0.35*(1 - e^-1)   = 0.1625 + 0.35*0.63212056 = 0.38374220
    #   tau=7 > 5 -> 0 (its Lambda=9 does not enter Lambda_max)
    tau, lam = [0, 0, 1, 3, 7], [0.3, 0.1, 0.5, 1.0, 9.0]
    np.testing.assert_allclose(saa_weights(tau, lam), [1, 1, 0.46271427, 0.38374220, 0], atol=1e-8)
    # s = 2: tau=1 -> 0.325 + 0.35*(1 - 0.60653066/2) = 0.56885713
    assert saa_weights([1, 3], [0.5, 1.0], s=2.0)[0] == pytest.approx(0.56885713, abs=1e-8)
    # no threshold: tau=7 kept, Lambda_max = 9 -> 0.65/8 + 0.35*(1 - e^-1) = 0.08125 + 0.22124220
    assert saa_weights(tau, lam, threshold=None)[4] == pytest.approx(0.30249220, abs=1e-8)
    no_limit = make_refl_saa(REFLSAAConfig(threshold=None)).weights(REFLBufferInfo.of(info(tau), lam))
    assert no_limit[4] == pytest.approx(0.30249220, abs=1e-8)
    agg = make_refl_saa()
    assert agg.normalize and agg.accepts_stale
    w = agg.weights(REFLBufferInfo.of(info(tau), lam))
    np.testing.assert_allclose(w, [1, 1, 0.46271427, 0.38374220, 0], atol=1e-8)
    with pytest.raises(TypeError):
        agg.weights(info(tau))


def test_refl_relative_change_by_hand():
    # fresh x0=[1,0], x1=[3,0] -> m=[2,0], F=2; stale x2=[2,3]:
    #   avg with x2 = [2,1]; change = [0,1]; Lambda = 1 / ||m||^2 = 1/4
    #   fresh x0: ||x0 - m||^2 / ((F+1)^2 ||m||^2) = 1/36
    pts = jnp.array([[1.0, 0.0], [3.0, 0.0], [2.0, 3.0]])
    fresh = jnp.array([True, True, False])
    np.testing.assert_allclose(relative_change(pts, fresh), [1 / 36, 1 / 36, 0.25], rtol=1e-6)
    tree = {"a": pts[:, :1], "b": pts[:, 1]}  # same points split over two leaves
    np.testing.assert_allclose(relative_change(tree, fresh), [1 / 36, 1 / 36, 0.25], rtol=1e-6)
    # no fresh update: m = 0 and Lambda is the plain squared norm (only ratios matter)
    np.testing.assert_allclose(relative_change(pts, jnp.zeros(3, bool)), [1.0, 9.0, 13.0], rtol=1e-6)


def test_registry_builds_every_aggregator():
    buf = info([0, 2, 9], utility=[10.0, 100.0, 1000.0], num_samples=[5, 6, 7])
    for name, make in AGGREGATORS.items():
        agg = make()
        b = REFLBufferInfo.of(buf, [0.0, 1.0, 2.0]) if name == "refl_saa" else buf
        w = agg.weights(b)
        assert w.shape == (3,) and np.all(w >= 0), name
    assert make_aggregator("tierfuse", cap_beta=False).weights(info([0], utility=[2.0 ** 20 - 1]))[0] == \
        pytest.approx(1.15)
    with pytest.raises(KeyError):
        make_aggregator("nope")


# ---- server steps ----------------------------------------------------------------------------------------

PARAMS = {"w": jnp.array([1.0, 2.0]), "b": jnp.array([0.5])}
DELTAS = {"w": jnp.array([[1.0, 0.0], [0.0, 2.0]]), "b": jnp.array([[2.0], [4.0]])}


def test_server_step_divides_by_k():
    # weights [1, 0.5], eta 0.3, /K=2:
    #   w: [1,2] + 0.3 * ([1,0] + 0.5*[0,2]) / 2 = [1,2] + 0.15*[1,1] = [1.15, 2.15]
    #   b: 0.5 + 0.3 * (2 + 0.5*4) / 2 = 0.5 + 0.6 = 1.1
    out = apply_weighted_deltas(PARAMS, DELTAS, jnp.array([1.0, 0.5]), 0.3, normalize=False)
    chex.assert_trees_all_close(out, {"w": jnp.array([1.15, 2.15]), "b": jnp.array([1.1])}, atol=1e-6)


def test_server_step_normalised():
    # / sum w = 1.5: w: [1,2] + 0.3*[1,1]/1.5 = [1.2, 2.2]; b: 0.5 + 0.3*4/1.5 = 1.3
    out = apply_weighted_deltas(PARAMS, DELTAS, jnp.array([1.0, 0.5]), 0.3, normalize=True)
    chex.assert_trees_all_close(out, {"w": jnp.array([1.2, 2.2]), "b": jnp.array([1.3])}, atol=1e-6)


def test_fedavg_step_is_the_sample_weighted_mean():
    # from zero params, local models 4 (n=1) and 8 (n=3): (4 + 24) / 4 = 7
    agg = make_fedavg()
    w = agg.weights(info([0, 0], num_samples=[1, 3]))
    out = apply_weighted_deltas({"x": jnp.zeros(1)}, {"x": jnp.array([[4.0], [8.0]])}, jnp.asarray(w, jnp.float32),
                                agg.server_lr, normalize=agg.normalize)
    np.testing.assert_allclose(out["x"], [7.0], rtol=1e-6)


def test_apply_weighted_deltas_does_not_retrace():
    if not hasattr(apply_weighted_deltas, "_cache_size"):
        pytest.skip("this jax version does not expose the jit cache size")
    w = jnp.array([0.3, 0.7])
    apply_weighted_deltas(PARAMS, DELTAS, w, 0.3, normalize=False)
    size = apply_weighted_deltas._cache_size()
    other = jax.tree_util.tree_map(lambda d: d * 2.0, DELTAS)
    apply_weighted_deltas(PARAMS, other, jnp.array([0.9, 0.1]), 0.5, normalize=False)
    assert apply_weighted_deltas._cache_size() == size


# ---- delta bounds ----------------------------------------------------------------------------------------

BOUND = {"a": jnp.array([[3.0, 0.0], [0.3, 0.0], [0.0, 0.0]]), "b": jnp.array([[4.0], [0.4], [0.0]])}


def test_update_norms_over_all_leaves():
    # sqrt(9 + 16) = 5, sqrt(0.09 + 0.16) = 0.5, 0
    np.testing.assert_allclose(update_norms(BOUND), [5.0, 0.5, 0.0], rtol=1e-6)


def test_clip_and_normalize_deltas():
    clipped = clip_or_normalize_deltas(BOUND, "clip", 1.0)  # 5 -> 1 (x0.2); 0.5 stays; 0 stays
    chex.assert_trees_all_close(clipped, {"a": jnp.array([[0.6, 0.0], [0.3, 0.0], [0.0, 0.0]]),
                                          "b": jnp.array([[0.8], [0.4], [0.0]])}, atol=1e-6)
    normed = clip_or_normalize_deltas(BOUND, DeltaBound.NORMALIZE, 1.0)  # both to norm 1; zero stays zero
    chex.assert_trees_all_close(normed, {"a": jnp.array([[0.6, 0.0], [0.6, 0.0], [0.0, 0.0]]),
                                         "b": jnp.array([[0.8], [0.8], [0.0]])}, atol=1e-6)
    assert clip_or_normalize_deltas(BOUND, None) is BOUND
    size = deltas_mod._bound._cache_size()
    clip_or_normalize_deltas(BOUND, "clip", 2.0)  # a new bound value is traced, not static
    assert deltas_mod._bound._cache_size() == size


def test_tierfuse_bound_then_step():
    from felix_jax.policies.aggregators.tierfuse import bound_deltas
    cfg = TierFuseConfig(delta_bound=DeltaBound.CLIP, max_norm=1.0)
    d = bound_deltas(cfg, {"x": jnp.array([[10.0], [0.5]])})  # -> [[1.0], [0.5]]
    out = apply_weighted_deltas({"x": jnp.zeros(1)}, d, jnp.array([1.0, 1.0]), cfg.server_lr,
                                normalize=cfg.normalize)
    np.testing.assert_allclose(out["x"], [0.3 * 1.5 / 2], rtol=1e-6)
    assert math.isclose(float(update_norms(d)[0]), 1.0, rel_tol=1e-6)
