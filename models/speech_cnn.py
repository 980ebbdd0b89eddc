"""A narrow keyword-spotting CNN on log-mel inputs: the learner of ``speech-longhorizon``.

The paper's speech model is a ResNet of about 7.2M parameters (:mod:`.speech_resnet`);
on 2 CPU cores one local step of it costs about 600 times this network's, so a comparison of thousands of
aggregations per strategy is out of reach there. This network keeps the input (the
(time, mel) log-mel "image") and the task, and shrinks only the learner:

- a 2x2 average pool of the input (98x40 frames x mels -> 49x20): 20 ms hops instead of 10;
- three 3x3 SAME convolutions (``conv`` channels), each with a ReLU and a 2x2 max-pool
  (49x20 -> 24x10 -> 12x5 -> 6x2);
- the flattened map, ``dense`` hidden layers (ReLU) and a linear classifier.

Default widths ``conv=(8, 16, 32)``, ``dense=(32,)``: 18,604 parameters for the 12-class
task on 98x40 inputs (asserted in tests); about 4x cheaper per step than the same CNN
without the input pool. The widths were picked by cost alone, before any federated run.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax

from .base import Model, make_model
from .layers import ConvImpl, conv3x3, max_pool_2x2


class SpeechCNN(nn.Module):
    num_classes: int = 12
    conv: Sequence[int] = (8, 16, 32)
    dense: Sequence[int] = (32,)
    conv_impl: ConvImpl = "shift"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim == 3:  # (B, time, mels) -> one input channel
            x = x[..., None]
        n, h, w, c = x.shape  # 2x2 average pool of the input (floor mode), as a reshape
        x = x[:, : h // 2 * 2, : w // 2 * 2, :].reshape(n, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))
        for i, features in enumerate(self.conv):
            x = conv3x3(self.conv_impl, features, padding="SAME", name=f"conv_{i}")(x)
            x = max_pool_2x2(nn.relu(x))
        x = x.reshape(x.shape[0], -1)
        for i, features in enumerate(self.dense):
            x = nn.relu(nn.Dense(features, name=f"dense_{i}")(x))
        return nn.Dense(self.num_classes, name="classifier")(x)


def speech_cnn(input_shape: tuple[int, ...] = (98, 40), num_classes: int = 12, conv_impl: ConvImpl = "shift",
               conv: Sequence[int] = (8, 16, 32), dense: Sequence[int] = (32,)) -> Model:
    """The narrow speech CNN; the input needs at least 16 frames and 16 mels (three 2x2 pools after the
    input pool leave at least one cell)."""
    if len(input_shape) not in (2, 3) or min(int(d) for d in input_shape[:2]) < 16:
        raise ValueError(f"speech_cnn needs (time, mels[, 1]) inputs of at least 16x16, got {tuple(input_shape)}")
    module = SpeechCNN(num_classes, tuple(conv), tuple(dense), conv_impl)
    suffix = "" if (tuple(conv), tuple(dense)) == ((8, 16, 32), (32,)) else \
        "c" + "-".join(map(str, conv)) + "d" + "-".join(map(str, dense))
    return make_model(f"speech_cnn[{conv_impl}]{suffix}", module, input_shape, num_classes)
