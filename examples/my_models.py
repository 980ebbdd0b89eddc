# my_models.py: two flax models for felix-jax, registered as model=my-mlp and model=my-cnn
import flax.linen as nn
import jax

from felix_jax import plugins
from felix_jax.models import make_model


class DropoutMLP(nn.Module):
    """Flattens any input; two hidden layers, dropout after each while training."""
    num_classes: int
    hidden: int = 64
    rate: float = 0.2

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        for _ in range(2):
            x = nn.relu(nn.Dense(self.hidden)(x))
            x = nn.Dropout(self.rate, deterministic=not train)(x)
        return nn.Dense(self.num_classes)(x)


class SmallCNN(nn.Module):
    """Images (H, W, C): two 3x3 convolutions with 2x2 max pooling, then a dense layer."""
    num_classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in (16, 32):
            x = nn.relu(nn.Conv(width, (3, 3), padding="SAME")(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(self.num_classes)(nn.relu(nn.Dense(64)(x)))


@plugins.model("my-mlp")
def make_my_mlp(input_shape, num_classes):
    # train_flag names the switch: local training calls train=True with a dropout key per task
    # and step, evaluation train=False
    return make_model("my-mlp", DropoutMLP(num_classes), input_shape, num_classes, train_flag="train")


@plugins.model("my-cnn")
def make_my_cnn(input_shape, num_classes):
    if len(input_shape) != 3:
        raise ValueError(f"my-cnn needs images (H, W, C), got inputs of shape {tuple(input_shape)}")
    return make_model("my-cnn", SmallCNN(num_classes), input_shape, num_classes)
