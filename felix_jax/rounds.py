"""A plain federated round, for users who do not need the fleet (no clock, no availability).

``FederatedRound`` trains a cohort of clients from the global model in one vectorized
call, reduces their updates on the device with the padded rows weighted 0 (no
padded layout leaks out, no eager gather), and applies the server step::

    rounds = FederatedRound(model, data, LocalTrainConfig(batch_size=16))
    state = rounds.init(model.init(jax.random.key(0)))
    for r in range(10):
        state, metrics = rounds(state, clients=rng.choice(data.num_clients, 8, replace=False))

Weighting: ``"samples"`` (FedAvg: ``sum_i n_i delta_i / sum_i n_i``, with ``n_i`` the
samples client ``i`` trained on) or ``"uniform"`` (the plain mean over the cohort).
The server step is an optax transformation on the pseudo-gradient ``-mean``:
``optax.sgd(1.0)`` (the default) makes the new model the weighted mean of the
clients' models; FedAdam / FedYogi are ``optax.adam`` / ``optax.yogi``.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .cohort import CohortEngine, LocalTrainConfig, VersionStore
from .data.federated import FederatedData
from .fleet.server_optimizer import server_step
from .models.base import Model, Params


class RoundState(NamedTuple):
    params: Params  # the global model
    opt_state: Any  # the server optimizer's state
    round: int  # rounds completed


class RoundMetrics(NamedTuple):
    clients: np.ndarray  # (n,) the cohort
    weights: np.ndarray  # (n,) each client's share of the update (sums to 1)
    samples: np.ndarray  # (n,) samples each client trained on
    train_loss: np.ndarray  # (n,) each client's mean training loss


@jax.jit
def _weighted_sum(part, weights: jax.Array):
    """``sum_i w_i delta_i`` over one padded bucket (padded rows carry weight 0)."""
    return jax.tree_util.tree_map(lambda d: jnp.tensordot(weights, d, axes=1), part)


class FederatedRound:
    """One synchronous round = cohort training + weighted mean of the deltas + server step."""

    def __init__(self, model: Model, data: FederatedData, train_cfg: LocalTrainConfig, *,
                 server_optimizer: optax.GradientTransformation | None = None,
                 weighting: Literal["samples", "uniform"] = "samples", seed: int = 0, plan=None):
        if weighting not in ("samples", "uniform"):
            raise ValueError(f"weighting must be 'samples' or 'uniform', got {weighting!r}")
        self.model, self.weighting = model, weighting
        self.engine = CohortEngine(model, data, train_cfg, seed=seed, plan=plan)
        self.server_optimizer = server_optimizer or optax.sgd(1.0)
        self._store: VersionStore | None = None

    def init(self, params: Params) -> RoundState:
        return RoundState(params, self.server_optimizer.init(params), 0)

    def evaluate(self, state: RoundState, test):
        """Test accuracy and mean loss of the round's model on a held-out set
        (:func:`felix_jax.data.federated.held_out_to_device`): a ``HeldOutMetrics``."""
        from .cohort import evaluate

        return evaluate(self.model, state.params, test)

    def __call__(self, state: RoundState, clients) -> tuple[RoundState, RoundMetrics]:
        given = np.asarray(clients)
        if given.size and given.dtype.kind not in "iu":  # 1.5 or True would be cast to another client
            raise ValueError(f"clients must be integer client ids, got {given.dtype} values")
        clients = given.astype(np.int64).ravel()
        if clients.size == 0:
            raise ValueError("a round needs at least one client")
        n = self.engine.counts.size
        if clients.min() < 0 or clients.max() >= n:
            bad = clients[(clients < 0) | (clients >= n)]
            raise ValueError(f"client ids {bad[:5].tolist()} outside [0, {n})")
        if len(np.unique(clients)) != clients.size:
            raise ValueError("a client appears twice in the cohort")
        if self._store is None:
            self._store = VersionStore(state.params, capacity=1)
        self._store.put(0, state.params)
        # task ids (the clients' PRNG streams) from (round, position): a rerun of a round is identical
        task_ids = state.round * (self.engine.counts.size + 1) + np.arange(clients.size)
        out = self.engine.train(self._store.stacked, np.zeros(clients.size, np.int32), clients, task_ids)
        samples = np.asarray(out.all_steps.count, np.float64)
        raw = samples if self.weighting == "samples" else np.ones(clients.size)
        if raw.sum() <= 0:
            raise ValueError("the cohort trained on no samples")
        weights = raw / raw.sum()
        total = None
        for p, part in enumerate(out.parts):  # padded buckets: padded rows get weight 0
            size = jax.tree_util.tree_leaves(part)[0].shape[0]
            w = np.zeros(size, np.float32)
            mine = out.part_of == p
            w[out.rows[mine]] = weights[mine]
            s = _weighted_sum(part, jnp.asarray(w))
            total = s if total is None else jax.tree_util.tree_map(jnp.add, total, s)
        params, opt_state = server_step(self.server_optimizer, state.params, state.opt_state, total)
        loss = np.asarray(out.all_steps.sum, np.float64) / np.maximum(samples, 1.0)
        return RoundState(params, opt_state, state.round + 1), RoundMetrics(clients, weights, samples, loss)
