"""A short synchronous-FedAvg demo of the cohort engine on the embedded digits.

Each round samples clients, trains them all in one vectorized cohort call, averages
their deltas weighted by sample count (FedAvg), and evaluates on the test split.
It prints throughput (client samples trained per second) and accuracy. No
availability, no virtual clock: that is ``felix-jax run``'s job.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np
import optax

from .cohort import LocalTrainConfig, evaluate
from .data.federated import held_out_to_device, to_device
from .data.loaders import load_dataset
from .data.partition import dirichlet_partition
from .models import cifar_cnn, initial_params
from .rounds import FederatedRound


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    dataset: str = "digits"
    num_clients: int = 30
    alpha: float = 1.0
    clients_per_round: int = 16
    rounds: int = 12
    batch_size: int = 16
    learning_rate: float = 0.05
    local_epochs: int = 1
    server_lr: float = 1.0
    seed: int = 0

    def __post_init__(self):
        for name in ("num_clients", "clients_per_round", "rounds", "batch_size", "local_epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be a whole number >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2 ** 32:
            raise ValueError(f"seed={self.seed!r}: must be an integer in [0, 2^32)")
        if self.clients_per_round > self.num_clients:
            raise ValueError(f"clients_per_round={self.clients_per_round}: more than num_clients={self.num_clients}")
        for name in ("alpha", "learning_rate", "server_lr"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"{name}={value!r}: must be a finite number > 0")


def run_demo(cfg: DemoConfig = DemoConfig(), log=print) -> dict:
    ds = load_dataset(cfg.dataset)
    part = dirichlet_partition(ds.train_y, cfg.num_clients, cfg.alpha, seed=cfg.seed)
    data, test = to_device(ds, part), held_out_to_device(ds)
    model = cifar_cnn()
    train_cfg = LocalTrainConfig(batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                                 local_epochs=cfg.local_epochs)
    rounds = FederatedRound(model, data, train_cfg, server_optimizer=optax.sgd(cfg.server_lr), seed=cfg.seed)
    engine = rounds.engine
    state = rounds.init(initial_params(model, jax.random.key(cfg.seed)))
    rng = np.random.default_rng(cfg.seed)
    sizes = part.size_stats()
    log(f"{ds.name}: {ds.train_x.shape[0]} train / {ds.test_x.shape[0]} test, {cfg.num_clients} clients "
        f"(Dirichlet {cfg.alpha}; sizes min {sizes['min']:.0f} median {sizes['median']:.0f} max {sizes['max']:.0f}); "
        f"{model.name}: {model.num_params:,} params; backend {jax.default_backend()}, plan {engine.plan}")
    history, trained, busy = [], 0, 0.0
    for r in range(cfg.rounds):
        clients = rng.choice(cfg.num_clients, cfg.clients_per_round, replace=False)
        t0, n_calls = time.perf_counter(), len(engine.records)
        # FedAvg: the new model is the sample-weighted mean of the clients' models (server_lr 1)
        state, metrics = rounds(state, clients)
        jax.block_until_ready(state.params)
        dt = time.perf_counter() - t0
        samples = int(metrics.samples.sum())
        if not any(rec.compiled for rec in engine.records[n_calls:]):
            trained, busy = trained + samples, busy + dt  # rounds that compiled a new bucket excluded
        m = evaluate(model, state.params, test)
        history.append({"round": r + 1, "accuracy": m.accuracy, "loss": m.loss, "seconds": dt, "samples": samples})
        log(f"round {r + 1:3d}  acc {m.accuracy:6.2%}  loss {m.loss:.3f}  {samples:5d} samples in {dt:5.2f} s")
    throughput = trained / busy if busy else None  # None: every round compiled a new shape, no clean timing
    shown = "- (every round compiled)" if throughput is None else f"{throughput:,.0f}"
    log(f"throughput (rounds without compilation): {shown} client samples/s; "
        f"final accuracy {history[-1]['accuracy']:.2%}")
    return {"history": history, "samples_per_s": throughput, "final_accuracy": history[-1]["accuracy"],
            "batches": engine.batch_summary()}
