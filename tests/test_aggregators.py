"""Aggregator weights and server steps against hand-computed values (the device steps with and without
jit: chex variants)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.fleet.server_optimizer import make_server_optimizer, server_step, weighted_mean_delta
from felix_jax.policies.aggregators import (AGGREGATORS, BufferInfo, DeltaBound, FedAsyncConfig, FedBuffConfig,
                                            REFLBufferInfo, REFLSAAConfig, StalenessFunction, TierFuseConfig,
                                            UtilitySignal, apply_weighted_deltas, clip_or_normalize_deltas,
                                            fedbuff_weight, make_aggregator, make_fedasync, make_fedavg,
                                            make_fedbuff, make_refl_saa, make_tierfuse, relative_change,
                                            update_norms)
from felix_jax.policies.aggregators import deltas as deltas_mod
from felix_jax.policies.aggregators.byzantine import SelectionInfo
from felix_jax.policies.aggregators.fedasync import hinge_weight, polynomial_weight
from felix_jax.policies.aggregators.refl_saa import saa_weights
from felix_jax.policies.aggregators.tierfuse import alpha_staleness, beta_utility, tierfuse_weight
from tests.conftest import JitVariants


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


def test_registry_builds_every_aggregator():
    buf = info([0, 2, 9], utility=[10.0, 100.0, 1000.0], num_samples=[5, 6, 7])
    for name, make in AGGREGATORS.items():
        agg = make()
        b = REFLBufferInfo.of(buf, [0.0, 1.0, 2.0]) if name == "refl_saa" else buf
        if name in ("krum", "multi-krum", "bulyan"):  # they weigh the selection augment_info makes
            with pytest.raises(TypeError, match="SelectionInfo"):
                agg.weights(b)
            b = SelectionInfo.of(buf, [True, False, True])
        w = agg.weights(b)
        assert w.shape == (3,) and np.all(w >= 0), name
    assert make_aggregator("tierfuse", cap_beta=False).weights(info([0], utility=[2.0 ** 20 - 1]))[0] == \
        pytest.approx(1.15)
    with pytest.raises(KeyError):
        make_aggregator("nope")


# ---- server steps (with and without jit) ------------------------------------------------------------------

PARAMS = {"w": jnp.array([1.0, 2.0]), "b": jnp.array([0.5])}
DELTAS = {"w": jnp.array([[1.0, 0.0], [0.0, 2.0]]), "b": jnp.array([[2.0], [4.0]])}


class ServerStepTest(JitVariants):
    """The fleet's server step (``FleetSimulator._aggregate``): the aggregator's ``transform_deltas``,
    ``augment_info`` and host weights, ``weighted_mean_delta`` and the optax ``server_step``; every
    device part under the variant."""

    def aggregate(self, agg, buffer, params=PARAMS, deltas=DELTAS):
        with self.jit_mode():  # REFL's relative change runs on the device
            buffer = buffer if agg.augment_info is None else agg.augment_info(buffer, deltas)
        weights = jnp.asarray(agg.weights(buffer), jnp.float32)
        opt = make_server_optimizer("sgd", agg.server_lr)

        def step(params, deltas, weights):
            if agg.transform_deltas is not None:
                deltas = agg.transform_deltas(deltas)
            return server_step(opt, params, opt.init(params), weighted_mean_delta(deltas, weights,
                                                                                  normalize=agg.normalize))[0]

        return self.run_variant(step, params, deltas, weights)

    @chex.variants(with_jit=True, without_jit=True)
    def test_fedbuff(self):
        # weights 1/sqrt(1+0) = 1, 1/sqrt(1+3) = 0.5; eta 0.3, / K = 2:
        #   w: [1,2] + 0.3 * ([1,0] + 0.5*[0,2]) / 2 = [1,2] + 0.15*[1,1] = [1.15, 2.15]
        #   b: 0.5 + 0.3 * (2 + 0.5*4) / 2 = 0.5 + 0.6 = 1.1
        out = self.aggregate(make_fedbuff(), info([0, 3]))
        chex.assert_trees_all_close(out, {"w": jnp.array([1.15, 2.15]), "b": jnp.array([1.1])}, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_fedasync(self):
        # polynomial a = 0.5: (1+3)^-0.5 = 0.5, (1+15)^-0.5 = 0.25; eta 0.3, / K = 2:
        #   w: [1,2] + 0.15 * (0.5*[1,0] + 0.25*[0,2]) = [1,2] + 0.15*[0.5,0.5] = [1.075, 2.075]
        #   b: 0.5 + 0.15 * (0.5*2 + 0.25*4) = 0.5 + 0.3 = 0.8
        out = self.aggregate(make_fedasync(), info([3, 15]))
        chex.assert_trees_all_close(out, {"w": jnp.array([1.075, 2.075]), "b": jnp.array([0.8])}, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_tierfuse_with_clipped_deltas(self):
        # clip to norm 1: |d0| = sqrt(1 + 4) = sqrt5, |d1| = sqrt(4 + 16) = sqrt20
        #   d0 -> w [1/sqrt5, 0] = [0.44721360, 0], b [2/sqrt5] = [0.89442719]
        #   d1 -> w [0, 2/sqrt20] = [0, 0.44721360], b [4/sqrt20] = [0.89442719]
        # weights (L = 1023: beta = 1): T=0 -> 0.4*1 + 0.6 = 1.0; T=15 -> 0.4*0.5 + 0.6 = 0.8; eta 0.3, / K = 2:
        #   w: [1,2] + 0.15 * [0.44721360, 0.8*0.44721360] = [1.06708204, 2.05366563]
        #   b: 0.5 + 0.15 * (0.89442719 + 0.8*0.89442719) = 0.5 + 0.15 * 1.60996894 = 0.74149534
        agg = make_tierfuse(TierFuseConfig(delta_bound=DeltaBound.CLIP, max_norm=1.0))
        out = self.aggregate(agg, info([0, 15], utility=[1023.0, 1023.0]))
        chex.assert_trees_all_close(out, {"w": jnp.array([1.06708204, 2.05366563]), "b": jnp.array([0.74149534])},
                                    atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_fedavg_is_the_sample_weighted_mean(self):
        # n = 1 and 3, / sum = 4, eta 1: w: [1,2] + ([1,0] + 3*[0,2]) / 4 = [1.25, 3.5]; b: 0.5 + (2 + 12) / 4 = 4.0
        out = self.aggregate(make_fedavg(), info([0, 0], num_samples=[1, 3]))
        chex.assert_trees_all_close(out, {"w": jnp.array([1.25, 3.5]), "b": jnp.array([4.0])}, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_refl_saa(self):
        # fresh x0 = [1,0], x1 = [3,0] (mean m = [2,0]), stale x2 = [2,3] with tau = 2; b all 0.
        # Lambda_2 = ||x2 - m||^2 / ((F+1)^2 ||m||^2) = 9 / (9 * 4) = 0.25 = Lambda_max, so the ratio is 1:
        #   w2 = 0.65 / (2+1) + 0.35 * (1 - e^-1) = 0.21666667 + 0.22124220 = 0.43790887; fresh weigh 1
        # / sum = 2.43790887, eta 1:
        #   w: [1,2] + ([1,0] + [3,0] + 0.43790887*[2,3]) / 2.43790887 = [1,2] + [2, 1.31372661 / 2.43790887]
        #      = [3, 2.53887436]
        deltas = {"w": jnp.array([[1.0, 0.0], [3.0, 0.0], [2.0, 3.0]]), "b": jnp.zeros((3, 1))}
        out = self.aggregate(make_refl_saa(), info([0, 0, 2]), deltas=deltas)
        chex.assert_trees_all_close(out, {"w": jnp.array([3.0, 2.53887436]), "b": jnp.array([0.5])}, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_reduction_divides_by_k_or_by_the_weights(self):
        w = jnp.array([1.0, 0.5])
        # / K = 2: w: [1,2] + 0.3*([1,0] + 0.5*[0,2])/2 = [1.15, 2.15]; b: 0.5 + 0.3*(2 + 0.5*4)/2 = 1.1
        out = self.run_variant(lambda p, d, w: apply_weighted_deltas(p, d, w, 0.3, normalize=False), PARAMS, DELTAS, w)
        chex.assert_trees_all_close(out, {"w": jnp.array([1.15, 2.15]), "b": jnp.array([1.1])}, atol=1e-6)
        # / sum w = 1.5: w: [1,2] + 0.3*[1,1]/1.5 = [1.2, 2.2]; b: 0.5 + 0.3*4/1.5 = 1.3
        out = self.run_variant(lambda p, d, w: apply_weighted_deltas(p, d, w, 0.3, normalize=True), PARAMS, DELTAS, w)
        chex.assert_trees_all_close(out, {"w": jnp.array([1.2, 2.2]), "b": jnp.array([1.3])}, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_server_optimizers_first_step(self):
        params = {"w": jnp.array([1.0, 2.0])}
        deltas = {"w": jnp.array([[0.2, -0.4], [0.6, 0.0]])}
        # (1*[0.2,-0.4] + 0.5*[0.6,0]) / K = [0.5, -0.4] / 2 = [0.25, -0.2]
        mean = self.run_variant(lambda d, w: weighted_mean_delta(d, w, normalize=False), deltas, jnp.array([1.0, 0.5]))
        np.testing.assert_allclose(np.asarray(mean["w"]), [0.25, -0.2], rtol=1e-6)

        def first_step(name, lr):
            opt = make_server_optimizer(name, lr)
            new, state = self.run_variant(lambda p, m: server_step(opt, p, opt.init(p), m), params, mean)
            return np.asarray(new["w"]), state

        new, _ = first_step("sgd", 0.3)  # w + eta * m = [1 + 0.075, 2 - 0.06]
        np.testing.assert_allclose(new, [1.075, 1.94], rtol=1e-6)
        # Adam, g = -m: bias-corrected first moments m_hat = g, v_hat = g^2, so the step is
        # -lr * g / (|g| + eps) = lr * m / (|m| + 1e-3):
        #   0.1 * 0.25 / 0.251 = 0.09960159, 0.1 * -0.2 / 0.201 = -0.09950249
        new, state = first_step("adam", 0.1)
        np.testing.assert_allclose(new, [1.09960159, 1.90049751], rtol=1e-6)
        assert int(state[0].count) == 1
        # Yogi, g = -m, both accumulators start at 1e-6, b1 = 0.9, b2 = 0.99, eps = 1e-3:
        #   m = 0.25: mu = 0.9e-6 + 0.1 * -0.25 = -0.0249991, mu_hat = mu / 0.1 = -0.249991
        #     nu = 1e-6 - 0.01 * sign(1e-6 - 0.0625) * 0.0625 = 0.000626, nu_hat = nu / 0.01 = 0.0626
        #     step = -lr * mu_hat / (sqrt(nu_hat) + eps) = 0.1 * 0.249991 / (0.25019992 + 0.001) = 0.09951874
        #   m = -0.2: mu_hat = (0.9e-6 + 0.02) / 0.1 = 0.200009, nu_hat = (1e-6 + 0.0004) / 0.01 = 0.0401
        #     step = -0.1 * 0.200009 / (0.20024984 + 0.001) = -0.09938343
        new, _ = first_step("yogi", 0.1)
        np.testing.assert_allclose(new, [1.09951874, 1.90061657], rtol=1e-6)


def test_apply_weighted_deltas_does_not_retrace():
    if not hasattr(apply_weighted_deltas, "_cache_size"):
        pytest.skip("this jax version does not expose the jit cache size")
    w = jnp.array([0.3, 0.7])
    apply_weighted_deltas(PARAMS, DELTAS, w, 0.3, normalize=False)
    size = apply_weighted_deltas._cache_size()
    other = jax.tree_util.tree_map(lambda d: d * 2.0, DELTAS)
    apply_weighted_deltas(PARAMS, other, jnp.array([0.9, 0.1]), 0.5, normalize=False)
    assert apply_weighted_deltas._cache_size() == size


# ---- delta bounds and REFL's relative change (with and without jit) --------------------------------------

BOUND = {"a": jnp.array([[3.0, 0.0], [0.3, 0.0], [0.0, 0.0]]), "b": jnp.array([[4.0], [0.4], [0.0]])}


class BufferMathTest(JitVariants):
    @chex.variants(with_jit=True, without_jit=True)
    def test_update_norms_over_all_leaves(self):
        # sqrt(9 + 16) = 5, sqrt(0.09 + 0.16) = 0.5, 0
        np.testing.assert_allclose(self.run_variant(update_norms, BOUND), [5.0, 0.5, 0.0], rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_clip_and_normalize_deltas(self):
        # 5 -> 1 (x0.2); 0.5 stays; 0 stays
        clipped = self.run_variant(lambda d: clip_or_normalize_deltas(d, "clip", 1.0), BOUND)
        chex.assert_trees_all_close(clipped, {"a": jnp.array([[0.6, 0.0], [0.3, 0.0], [0.0, 0.0]]),
                                              "b": jnp.array([[0.8], [0.4], [0.0]])}, atol=1e-6)
        # both to norm 1; zero stays zero
        normed = self.run_variant(lambda d: clip_or_normalize_deltas(d, DeltaBound.NORMALIZE, 1.0), BOUND)
        chex.assert_trees_all_close(normed, {"a": jnp.array([[0.6, 0.0], [0.6, 0.0], [0.0, 0.0]]),
                                             "b": jnp.array([[0.8], [0.8], [0.0]])}, atol=1e-6)
        assert clip_or_normalize_deltas(BOUND, None) is BOUND

    @chex.variants(with_jit=True, without_jit=True)
    def test_refl_relative_change_by_hand(self):
        # fresh x0=[1,0], x1=[3,0] -> m=[2,0], F=2; stale x2=[2,3]:
        #   avg with x2 = [2,1]; change = [0,1]; Lambda = 1 / ||m||^2 = 1/4
        #   fresh x0: ||x0 - m||^2 / ((F+1)^2 ||m||^2) = 1/36
        pts = jnp.array([[1.0, 0.0], [3.0, 0.0], [2.0, 3.0]])
        fresh = jnp.array([True, True, False])
        np.testing.assert_allclose(self.run_variant(relative_change, pts, fresh), [1 / 36, 1 / 36, 0.25], rtol=1e-6)
        tree = {"a": pts[:, :1], "b": pts[:, 1]}  # same points split over two leaves
        np.testing.assert_allclose(self.run_variant(relative_change, tree, fresh), [1 / 36, 1 / 36, 0.25], rtol=1e-6)
        # no fresh update: m = 0 and Lambda is the plain squared norm (only ratios matter)
        np.testing.assert_allclose(self.run_variant(relative_change, pts, jnp.zeros(3, bool)), [1.0, 9.0, 13.0],
                                   rtol=1e-6)


def test_a_new_bound_value_does_not_retrace():
    clip_or_normalize_deltas(BOUND, "clip", 1.0)
    size = deltas_mod._bound._cache_size()
    clip_or_normalize_deltas(BOUND, "clip", 2.0)  # a new bound value is traced, not static
    assert deltas_mod._bound._cache_size() == size


def test_an_augmented_buffer_info_carries_every_field_of_buffer_info():
    # augment_info hands the weights a BufferInfo plus the rule's own column; a field added to BufferInfo
    # (start_loss, work_fraction) must reach those weights too, not be dropped by a copy of the fields
    from felix_jax.policies.aggregators.base import BufferInfo
    from felix_jax.policies.aggregators.byzantine import SelectionInfo
    from felix_jax.policies.aggregators.refl_saa import REFLBufferInfo

    k = 3
    info = BufferInfo(np.arange(k), np.ones(k), np.ones(k), np.ones(k), np.ones(k), label_time_s=np.zeros(k),
                      proxy_fraction=np.zeros(k), start_loss=np.full(k, 2.0), work_fraction=np.full(k, 0.5))
    for augmented in (SelectionInfo.of(info, [True, False, True]), REFLBufferInfo.of(info, [0.1, 0.2, 0.3])):
        for field in BufferInfo._fields:
            assert getattr(augmented, field) is getattr(info, field), (type(augmented).__name__, field)
