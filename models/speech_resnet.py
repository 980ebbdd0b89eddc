"""A ResNet-style keyword-spotting network for Speech Commands on log-mel inputs.

The FeLiX paper trains "a ResNet-derived speech network (~7.2M parameters)" on
Google Speech Commands v2 (35 labels). This is a ResNet-18-like stack of basic
blocks over a (time, mel) log-mel "image" with one input channel: a 3x3 stem,
four stages of widths (64, 128, 256, 576) with (2, 2, 2, 1) basic blocks (one
block in the last, wider stage brings ResNet-18's 11.2M to the paper's size),
global average pooling, and a dense classifier. Exact count: 7,258,147
parameters for 35 classes, 7,244,876 for the 12-class task (asserted in tests).

GroupNorm instead of BatchNorm: batch statistics are per-client state that
non-IID federated averaging handles badly (Hsieh et al., 2020), and a stateless
norm keeps every client's local step a pure function of (params, batch).
All 3x3 convolutions use the vectorization-friendly formulation of
:mod:`felix_jax.models.layers`.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from .base import Model, make_model
from .layers import ConvImpl, conv3x3


def _norm(name: str, features: int) -> nn.Module:
    return nn.GroupNorm(num_groups=min(32, features // 4), name=name)


class BasicBlock(nn.Module):
    features: int
    stride: int
    conv_impl: ConvImpl

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = conv3x3(self.conv_impl, self.features, stride=self.stride, padding="SAME", use_bias=False, name="conv_a")(x)
        y = nn.relu(_norm("norm_a", self.features)(y))
        y = conv3x3(self.conv_impl, self.features, padding="SAME", use_bias=False, name="conv_b")(y)
        y = _norm("norm_b", self.features)(y)
        if self.stride != 1 or x.shape[-1] != self.features:
            # 1x1 strided projection: a slice then a dense layer over channels.
            x = x[:, :: self.stride, :: self.stride, :]
            x = _norm("norm_proj", self.features)(nn.Dense(self.features, use_bias=False, name="proj")(x))
        return nn.relu(x + y)


class SpeechResNet(nn.Module):
    num_classes: int = 35
    widths: Sequence[int] = (64, 128, 256, 576)
    blocks: Sequence[int] = (2, 2, 2, 1)
    conv_impl: ConvImpl = "shift"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim == 3:  # (B, time, mels) -> one input channel
            x = x[..., None]
        x = conv3x3(self.conv_impl, self.widths[0], padding="SAME", use_bias=False, name="stem")(x)
        x = nn.relu(_norm("stem_norm", self.widths[0])(x))
        for s, (width, n_blocks) in enumerate(zip(self.widths, self.blocks)):
            for b in range(n_blocks):
                stride = 2 if (s > 0 and b == 0) else 1
                x = BasicBlock(width, stride, self.conv_impl, name=f"stage{s}_block{b}")(x)
        x = x.mean(axis=(1, 2))
        return nn.Dense(self.num_classes, name="classifier")(x)


def speech_resnet(input_shape: tuple[int, ...] = (101, 40), num_classes: int = 35,
                  conv_impl: ConvImpl = "shift", widths: Sequence[int] = (64, 128, 256, 576),
                  blocks: Sequence[int] = (2, 2, 2, 1)) -> Model:
    module = SpeechResNet(num_classes, tuple(widths), tuple(blocks), conv_impl)
    return make_model(f"speech_resnet[{conv_impl}]", module, input_shape, num_classes)
