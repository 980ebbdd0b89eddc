import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from felix_jax.models import cifar_cnn, conv3x3_shifted, max_pool_2x2, mlp, speech_resnet


def test_cifar_cnn_has_the_papers_parameter_count():
    m = cifar_cnn()
    assert m.num_params == 537_610
    assert m.bytes_on_wire == 537_610 * 4
    assert cifar_cnn("flax").num_params == 537_610


def test_speech_resnet_parameter_count_is_stated_exactly():
    assert speech_resnet(num_classes=35).num_params == 7_258_147
    assert speech_resnet(num_classes=12).num_params == 7_244_876


def test_mlp_parameter_count():
    # 4*32 + 32 + 32*10 + 10
    assert mlp((4,), hidden=(32,)).num_params == 490


@pytest.mark.parametrize("stride,padding", [(1, "VALID"), (1, "SAME"), (2, "SAME"), (2, "VALID")])
@pytest.mark.parametrize("hw", [(11, 9), (12, 8)])
def test_shifted_conv_equals_lax_conv(stride, padding, hw):
    kx, kk, kb = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (2,) + hw + (5,))
    kernel = jax.random.normal(kk, (3, 3, 5, 7))
    bias = jax.random.normal(kb, (7,))
    want = jax.lax.conv_general_dilated(x, kernel, (stride, stride), padding,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC")) + bias
    chex.assert_trees_all_close(conv3x3_shifted(x, kernel, bias, stride, padding), want, atol=1e-4, rtol=1e-4)


def test_max_pool_floor_mode():
    x = jnp.arange(2 * 5 * 5 * 1, dtype=jnp.float32).reshape(2, 5, 5, 1)
    y = max_pool_2x2(x)
    assert y.shape == (2, 2, 2, 1)
    assert float(y[0, 0, 0, 0]) == 6.0  # max of x[0, 0:2, 0:2] = 6 (row 1, col 1)


# the tiny CNN (the long-horizon learner: every layer of the same code, narrower) in the default tier; the
# paper's widths, 537,610 parameters, in the slow tier
@pytest.mark.parametrize("widths", [{"conv": (8, 16, 32), "dense": (32, 32)},
                                    pytest.param({}, marks=pytest.mark.slow, id="paper")],
                         ids=lambda w: "tiny" if w else "paper")
def test_cnn_shift_formulation_equals_plain_flax_model_outputs_and_grads(widths):
    fast, plain = cifar_cnn("shift", **widths), cifar_cnn("flax", **widths)
    params = jax.jit(plain.init)(jax.random.key(1))
    chex.assert_trees_all_equal_shapes(params, jax.eval_shape(fast.init, jax.random.key(1)))
    x = jax.random.normal(jax.random.key(2), (4, 32, 32, 3))
    y = jnp.array([0, 3, 9, 1])
    chex.assert_trees_all_close(jax.jit(fast.apply)(params, x), jax.jit(plain.apply)(params, x),
                                atol=1e-4, rtol=1e-4)
    g_fast = jax.jit(jax.grad(lambda p: fast.loss(p, x, y)[0].mean()))(params)
    g_plain = jax.jit(jax.grad(lambda p: plain.loss(p, x, y)[0].mean()))(params)
    chex.assert_trees_all_close(g_fast, g_plain, atol=1e-4, rtol=1e-3)


@pytest.mark.slow
def test_speech_resnet_forward_shape_and_formulations_agree():
    fast, plain = speech_resnet((24, 16), 12, "shift"), speech_resnet((24, 16), 12, "flax")
    params = jax.jit(plain.init)(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (2, 24, 16))
    out = jax.jit(fast.apply)(params, x)
    chex.assert_shape(out, (2, 12))
    chex.assert_trees_all_close(out, jax.jit(plain.apply)(params, x), atol=1e-3, rtol=1e-3)


# the CNN's eager initialisation alone takes ~20 s on a CPU: slow tier
@pytest.mark.parametrize("name, shape, classes", [("mlp", (8, 8, 1), 10),
                                                  pytest.param("cifar_cnn_tiny", (32, 32, 3), 10, marks=pytest.mark.slow)])
def test_a_jitted_init_gives_the_eager_values_bit_for_bit(name, shape, classes):
    """Runs initialise their model jitted (``initial_params``: one cacheable program instead of every
    initialiser's ops compiled one by one); the values must be the eager ones, or every recorded run's
    start would move."""
    from felix_jax.experiment.registry import make_model
    from felix_jax.models import initial_params

    m = make_model(name, shape, classes)
    chex.assert_trees_all_equal(initial_params(m, jax.random.key(5)), m.init(jax.random.key(5)))


def test_loss_is_per_sample_cross_entropy():
    m = mlp((3,), num_classes=4, hidden=(5,))
    params = m.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (6, 3))
    y = jnp.array([0, 1, 2, 3, 0, 1])
    losses, logits = m.loss(params, x, y)
    want = -np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), np.asarray(y)[:, None], 1)[:, 0]
    np.testing.assert_allclose(np.asarray(losses), want, rtol=1e-5)


def test_narrow_cifar_cnns_have_the_hand_counted_sizes():
    from felix_jax.experiment.registry import make_model

    # conv (16, 32, 64): 9*3*16+16 + 9*16*32+32 + 9*32*64+64 = 23,584; dense 256->64->64->10: 21,258
    assert make_model("cifar_cnn_narrow", (32, 32, 3), 10).num_params == 23_584 + 21_258 == 44_842
    # conv (8, 16, 32): 224 + 1,168 + 4,640; dense 128->32->32->10: 4,128 + 1,056 + 330
    assert make_model("cifar_cnn_tiny", (32, 32, 3), 10).num_params == 11_546
    assert cifar_cnn().name == "cifar_cnn[shift]"  # the paper's network keeps its name and tree


def test_the_narrow_speech_cnn_has_the_hand_counted_size_and_both_conv_forms_agree():
    from felix_jax.experiment.registry import make_model
    from felix_jax.models import speech_cnn

    # 98x40 -> input pool 49x20 -> SAME convs + pools 24x10, 12x5, 6x2: a 6*2*32 = 384 feature
    # convs 9*1*8+8 + 9*8*16+16 + 9*16*32+32 = 80 + 1,168 + 4,640; dense 384*32+32 + 32*12+12 = 12,320 + 396
    m = make_model("speech_cnn", (98, 40, 1), 12)
    assert m.num_params == 80 + 1_168 + 4_640 + 12_320 + 396 == 18_604
    assert m.name == "speech_cnn[shift]"
    x = jax.random.normal(jax.random.key(1), (3, 98, 40, 1))
    p = m.init(jax.random.key(0))
    flax_form = speech_cnn((98, 40, 1), 12, conv_impl="flax")
    np.testing.assert_allclose(np.asarray(m.apply(p, x)), np.asarray(flax_form.apply(p, x)), rtol=1e-4, atol=1e-5)
    # (time, mels) inputs without the channel axis give the same logits
    np.testing.assert_allclose(np.asarray(speech_cnn((98, 40), 12).apply(p, x[..., 0])), np.asarray(m.apply(p, x)),
                               rtol=1e-6)


def test_the_narrow_speech_cnn_refuses_inputs_its_pools_would_empty():
    from felix_jax.experiment.registry import make_model
    from felix_jax.options import OptionError

    with pytest.raises(OptionError, match="at least 16x16"):
        make_model("speech_cnn", (98, 8, 1), 12)
