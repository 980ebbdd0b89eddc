"""q-FedAvg (Li, Sanjabi, Beirami, Smith, "Fair Resource Allocation in Federated Learning", ICLR 2020).

q-FFL minimises ``sum_k p_k F_k^{q+1}(w) / (q+1)``: the larger ``q``, the more the clients with a
high loss weigh (``q = 0`` is FedAvg's objective). q-FedAvg (Algorithm 2) turns each selected
client's local model ``w_k`` (E epochs of SGD from the global ``w^t``) into

    Delta w_k = L (w^t - w_k)
    Delta_k   = F_k^q(w^t) Delta w_k
    h_k       = q F_k^{q-1}(w^t) ||Delta w_k||^2 + L F_k^q(w^t)

and the server steps ``w^{t+1} = w^t - sum_k Delta_k / sum_k h_k``. With the client's update
``delta_k = w_k - w^t`` (``Delta w_k = -L delta_k``, ``||Delta w_k||^2 = L^2 ||delta_k||^2``) that is
the weighted sum ``w^{t+1} = w^t + sum_k a_k delta_k`` with ``a_k = L F_k^q / sum_j h_j``: a weight
per update, so q-FedAvg is an aggregator here. The server divides the weighted sum by the K'
accepted updates (``normalize=False``), so :func:`qfedavg_weights` returns ``K' a_k``.

``F_k(w^t)``: the task's mean loss over its first batch at the start model (``BufferInfo.start_loss``,
the loss before any local step, the batch Oort's utility measures; a caller that gives none: the mean
loss of its local steps, ``loss_mean``); the q-FFL code evaluates the client's whole training set at
``w^t`` (``flearn/trainers/qffedavg.py``: ``c.get_loss()``), which would cost every training task a
forward pass over all its data. ``F_k + 1e-10`` is raised to the
powers, as the q-FFL code does, so a zero loss with ``q < 1`` stays finite.
``L``: the Lipschitz estimate of the gradient; the q-FFL code takes ``L = 1/eta``, the inverse of the
clients' local step size (``qffedavg.py``: ``1.0/self.learning_rate``), which a scenario sets when it
leaves ``lipschitz`` unset (``Scenario.resolve_strategy``); the config's own default, 20, is that of
the default scenario's step size 0.05. The step is the paper's as it is:
``server_lr`` is 1 by default.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping

import numpy as np

from ...options import Range
from .base import Aggregator, BufferInfo

LOSS_FLOOR = 1e-10  # added to F_k before the powers (the q-FFL code's ``loss + 1e-10``)


@dataclasses.dataclass(frozen=True)
class QFedAvgConfig:
    q: float = 1.0  # fairness: 0 is FedAvg's objective; larger q weighs high-loss clients more
    # L, the Lipschitz estimate (Algorithm 2): 1 / the clients' learning rate, which a scenario sets unless
    # given (20: 1 / the default scenario's 0.05)
    lipschitz: float = 20.0
    server_lr: float = 1.0  # the paper's step as it is; another value scales it, as for every aggregator

    RANGES: ClassVar[Mapping[str, Range]] = {"q": Range.at_least(0), "lipschitz": Range.above(0),
                                             "server_lr": Range.above(0)}

    def __post_init__(self):
        if not (math.isfinite(self.q) and self.q >= 0):
            raise ValueError(f"q={self.q!r}: must be a finite number >= 0")
        if not (math.isfinite(self.lipschitz) and self.lipschitz > 0):
            raise ValueError(f"lipschitz={self.lipschitz!r}: must be a finite number > 0")
        if not (math.isfinite(self.server_lr) and self.server_lr > 0):
            raise ValueError(f"server_lr={self.server_lr!r}: must be a finite number > 0")


def qfedavg_weights(start_loss, delta_norms, q: float, lipschitz: float) -> np.ndarray:
    """q-FedAvg's weights ``K' L F_k^q / sum_j h_j`` (module docstring; Algorithm 2's Delta_k and h_k
    with ``||Delta w_k|| = L ||delta_k||``), for the server's ``sum_k w_k delta_k / K'``: (K',) float64.

    >>> w = qfedavg_weights([1.0, 4.0], [1.0, 0.5], q=1.0, lipschitz=2.0)
    >>> [round(float(x), 4) for x in w]  # h = [4 + 2, 1 + 8] = [6, 9]; a = [2, 8] / 15; times K' = 2
    [0.2667, 1.0667]
    """
    f = np.asarray(start_loss, np.float64) + LOSS_FLOOR
    sq = (lipschitz * np.asarray(delta_norms, np.float64)) ** 2  # ||Delta w_k||^2
    h = q * f ** (q - 1.0) * sq + lipschitz * f ** q
    return len(f) * lipschitz * f ** q / h.sum()


def make_qfedavg(config: QFedAvgConfig = QFedAvgConfig()) -> Aggregator:
    def weights(info: BufferInfo) -> np.ndarray:
        losses = info.loss_mean if info.start_loss is None else info.start_loss
        return qfedavg_weights(losses, info.delta_norms, config.q, config.lipschitz)

    return Aggregator("qfedavg", weights, normalize=False, server_lr=config.server_lr, accepts_stale=False)
