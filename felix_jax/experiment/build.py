"""A scenario's fleet: :func:`build_simulator` loads the data, splits it over the clients
(``partition``: Dirichlet, iid, by a natural key, the paper's client sizes, or a pool larger than
the data), checks that the population fits in memory, and assembles the cohort engine, the
availability trace, the device profile, the policies and the stop rule into a
:class:`~felix_jax.fleet.simulator.FleetSimulator`. :func:`run_config` is what ``config.json``
records of it. It runs nothing: runner.py runs what it builds."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ..cohort import CohortEngine, LocalEvalConfig, LocalTrainConfig
from ..cohort.adversary import make_adversaries
from ..cohort.budget import UNBOUNDED_BYTES, MemoryPlan, plan_memory, resolve_budget
from ..cohort.store import tree_bytes
from ..data.federated import held_out_to_device, to_device
from ..data.loaders import load_dataset
from ..data.partition import (Partition, dirichlet_partition, dirichlet_sized_partition, iid_partition, partition_by_key,
                              pool_partition, scale_counts)
from ..data.streams import build_streams, streams_to_device
from ..fleet.modes import AsyncMode, SyncMode
from ..fleet.running_sum import FOLD_ROWS, folds_on_arrival, held_rows
from ..fleet.simulator import FleetSimulator
from ..memory import check_fits, resident_bytes
from ..models.base import initial_params
from ..options import OptionError, to_json
from ..policies import make_aggregator, make_selector
from ..traces import load_reference_clients
from .registry import make_model, make_profile, make_trace, trace_bytes_estimate
from .resolution import check_fleet, fleet_config, stop_rule
from .scenario import Scenario


def build_simulator(sc: Scenario, on_checkpoint=None, on_partition=None) -> FleetSimulator:
    """The fleet for ``sc``. Raises :class:`~felix_jax.options.OptionError` (one line) for a
    scenario that is valid field by field but not as a whole, or not for its data.
    ``on_partition(partition, train_labels, num_classes)``: called with the clients' split once it
    is drawn (the results folder's partition files, split.py)."""
    resolved = sc.resolve_strategy()
    strategy = resolved.strategy
    check_fleet(sc, strategy)
    ds = load_dataset(sc.dataset)
    for field, wanted, have, kind in (("num_train", sc.num_train, len(ds.train_y), "training"),
                                      ("num_test", sc.num_test, len(ds.test_y), "test")):
        if wanted is not None and wanted > have:  # refused, not silently clamped
            raise OptionError(f"{field}={wanted}: data set {sc.dataset!r} has only {have} {kind} samples")
    if sc.num_train is not None or sc.num_test is not None:
        ds = ds.subset(sc.num_train, sc.num_test)
    seeds = np.random.SeedSequence(sc.seed).spawn(5)  # partition, trace, profile, model init, streams
    part_seed = int(seeds[0].generate_state(1)[0])
    _check_population(sc, len(ds.train_y))
    try:
        part = _partition(sc, ds, part_seed)
    except OptionError:
        raise
    except ValueError as e:  # what the data cannot give (too few samples of a key, of a class...): one line
        raise OptionError(f"partition={sc.partition} of {sc.num_clients} clients over data set {sc.dataset!r}: "
                          f"{e}") from None
    if on_partition is not None:
        on_partition(part, ds.train_y, ds.num_classes)
    model = make_model(sc.model, ds.input_shape, ds.num_classes)
    reading = sc.resolve_reading()
    train_cfg = LocalTrainConfig(batch_size=sc.batch_size, learning_rate=sc.learning_rate, mode=sc.local_mode,
                                 local_epochs=sc.local_epochs, local_steps=sc.local_steps, augment=sc.augment,
                                 min_one_step=reading.small_clients != "zero_step",
                                 utility_on_augmented=reading.utility_augmented)
    eval_cfg = LocalEvalConfig(batch_size=sc.batch_size, max_batches=sc.eval_max_batches)
    streams = None
    stream_cfg = sc.resolve_stream()
    if not stream_cfg.is_static:  # client data streams over the run's horizon (data/streams.py)
        streams = build_streams(part, ds.train_y, ds.num_classes, stream_cfg, sc.max_virtual_hours * 3600,
                                seed=seeds[4])
        part = Partition(streams.index_table, part.counts, part.num_samples, part.method + "+stream", part.repaired)
    data = to_device(ds, part)
    if streams is not None:
        data = data.replace(streams=streams_to_device(streams))
    adversary = sc.resolve_adversary()  # adversarial clients, drawn once for the run (cohort/adversary.py)
    adversaries = None if adversary is None else make_adversaries(adversary, sc.num_clients, ds.num_classes, sc.seed)
    engine = CohortEngine(model, data, train_cfg, eval_cfg, seed=sc.seed, plan=sc.plan, devices=sc.devices,
                          streams=streams, no_step=reference_zero_step(sc, reading.small_clients),
                          adversaries=adversaries,
                          prox_mu=fleet_config(sc, strategy).prox_mu)
    trace = make_trace(sc.availability, sc.num_clients, int(seeds[1].generate_state(1)[0]), sc.slot_s,
                       sc.max_virtual_hours * 3600, start_s=sc.trace_start_s, speedup=sc.trace_speedup,
                       form=sc.trace_form)
    profile = make_profile(sc.device_profile, sc.num_clients, int(seeds[2].generate_state(1)[0]))
    fleet_cfg = fleet_config(sc, strategy)
    aggregator = make_aggregator(strategy.aggregator, resolved.aggregator)
    stop = stop_rule(sc)
    init = initial_params(model, jax.random.key(int(seeds[3].generate_state(1)[0])))
    eval_selector = make_selector(strategy.eval_selector, resolved.eval_selector) if strategy.eval_selector else None
    test = held_out_to_device(ds)
    memory = run_memory_plan(sc, engine, init, test, fleet_cfg, strategy.mode, aggregator=aggregator,
                             population={"the data set's host copy": ds, "the availability trace": trace,
                                         "the device profile": profile, "the clients' split": part})
    return FleetSimulator(
        model=model, engine=engine, trace=trace, profile=profile, test=test, init_params=init, memory=memory,
        config=fleet_cfg, selector=make_selector(strategy.selector, resolved.selector), aggregator=aggregator,
        mode=SyncMode() if strategy.mode == "sync" else AsyncMode(), stop=stop, seed=sc.seed,
        eval_selector=eval_selector, update_guard=sc.resolve_update_guard(),
        eval_budget=resolved.eval_budget(sc.aggregation_goal),
        on_checkpoint=on_checkpoint,
        live_mix=streams.schedule.population_mix if streams is not None and stream_cfg.live_eval else None)


def run_memory_plan(sc: Scenario, engine: CohortEngine, init, test, fleet_cfg, mode: str,
                    population: dict | None = None, aggregator=None) -> MemoryPlan:
    """The run's memory plan under ``memory_budget_gb`` (cohort/budget.py); a budget that cannot hold
    the run's working set is refused here, before the run, in one line (BudgetError). On a CPU backend the
    rest of the process is counted first (:func:`process_share`; ``population``: the host objects built so
    far, by what they are). An ``aggregator`` whose updates are folded in as they arrive holds a group of
    them and what the update guard's median keeps, not the buffer (fleet/running_sum.py)."""
    budget, source = resolve_budget(sc.memory_budget_gb)
    stacked = jax.tree_util.tree_map(lambda p: jax.ShapeDtypeStruct((8,) + tuple(p.shape), p.dtype), init)
    aggregated = fleet_cfg.round_size if mode == "sync" else fleet_cfg.aggregation_goal  # updates an aggregation takes
    buffer_rows, fold_rows = aggregated, None
    if aggregator is not None and folds_on_arrival(aggregator, fleet_cfg):
        fold_rows = FOLD_ROWS
        size_known = not (mode == "sync" and aggregator.accepts_stale)  # a sync round's late updates: any number
        buffer_rows = FOLD_ROWS + held_rows(aggregated, sc.resolve_update_guard(), size_known)
    fixed = tree_bytes(engine.data) + tree_bytes(test)
    besides = process_share(sc, aggregated, fixed, population or {}) if budget < UNBOUNDED_BYTES else ()
    return plan_memory(engine, stacked, budget_bytes=budget, source=source, concurrency=sc.concurrency,
                       aggregation_goal=sc.aggregation_goal, buffer_rows=buffer_rows, fixed_bytes=fixed,
                       model_name=sc.model, flush_tasks=sc.flush_max_tasks, besides=besides, fold_rows=fold_rows)


# What a run grows by after its memory plan is made, besides the engine (measured on 2 CPU cores, the tiny
# MLP at 10^5 clients and c = 10^3 / 10^4: docs/architecture.md, "The memory budget"): the programs
# compiled after the plan (the measured call's, the aggregation's, the evaluation's, the stores': 90-100
# MB of XLA's code and compiler memory), each task in flight's records (the event queue, the pending
# task, its dispatch: ~1.2 KB), the run's records per aggregated update (the accounting's typed columns,
# ~48 B a task), and the figures written at its end (matplotlib and its canvases, ~35 MB; the updates
# per client, their percentiles and the fairness indices' sorted copy; the aggregated updates read back
# from events.csv, 16 B each and their hours).
COMPILE_BYTES = 128 * 2 ** 20
TASK_BYTES = 2048
RECORD_BYTES = 64
FIGURE_BYTES = 48 * 2 ** 20
FIGURE_CLIENT_BYTES = 40
FIGURE_UPDATE_BYTES = 24


def process_share(sc: Scenario, buffer_rows: int, fixed_bytes: int, population: dict) -> tuple[tuple[str, int], ...]:
    """What the process holds besides the engine, counted against a CPU run's budget before the engine
    gets what is left (:func:`~felix_jax.cohort.budget.plan_memory`): (what, bytes), in the order said.

    Measured: the resident memory now (``VmRSS``), which holds the jax/XLA runtime (its import and the
    first compilation, the initial model's), the data on the device (``fixed_bytes``, the engine's own
    part) and ``population``: the host objects built so far (their numpy arrays' bytes; the runtime is
    what the resident memory holds beyond them). Counted: the client map and each client's bookkeeping
    still to be built (:data:`CLIENT_OVERHEAD_BYTES` a client), what the run grows by (compilations,
    tasks in flight, its records) and the figures written at its end. Empty on an accelerator, whose
    budget is the device's memory (jax's allocator), and where the resident memory cannot be read."""
    held = resident_bytes()
    if jax.default_backend() != "cpu" or held is None:
        return ()
    built = [(what, host_array_bytes(obj)) for what, obj in population.items()]
    runtime = max(0, held - fixed_bytes - sum(b for _, b in built))
    n, c = sc.num_clients, sc.concurrency
    updates = sc.max_aggregations * buffer_rows  # at most, aggregated over the run
    return (("the jax/XLA runtime (measured)", runtime), *((what, b) for what, b in built if b),
            (f"the server view and bookkeeping of {n:,} clients", n * CLIENT_OVERHEAD_BYTES),
            ("compilations during the run", COMPILE_BYTES),
            (f"{c:,} tasks in flight", c * TASK_BYTES),
            (f"the run's records of up to {updates:,} updates", updates * RECORD_BYTES),
            ("the figures", FIGURE_BYTES + n * FIGURE_CLIENT_BYTES + updates * FIGURE_UPDATE_BYTES))


def host_array_bytes(obj) -> int:
    """The bytes of the numpy arrays ``obj`` holds (itself, or its attributes and theirs, two levels
    down: a dataset, a trace, a profile, a partition); other objects count nothing."""
    seen: set[int] = set()

    def walk(x, depth: int) -> int:
        if id(x) in seen:
            return 0
        seen.add(id(x))
        if isinstance(x, np.ndarray):  # a view counts its base, once
            return walk(x.base, depth) if isinstance(x.base, np.ndarray) else int(x.nbytes)
        if depth == 0:
            return 0
        if isinstance(x, (tuple, list)):  # a NamedTuple (a partition) too
            return sum(walk(v, depth - 1) for v in x)
        fields = vars(x) if hasattr(x, "__dict__") else (
            {f: getattr(x, f) for f in x.__slots__ if hasattr(x, f)} if hasattr(x, "__slots__") else {})
        return sum(walk(v, depth - 1) for v in fields.values())

    return walk(obj, 2)


def _partition(sc: Scenario, ds, part_seed: int) -> Partition:
    """The scenario's split of the training data over its clients."""
    if sc.partition == "dirichlet":
        return dirichlet_partition(ds.train_y, sc.num_clients, sc.alpha, seed=part_seed)
    elif sc.partition == "iid":
        return iid_partition(len(ds.train_y), sc.num_clients, seed=part_seed)
    elif sc.partition in ("natural", "speaker"):
        if ds.train_keys is None:
            raise OptionError(f"partition={sc.partition!r}: data set {ds.name} has no per-sample client ids "
                              "(speakers, writers...) to partition by")
        return partition_by_key(ds.train_keys, sc.num_clients, seed=part_seed)
    elif sc.partition == "reference":
        return dirichlet_sized_partition(ds.train_y, _paper_sizes(sc, sc.num_clients, len(ds.train_y)), sc.alpha,
                                         seed=part_seed)
    elif sc.partition == "pool":  # a population larger than the data: clients draw from the whole pool
        base = _paper_sizes(sc, min(300, len(ds.train_y)), len(ds.train_y))  # the paper's clients on this pool
        return pool_partition(ds.train_y, base[np.arange(sc.num_clients) % base.size], sc.alpha, seed=part_seed)
    else:
        raise KeyError(f"unknown partition {sc.partition!r}; known: dirichlet, iid, natural (speaker), reference, "
                       "pool")


def reference_zero_step(sc: Scenario, small_clients: str) -> np.ndarray | None:
    """``reading.small_clients=zero_step_reference``: the clients the FeLiX code's loader never trained in
    the paper's runs, those whose own size in the paper (the reference file, before a subset scaled it
    down) is under one batch (drop_last, AS-RUN A2: 57 of the 300 at batch 32), as a boolean per client;
    None for any other value. Needs the paper's clients (``partition=reference``) and the epoch loader
    (checked by :func:`check_fleet`)."""
    if small_clients != "zero_step_reference":
        return None
    return paper_client_sizes(sc.num_clients) < sc.batch_size


# a client's host and device memory besides its data rows and its trace (the server view, the device
# profile, the simulator's and the engine's bookkeeping: 148 bytes measured, docs/architecture.md
# "Memory per client"), with room for the run's own temporaries
CLIENT_OVERHEAD_BYTES = 192


def _check_population(sc: Scenario, num_samples: int) -> None:
    """The population against the data: every client of a split partition holds samples of its own, so
    more clients than training samples is refused (``pool`` clients draw from the whole set); and the
    clients' tables (the int32 index table, ``num_clients x`` the largest client, on the host and the
    device, and each client's bookkeeping) must fit in memory. Raises OptionError naming the field."""
    if sc.partition != "pool" and sc.num_clients > num_samples:
        raise OptionError(f"num_clients={sc.num_clients}: data set {sc.dataset!r} has {num_samples} training "
                          f"samples{' (num_train)' if sc.num_train is not None else ''}, fewer than the clients, "
                          f"and partition={sc.partition} gives each client samples of its own; use at most "
                          f"{num_samples} clients, more data, or partition=pool (clients draw from the whole set)")
    if sc.partition == "pool":  # the widest row: the largest of the paper's sizes on this pool
        widest = int(_paper_sizes(sc, min(300, num_samples), num_samples).max())
    else:  # rows of a split: the clients share the samples
        widest = -(-num_samples // sc.num_clients)
    n = sc.num_clients
    data_row = 2 * 4 * widest  # int32 index rows, built on the host and uploaded
    trace = trace_bytes_estimate(sc.availability, n, sc.slot_s,
                                 sc.max_virtual_hours * 3600 * sc.trace_speedup + sc.trace_start_s, sc.trace_form)
    per_client = data_row + CLIENT_OVERHEAD_BYTES + trace / max(n, 1)
    check_fits(n * per_client, f"num_clients={n}",
               f"the clients' tables (about {per_client:,.0f} bytes per client: data index rows {data_row:,}, "
               f"availability trace {trace / max(n, 1):,.0f} (trace_form={sc.trace_form}), view and profile "
               f"{CLIENT_OVERHEAD_BYTES})")


def _paper_sizes(sc: Scenario, num_clients: int, num_samples: int) -> np.ndarray:
    """:func:`reference_sizes` for ``partition=pool`` / ``reference``; an OptionError (one line) saying
    what they need where the data folder does not hold the paper's clients."""
    try:
        return reference_sizes(num_clients, num_samples)
    except FileNotFoundError as e:
        raise OptionError(f"partition={sc.partition} sizes its clients as the paper's 300 CIFAR-10 clients, read "
                          f"from the data folder: {e}; without it use partition=dirichlet or iid") from None


def reference_sizes(num_clients: int, num_samples: int) -> np.ndarray:
    """The paper's per-client CIFAR-10 sizes (shared reference file; cycled past 300
    clients), scaled in proportion when the data set holds fewer samples."""
    sizes = paper_client_sizes(num_clients)
    return scale_counts(sizes, num_samples) if sizes.sum() > num_samples else sizes


def paper_client_sizes(num_clients: int) -> np.ndarray:
    """Each client's own CIFAR-10 size in the paper (the shared reference file, cycled past its 300)."""
    return load_reference_clients().num_samples[np.arange(num_clients) % 300]


def run_config(sc: Scenario, sim: FleetSimulator) -> dict[str, Any]:
    """``config.json``: the scenario and everything resolved from it (known before the run starts)."""
    resolved = sc.resolve_strategy()
    return {"scenario": sc.to_json(), "strategy": resolved.strategy.to_json(), "policies": resolved.to_json(),
            "update_guard": to_json(sim.update_guard), "fleet": to_json(sim.cfg),
            "stop": to_json(sim.stop), "model": {"name": sim.model.name, "num_params": sim.model.num_params,
                      "bytes_on_wire": sim.model.bytes_on_wire},
            "backend": jax.default_backend(), "jax": jax.__version__}
