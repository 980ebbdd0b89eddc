"""A plugin factory's common mistakes, each named in one line with what to do instead."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import numpy as np
import pytest

from felix_jax import plugins
from felix_jax.experiment.registry import make_model
from felix_jax.models.base import make_model as wrap_module
from felix_jax.options import OptionError
from felix_jax.plugin_calls import DROPOUT_ADVICE, PluginError
from felix_jax.policies import Aggregator, Selector, make_aggregator, make_selector

SHAPE, CLASSES = (4, 4, 1), 3


class MLP(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))


class AlwaysDropout(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dropout(0.5, deterministic=False)(x.reshape((x.shape[0], -1)))
        return nn.Dense(self.num_classes)(x)


@plugins.model("test-bare-module")
def make_bare(input_shape, num_classes):
    return MLP(num_classes)


@plugins.model("test-one-argument")
def make_one(input_shape):
    return wrap_module("test-one-argument", MLP(3), input_shape, 3)


@plugins.model("test-dropout-no-flag")
def make_dropout(input_shape, num_classes):
    return wrap_module("test-dropout-no-flag", AlwaysDropout(num_classes), input_shape, num_classes)


@plugins.model("test-dict-model")
def make_dict(input_shape, num_classes):
    return {"init": None}


def test_a_factory_that_returns_a_flax_module_is_told_to_wrap_it():
    with pytest.raises(OptionError) as caught:
        make_model("test-bare-module", SHAPE, CLASSES)
    assert str(caught.value) == (
        'model=test-bare-module: its factory returned the flax module MLP, not a Model: wrap it with '
        'felix_jax.models.make_model("test-bare-module", module, input_shape, num_classes) (and '
        'train_flag="train" for a module with dropout)')
    with pytest.raises(OptionError, match=r"^model=test-dict-model: its factory returned dict, not a Model"):
        make_model("test-dict-model", SHAPE, CLASSES)


def test_a_factory_with_the_wrong_signature_names_the_expected_one():
    with pytest.raises(PluginError) as caught:
        make_model("test-one-argument", SHAPE, CLASSES)
    line = make_one.__code__.co_firstlineno
    assert str(caught.value) == (
        f"model 'test-one-argument' factory make_one() failed at {__file__}:{line}: it is defined as "
        "make_one(input_shape), but felix-jax calls make(input_shape, num_classes) -> Model")


def test_policy_factories_with_the_wrong_signature_name_the_expected_one():
    @dataclasses.dataclass(frozen=True)
    class NoConfig:
        pass

    @plugins.selector("test-selector-no-arg")
    def make_sel(config):  # registered without a config: called as make()
        return Selector("x", lambda: None, lambda s, c, k: (np.zeros(0, np.int64), s))

    @plugins.aggregator("test-aggregator-no-arg", config=NoConfig)
    def make_agg():
        return Aggregator("x", lambda info: np.ones(len(info.staleness)))

    with pytest.raises(PluginError, match=r"it is defined as make_sel\(config\), but felix-jax calls make\(\) "
                                          r"-> Selector \(a selector registered without a config\)$"):
        make_selector("test-selector-no-arg")
    with pytest.raises(PluginError, match=r"it is defined as make_agg\(\), but felix-jax calls "
                                          r"make\(config: NoConfig\) -> Aggregator$"):
        make_aggregator("test-aggregator-no-arg")


def test_dropout_without_train_flag_says_how_to_pass_it():
    with pytest.raises(OptionError) as caught:  # evaluation calls it without a dropout key
        make_model("test-dropout-no-flag", SHAPE, CLASSES)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("model=test-dropout-no-flag cannot run on inputs")
    assert f"InvalidRngError at {__file__}:" in message and message.endswith(f"; {DROPOUT_ADVICE}")
    assert 'train_flag="train"' in DROPOUT_ADVICE and "__call__(self, x, train: bool)" in DROPOUT_ADVICE


def test_a_missing_key_raised_inside_a_factory_gets_the_same_advice():
    from flax.errors import InvalidRngError

    from felix_jax.plugin_calls import guarded

    def make(input_shape, num_classes):
        raise InvalidRngError("Dropout_0 needs PRNG for \"dropout\"")

    with pytest.raises(PluginError) as caught:
        guarded("model 'm' factory make()", make)((1,), 2)
    message = str(caught.value)
    assert ": InvalidRngError: Dropout_0 needs PRNG for \"dropout\"" in message and message.endswith(DROPOUT_ADVICE)
