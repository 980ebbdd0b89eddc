"""``run(scenario) -> RunResult``: builds the fleet from a scenario and runs it (host)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..cohort import CohortEngine, LocalEvalConfig, LocalTrainConfig
from ..data.federated import held_out_to_device, to_device
from ..data.loaders import load_dataset
from ..data.partition import (dirichlet_partition, dirichlet_sized_partition, iid_partition, partition_by_key,
                              scale_counts)
from ..traces import load_reference_clients
from ..fleet.config import FleetConfig, StopRule
from ..fleet.modes import AsyncMode, SyncMode
from ..fleet.simulator import Checkpoint, FleetSimulator, RunRecord
from ..options import to_json
from ..policies import make_aggregator, make_selector
from .registry import make_model, make_profile, make_trace
from .results import summarize, write_results
from .scenario import Scenario


@dataclasses.dataclass
class RunResult:
    scenario: Scenario
    record: RunRecord
    summary: dict
    out_dir: Path | None


def build_simulator(sc: Scenario, on_checkpoint=None) -> FleetSimulator:
    resolved = sc.resolve_strategy()
    strategy = resolved.strategy
    ds = load_dataset(sc.dataset)
    if sc.num_train is not None or sc.num_test is not None:
        ds = ds.subset(sc.num_train, sc.num_test)
    seeds = np.random.SeedSequence(sc.seed).spawn(4)  # partition, trace, profile, model init
    part_seed = int(seeds[0].generate_state(1)[0])
    if sc.partition == "dirichlet":
        part = dirichlet_partition(ds.train_y, sc.num_clients, sc.alpha, seed=part_seed)
    elif sc.partition == "iid":
        part = iid_partition(len(ds.train_y), sc.num_clients, seed=part_seed)
    elif sc.partition == "speaker":
        if ds.train_keys is None:
            raise ValueError(f"data set {ds.name} has no per-sample keys (speaker ids) to partition by")
        part = partition_by_key(ds.train_keys, sc.num_clients, seed=part_seed)
    elif sc.partition == "reference":
        part = dirichlet_sized_partition(ds.train_y, reference_sizes(sc.num_clients, len(ds.train_y)), sc.alpha,
                                         seed=part_seed)
    else:
        raise KeyError(f"unknown partition {sc.partition!r}; known: dirichlet, iid, speaker, reference")
    model = make_model(sc.model, ds.input_shape, ds.num_classes)
    train_cfg = LocalTrainConfig(batch_size=sc.batch_size, learning_rate=sc.learning_rate, mode=sc.local_mode,
                                 local_epochs=sc.local_epochs, local_steps=sc.local_steps, augment=sc.augment)
    eval_cfg = LocalEvalConfig(batch_size=sc.batch_size, max_batches=sc.eval_max_batches)
    engine = CohortEngine(model, to_device(ds, part), train_cfg, eval_cfg, seed=sc.seed, plan=sc.plan)
    trace = make_trace(sc.availability, sc.num_clients, int(seeds[1].generate_state(1)[0]), sc.slot_s,
                       sc.max_virtual_hours * 3600)
    profile = make_profile(sc.device_profile, sc.num_clients, int(seeds[2].generate_state(1)[0]))
    fleet_cfg = FleetConfig(mode=strategy.mode, knowledge=strategy.knowledge, concurrency=sc.concurrency,
                            aggregation_goal=sc.aggregation_goal, overcommit=sc.overcommit, timeout_s=sc.timeout_s,
                            interruption=sc.interruption, sees_eval_tier=strategy.eval_selector is not None,
                            server_optimizer=sc.server_optimizer, timeout_frees_slot=sc.timeout_frees_slot,
                            utility_from=sc.utility_from)
    aggregator = make_aggregator(strategy.aggregator, resolved.aggregator)
    stop = StopRule(target_accuracy=sc.target_accuracy, max_virtual_s=sc.max_virtual_hours * 3600,
                    max_aggregations=sc.max_aggregations, eval_every=sc.eval_every)
    init = model.init(jax.random.key(int(seeds[3].generate_state(1)[0])))
    eval_selector = make_selector(strategy.eval_selector, resolved.eval_selector) if strategy.eval_selector else None
    return FleetSimulator(
        model=model, engine=engine, trace=trace, profile=profile, test=held_out_to_device(ds), init_params=init,
        config=fleet_cfg, selector=make_selector(strategy.selector, resolved.selector), aggregator=aggregator,
        mode=SyncMode() if strategy.mode == "sync" else AsyncMode(), stop=stop, seed=sc.seed,
        eval_selector=eval_selector, update_guard=sc.resolve_update_guard(),
        eval_budget=resolved.eval_selector.budget(sc.aggregation_goal) if eval_selector else 0,
        on_checkpoint=on_checkpoint)


def reference_sizes(num_clients: int, num_samples: int) -> np.ndarray:
    """The paper's per-client CIFAR-10 sizes (shared reference file; cycled past 300
    clients), scaled in proportion when the data set holds fewer samples."""
    sizes = load_reference_clients().num_samples[np.arange(num_clients) % 300]
    return scale_counts(sizes, num_samples) if sizes.sum() > num_samples else sizes


class _Progress:
    """A tqdm bar over virtual hours with version / accuracy in the postfix."""

    def __init__(self, sc: Scenario, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=round(sc.max_virtual_hours, 2), unit="vh", file=sys.stderr, leave=True,
                            desc=f"{sc.strategy}/{sc.availability}", bar_format="{l_bar}{bar}| {n:.2f}/{total} "
                            "virtual h [{elapsed}<{remaining}{postfix}]")

    def __call__(self, cp: Checkpoint) -> None:
        if self.bar is not None:
            self.bar.n = round(min(cp.time_s / 3600, self.bar.total), 2)
            self.bar.set_postfix_str(f"v{cp.version} acc {cp.accuracy:.3f}", refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(sc: Scenario, out_dir: str | Path | None = None, progress: bool = False, plot: bool = True) -> RunResult:
    bar = _Progress(sc, progress)
    sim = build_simulator(sc, on_checkpoint=bar)
    try:
        record = sim.run()
    finally:
        bar.close()
    summary = summarize(record, sc.seed, sim.engine.batch_summary())
    summary["flush_tasks_mean"] = float(np.mean(sim.executor.flush_sizes)) if sim.executor.flush_sizes else 0.0
    resolved = sc.resolve_strategy()
    config: dict[str, Any] = {"scenario": sc.to_json(), "strategy": resolved.strategy.to_json(),
                              "policies": resolved.to_json(), "update_guard": to_json(sim.update_guard),
                              "fleet": to_json(sim.cfg), "model": {"name": sim.model.name,
                              "num_params": sim.model.num_params, "bytes_on_wire": sim.model.bytes_on_wire},
                              "backend": jax.default_backend(), "jax": jax.__version__}
    out = write_results(out_dir, config, record, summary, plot=plot) if out_dir is not None else None
    return RunResult(sc, record, summary, out)
