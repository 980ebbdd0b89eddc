"""Model zoo: every entry is a :class:`Model` (init, apply, loss, sizes)."""

from .base import Model, count_params, initial_params, make_model, params_bytes
from .cifar_cnn import CifarCNN, cifar_cnn
from .layers import Conv3x3, conv3x3, conv3x3_shifted, max_pool_2x2
from .mlp import MLP, mlp
from .speech_cnn import SpeechCNN, speech_cnn
from .speech_resnet import SpeechResNet, speech_resnet

__all__ = [
    "Model", "count_params", "initial_params", "make_model", "params_bytes", "CifarCNN", "cifar_cnn", "Conv3x3", "conv3x3",
    "conv3x3_shifted", "max_pool_2x2", "MLP", "mlp", "SpeechCNN", "speech_cnn",
    "SpeechResNet", "speech_resnet",
]
