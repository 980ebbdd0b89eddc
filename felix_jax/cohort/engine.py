"""The cohort engine: many clients' local training / evaluation in one device call.

Host side: bucket the flush (``buckets.py``), pad each bucket to a power-of-two
task count, call one jitted function per bucket, put results back in task order.
Device side: per task, gather the start parameters from the version store by
slot, derive the task key as ``fold_in(base_key, task_id)``, and run
``local_train`` / ``local_eval`` under the execution plan (vmap / lax.map /
chunks). Padded tasks take zero steps and are sliced off: they change no result.

Several devices (``devices``, default all that jax sees): each bucket's task
arrays are sharded over a ``jax.sharding.Mesh`` with one "clients" axis, dealt
round-robin so every device gets a sorted share of the work; the data set and the
version store are replicated; each device runs the per-device plan on its share
(``jax.shard_map`` under ``jax.jit``) and the outputs are gathered onto every
device (``out_shardings`` replicated). Bucket sizes become a power of two per
device. The host reads results from its first device, so nothing after the call
changes (``plan.py``, "several devices"). ``devices=1`` is the single-device path.

``backend='debug'`` runs the very same per-client functions un-jitted, one task
at a time in Python: the reference for parity tests (fedjax's debug backend).

``debug_checks`` (default: ``$FELIX_JAX_DEBUG_CHECKS``, read once here) checks the shapes and
dtypes of each call's inputs and outputs and that every client update is finite (``checks.py``);
off, it costs one boolean test per call.
"""

from __future__ import annotations

import time
from functools import lru_cache, partial
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..data.federated import FederatedData
from ..data.streams import ClientStreams
from ..models.base import Model, Params
from . import checks
from .adversary import Adversaries, attacked_train, local_train_attacked
from .buckets import next_pow2, plan_buckets
from .call_log import CallLog, CallRecord  # noqa: F401  (CallRecord importable from here, as before)
from .config import LocalEvalConfig, LocalTrainConfig
from .local import (EvalResult, eval_final, eval_init, eval_step, local_eval, local_train, train_final,
                    train_init, train_step)
from .plan import (CLIENTS_AXIS, ExecutionPlan, auto_plan, cohort_devices, cohort_scan, local_copy, place_by_task,
                   place_replicated, sharded_cohort, task_layout)
from .stats import LossStats


class CohortTrainOutput(NamedTuple):
    """Results of a flush of training tasks; host statistics in the order the tasks were given.

    The deltas stay on the device as the padded per-bucket outputs (``parts``):
    task ``i``'s delta is row ``rows[i]`` of ``parts[part_of[i]]``. Reordering them
    would cost an eager gather (and a compile) per new shape; the fleet scatters
    the parts into its delta store instead. ``delta`` builds the stacked, task-
    ordered deltas on demand (demos, tests).
    """

    parts: tuple  # per bucket: delta pytree with leaves (bucket size, ...), on the engine's first device
    part_of: np.ndarray  # (n,) int: which part holds task i
    rows: np.ndarray  # (n,) int: its row in that part
    first_batch: LossStats  # numpy (n,) each
    all_steps: LossStats  # numpy (n,) each
    num_steps: np.ndarray  # (n,) int32

    @property
    def delta(self) -> Params:
        pieces = [jax.tree_util.tree_map(lambda d, r=jnp.asarray(self.rows[self.part_of == p]): d[r], part)
                  for p, part in enumerate(self.parts)]
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *pieces)
        order = np.concatenate([np.flatnonzero(self.part_of == p) for p in range(len(self.parts))])
        inv = jnp.asarray(np.argsort(order, kind="stable"))
        return jax.tree_util.tree_map(lambda d: d[inv], stacked)


class CohortEvalOutput(NamedTuple):
    stats: LossStats  # numpy (n,) each
    correct: np.ndarray  # (n,) float32


# The fixed cost of one more device call, in task-steps, by backend (``plan_buckets``'s
# ``call_overhead``): the bucketing merges task lengths into fewer, padded calls while a call costs
# more than the padding it saves. CPU: 8, tuned on the 2-core machine (BENCHMARKS.md, "bucketing").
# Accelerators: a call's cost hardly grows with its tasks. On one H200 (paper CNN, 5 steps x batch 32)
# 32 tasks took 48 ms, 128 tasks 73 ms and 512 tasks 201 ms: fitting t = a + b x task-steps gives a
# call overhead a / b of 450-750 task-steps, so 512.
CALL_OVERHEAD = {"cpu": 8}
ACCELERATOR_CALL_OVERHEAD = 512


def default_call_overhead(backend: str | None = None) -> int:
    """The bucketing's per-call overhead (task-steps) for ``backend`` (default: jax's)."""
    return CALL_OVERHEAD.get(backend or jax.default_backend(), ACCELERATOR_CALL_OVERHEAD)


def _stats_to_host(stats: LossStats, idx: np.ndarray) -> LossStats:
    return LossStats(*(np.asarray(v)[idx] for v in stats))


_COHORT_FNS = {"train": (train_init, train_step, train_final), "eval": (eval_init, eval_step, eval_final)}


@lru_cache(maxsize=64)
def _cohort_jit(kind: str, model: Model, cfg, attack=None):
    """The single-device jitted cohort program of ``kind`` for ``model`` and its local config: one per
    (model, config) in the process, so every engine of the same model and config (the cells of a
    matrix, the runs of a comparison, a resumed run) reuses the programs an earlier one traced and
    compiled instead of tracing them again (jax caches by the function object; a fresh ``jax.jit`` per
    engine would start empty). The model is a tuple of functions, hashed by identity: the built-in
    models are made once per (name, input shape, classes) (``experiment.registry.make_model``). ``attack``:
    a training cohort whose tasks may be adversarial (:mod:`.adversary`; each task's flag an argument)."""
    init, step, final = _COHORT_FNS[kind] if attack is None else attacked_train(attack)
    return jax.jit(partial(run_cohort, init, step, final, model, cfg), static_argnames=("scan_len", "plan"))


class CohortEngine:
    """Runs padded batches of client tasks; see the module docstring."""

    def __init__(self, model: Model, data: FederatedData, train_cfg: LocalTrainConfig,
                 eval_cfg: LocalEvalConfig | None = None, *, seed: int = 0,
                 backend: Literal["jit", "debug"] = "jit", plan: ExecutionPlan | str | None = None,
                 max_tasks_per_call: int = 256, min_tasks_per_call: int | None = None, devices: int | None = None,
                 streams: ClientStreams | None = None, call_overhead: int | None = None,
                 no_step: np.ndarray | None = None, debug_checks: bool | None = None, prox_mu: float = 0.0,
                 adversaries: Adversaries | None = None):
        if backend not in ("jit", "debug"):
            raise ValueError(f"backend must be 'jit' or 'debug', got {backend!r}")
        self.model = model
        self.data = data
        self.train_cfg = train_cfg
        self.eval_cfg = eval_cfg or LocalEvalConfig(batch_size=train_cfg.batch_size)
        self.backend = backend
        self.plan = ExecutionPlan.parse(plan) if isinstance(plan, str) else (plan or auto_plan())
        self.max_tasks_per_call = max_tasks_per_call
        self.call_overhead = default_call_overhead() if call_overhead is None else int(call_overhead)
        if self.call_overhead < 0:
            raise ValueError(f"call_overhead must be >= 0 task-steps, got {call_overhead}")
        # a sweep batch routes this engine's calls through a shared cohort (experiment/sweep.py):
        # ``shared(kind, engine, stacked_params, slots, clients, task_ids, times) -> output``, blocking until
        # the batch's flush; None: its own calls
        self.shared = None
        # the debug backend is the one-task-at-a-time reference: always one device
        self.devices = cohort_devices(devices) if backend == "jit" else cohort_devices(1)
        self.num_devices = len(self.devices)
        # Small flushes are padded up to one chunk (per device): padded tasks are skipped by
        # the step scan, and fewer distinct shapes mean fewer compilations.
        per_device = self.plan.chunk if self.plan.kind == "chunked" else 1
        self.min_tasks_per_call = max(min_tasks_per_call or (1 if self.plan.kind == "vmap" else
                                                             8 if self.plan.kind == "map" else self.plan.chunk),
                                      next_pow2(self.num_devices * per_device))
        if self.min_tasks_per_call > max_tasks_per_call:
            raise ValueError(f"max_tasks_per_call={max_tasks_per_call} is below one chunk per device "
                             f"({self.min_tasks_per_call} tasks on {self.num_devices} devices)")
        self._chunk = None if self.plan.kind == "vmap" else (1 if self.plan.kind == "map" else self.plan.chunk)
        self.base_key = jax.random.key(seed)
        self._key_data = jax.random.key_data(self.base_key)[None]  # (1, key data): see run_cohort
        # FedProx's proximal weight of every training task (local.train_step): an argument of the compiled
        # call, not of its config, so runs with other mu share its programs
        if not (np.isfinite(prox_mu) and prox_mu >= 0):
            raise ValueError(f"prox_mu must be a finite number >= 0, got {prox_mu!r}")
        self.prox_mu = float(prox_mu)
        self._prox_mus = jnp.full((1,), self.prox_mu, jnp.float32)  # (1,): one per experiment, see run_cohort
        # tasks that run fewer local steps than their client's (a partial update: FedProx's interruption mode
        # ``partial``, fleet/lifecycle.py): task id -> steps, set at dispatch by the fleet (set_step_limit)
        self._step_limits: dict[int, int] = {}
        self.counts = np.asarray(jax.device_get(data.counts))
        # clients that take no training step whatever they hold (a boolean per client; None: none), e.g. the
        # FeLiX code's zero-step clients picked by their size at the paper's scale (fleet/reading.py)
        if no_step is not None:
            no_step = np.asarray(no_step)
            if no_step.dtype != bool or no_step.shape != self.counts.shape:
                raise ValueError(f"no_step must be one boolean per client ({self.counts.shape}), got "
                                 f"{no_step.dtype} {no_step.shape}")
        self.no_step = no_step
        # adversarial clients (cohort/adversary.py): the attack, and a boolean per client, fixed over the run;
        # a training task carries its client's flag into the compiled call (None: no adversaries, no flag)
        self.attack, self.adversarial = (None, None) if adversaries is None else adversaries
        if self.adversarial is not None:
            self.adversarial = np.asarray(self.adversarial)
            if self.adversarial.dtype != bool or self.adversarial.shape != self.counts.shape:
                raise ValueError(f"adversaries: one boolean per client ({self.counts.shape}), got "
                                 f"{self.adversarial.dtype} {self.adversarial.shape}")
        # client streams: a task's data (and so its length) depends on its start time (data/streams.py)
        if (streams is None) != (data.streams is None):
            raise ValueError("the engine's host stream tables and the device data's must come together")
        self.streams = streams
        # One compiled scan length per engine (the longest task any client can get);
        # chunks stop early, so shapes depend on the task count only.
        most = self.counts if streams is None else np.full(len(self.counts), streams.max_usable)
        self.train_scan_len = int(self.train_cfg.num_steps(most).max(initial=1))
        self.eval_scan_len = int(self.eval_cfg.num_batches(most).max(initial=1))
        self.records = CallLog()  # every call's totals and the last calls' records (call_log.py)
        self._seen_shapes: set[tuple] = set()
        self.debug_checks = checks.debug_checks_from_env() if debug_checks is None else bool(debug_checks)
        self._template = None  # the model's parameter shapes, for the debug checks (on first use)
        if self.num_devices == 1:
            self._mesh = None
            self._train_jit = _cohort_jit("train", model, train_cfg, self.attack)
            self._eval_jit = _cohort_jit("eval", model, self.eval_cfg)
        else:
            self._mesh = jax.sharding.Mesh(np.array(self.devices), (CLIENTS_AXIS,))
            self._data_on_mesh = place_replicated(data, self._mesh)  # once: the data never changes
            # results are read on this process's first mesh device, where single-device code would put them
            self._home = next(d for d in self.devices if d.process_index == jax.process_index())
            fns = (train_init, train_step, train_final) if self.attack is None else attacked_train(self.attack)
            self._train_jit = self._sharded(*fns, train_cfg, self.train_scan_len, self.attack is not None)
            self._eval_jit = self._sharded(eval_init, eval_step, eval_final, self.eval_cfg, self.eval_scan_len)

    # ---- host API -------------------------------------------------------------------
    def sample_counts(self, clients, times=None) -> np.ndarray:
        """Samples each client holds (with streams: usable at ``times[i]``, seconds)."""
        clients = np.asarray(clients)
        if self.streams is None:
            return self.counts[clients]
        if times is None:
            raise ValueError("client streams: a task's data depends on its start time; pass times")
        return self.streams.counts(clients, times)

    def num_train_steps(self, clients, times=None) -> np.ndarray:
        steps = self.train_cfg.num_steps(self.sample_counts(clients, times))
        if self.no_step is not None:
            steps = np.where(self.no_step[np.asarray(clients)], 0, steps).astype(np.int32)
        return steps

    def set_step_limit(self, task_id: int, steps: int | None) -> None:
        """Training task ``task_id`` runs ``steps`` local steps instead of its client's (the steps it
        finished before its client left: a partial update); ``None`` forgets the limit (its result taken)."""
        if steps is None:
            self._step_limits.pop(int(task_id), None)
        else:
            self._step_limits[int(task_id)] = int(steps)

    def train_lengths(self, clients, task_ids, times=None) -> np.ndarray:
        """Local steps of each training task: its client's (:meth:`num_train_steps`), or fewer where the
        task has a step limit (:meth:`set_step_limit`)."""
        steps = self.num_train_steps(clients, times)
        if self._step_limits:
            limits = np.array([self._step_limits.get(int(t), -1) for t in np.asarray(task_ids)], np.int64)
            steps = np.where(limits >= 0, np.minimum(steps, limits), steps).astype(np.int32)
        return steps

    def takes_no_step(self, client: int, count: int) -> bool:
        """Whether ``client``, holding ``count`` samples, gets no batch from its loader (a zero-step client:
        its training task takes no step, its eval task forwards nothing)."""
        small = int(self.train_cfg.num_steps(np.asarray([count]))[0]) == 0  # the loader's own rule
        return bool(small or (self.no_step is not None and self.no_step[client]))

    def num_eval_batches(self, clients, times=None) -> np.ndarray:
        return self.eval_cfg.num_batches(self.sample_counts(clients, times))

    def train(self, stacked_params: Params, slots, clients, task_ids, times=None, sink=None) -> CohortTrainOutput:
        """Trains tasks (client ``clients[i]`` from store slot ``slots[i]``, key from ``task_ids[i]``;
        with client streams, on the data it holds at ``times[i]``).

        ``sink(part, positions, rows)``, if given, takes each device call's deltas as the call ends
        (``part``: leaves (bucket size, ...); task ``positions[j]`` of this flush is row ``rows[j]``),
        and the output then holds no deltas (``parts`` empty): a flush holds one call's deltas at a
        time instead of all of them (the executor writes them into its delta store). Calls that return
        a whole flush at once (the debug backend, a sweep batch's shared calls) hand their parts to
        ``sink`` after the last call."""
        slots, clients, task_ids, times = self._check(slots, clients, task_ids, times)
        if not self.debug_checks:
            out = self._train(stacked_params, slots, clients, task_ids, times, sink)
        else:
            checks.check_inputs(self._param_template(), stacked_params, slots)
            out = self._train(stacked_params, slots, clients, task_ids, times, None)
            checks.check_train_output(self._param_template(), out, clients, task_ids)
        if sink is not None and out.parts:
            out = _drain(out, sink)
        return out

    def _train(self, stacked_params, slots, clients, task_ids, times, sink=None) -> CohortTrainOutput:
        if self.shared is not None:
            return self.shared("train", self, stacked_params, slots, clients, task_ids, times)
        steps = self.train_lengths(clients, task_ids, times)
        if self.backend == "debug":
            return self._train_debug(stacked_params, slots, clients, task_ids, steps, times)
        parts, order = [], []
        for b in self._buckets(steps):
            args, rows = self._task_args(b, slots, clients, task_ids, times, steps)
            attackers = self._task_attackers(b, clients)
            out = self._timed("train", b, args[-1], lambda: self._call(
                self._train_jit, stacked_params, args, self.train_scan_len, attackers))
            if sink is not None:  # the call's deltas leave now; its statistics stay (a few floats a task)
                sink(out.delta, b.indices, rows)
                out = out._replace(delta=None)
            parts.append((out, rows))
            order.append(b.indices)
        assembled = _assemble_train(parts, np.concatenate(order))
        return assembled._replace(parts=()) if sink is not None else assembled

    def evaluate(self, stacked_params: Params, slots, clients, task_ids, times=None) -> CohortEvalOutput:
        """Forward-pass eval tasks over each client's data (cheap utility refresh)."""
        slots, clients, task_ids, times = self._check(slots, clients, task_ids, times)
        if not self.debug_checks:
            return self._evaluate(stacked_params, slots, clients, task_ids, times)
        checks.check_inputs(self._param_template(), stacked_params, slots)
        out = self._evaluate(stacked_params, slots, clients, task_ids, times)
        checks.check_eval_output(out, len(clients))
        return out

    def _evaluate(self, stacked_params, slots, clients, task_ids, times) -> CohortEvalOutput:
        if self.shared is not None:
            return self.shared("eval", self, stacked_params, slots, clients, task_ids, times)
        batches = self.num_eval_batches(clients, times)
        if self.backend == "debug":
            return self._eval_debug(stacked_params, slots, clients, task_ids, batches, times)
        stats_parts, correct_parts, order = [], [], []
        for b in self._buckets(batches):
            args, rows = self._task_args(b, slots, clients, task_ids, times, batches)
            out: EvalResult = self._timed("eval", b, args[-1], lambda: self._call(
                self._eval_jit, stacked_params, args, self.eval_scan_len))
            host = jax.device_get(out)
            stats_parts.append(LossStats(*(np.asarray(v)[rows] for v in host.stats)))
            correct_parts.append(np.asarray(host.correct)[rows])
            order.append(b.indices)
        inv = np.argsort(np.concatenate(order), kind="stable")
        stats = LossStats(*(np.concatenate([getattr(s, f) for s in stats_parts])[inv] for f in LossStats._fields))
        return CohortEvalOutput(stats, np.concatenate(correct_parts)[inv])

    def batch_summary(self) -> dict:
        """Achieved batch sizes, padding waste and timing over all calls so far."""
        return self.records.summary()

    # ---- internals ------------------------------------------------------------------
    def _param_template(self):
        if self._template is None:
            self._template = checks.param_template(self.model)
        return self._template

    def _check(self, slots, clients, task_ids, times=None):
        slots = np.asarray(slots, np.int32).reshape(-1)
        clients = np.asarray(clients, np.int32).reshape(-1)
        task_ids = np.asarray(task_ids, np.int32).reshape(-1)
        if not (len(slots) == len(clients) == len(task_ids)):
            raise ValueError(f"slots/clients/task_ids lengths differ: {len(slots)}, {len(clients)}, {len(task_ids)}")
        if len(clients) and (clients.min() < 0 or clients.max() >= len(self.counts)):
            raise ValueError(f"client ids must lie in [0, {len(self.counts)})")
        if times is None:
            if self.streams is not None:
                raise ValueError("client streams: a task's data depends on its start time; pass times")
            times = np.zeros(len(clients), np.float32)  # static data: time plays no part
        times = np.asarray(times, np.float32).reshape(-1)
        if len(times) != len(clients):
            raise ValueError(f"times has {len(times)} entries for {len(clients)} tasks")
        return slots, clients, task_ids, times

    def _buckets(self, lengths: np.ndarray):
        return plan_buckets(lengths, self.max_tasks_per_call, self.call_overhead, min_tasks=self.min_tasks_per_call,
                            chunk=self._chunk, devices=self.num_devices)

    def _task_args(self, bucket, slots, clients, task_ids, times, lengths):
        """The bucket's padded task arrays (host numpy, in device order) and each real task's row."""
        args = pad_task_args(bucket.num_tasks, slots[bucket.indices], clients[bucket.indices],
                              task_ids[bucket.indices], times[bucket.indices], lengths[bucket.indices])
        layout = task_layout(bucket.num_tasks, self.num_devices)
        rows = np.argsort(layout, kind="stable")[:len(bucket.indices)]
        return tuple(a[layout] for a in args), rows

    def attackers_of(self, clients) -> np.ndarray | None:
        """Each task's adversary flag, its client's (bool); None for an engine without adversaries."""
        return None if self.attack is None else self.adversarial[np.asarray(clients)]

    def _task_attackers(self, bucket, clients) -> np.ndarray | None:
        """The bucket's adversary flags, padded (padding is honest) and in device order, as ``_task_args``."""
        flags = self.attackers_of(clients[bucket.indices])
        if flags is None:
            return None
        padded = np.concatenate([flags, np.zeros(bucket.num_tasks - len(flags), bool)])
        return padded[task_layout(bucket.num_tasks, self.num_devices)]

    def _call(self, jitted, stacked_params, args, scan_len, attackers=None):
        # attackers: the tasks' adversary flags (None: an engine without adversaries, whose program takes none)
        extra = {} if attackers is None else {"attackers": jnp.asarray(attackers)}
        if self._mesh is None:
            return jitted(stacked_params, self.data, *(jnp.asarray(a) for a in args),
                          jnp.zeros(len(args[0]), jnp.int32), self._key_data, self._prox_mus, scan_len=scan_len,
                          plan=self.plan, **extra)
        out = jitted(place_replicated(stacked_params, self._mesh), self._data_on_mesh,
                     *(place_by_task(a, self._mesh) for a in (args if attackers is None else (*args, attackers))))
        return local_copy(out, self._home)

    def _sharded(self, init, step, final, cfg, scan_len, attacked: bool = False):
        def run(stacked, data, slots, clients, task_ids, times, lengths, *attackers):
            extra = {"attackers": attackers[0]} if attackers else {}
            return run_cohort(init, step, final, self.model, cfg, stacked, data, slots, clients, task_ids, times,
                               lengths, jnp.zeros_like(slots), self._key_data, self._prox_mus, scan_len=scan_len,
                               plan=self.plan, **extra)

        return sharded_cohort(run, self._mesh, num_task_args=6 if attacked else 5)

    def _timed(self, kind, bucket, lengths, call):
        """Runs ``call`` and records it; ``lengths`` are the bucket's padded lengths in device order."""
        shape = (kind, bucket.num_tasks, jax.tree_util.tree_leaves(self.data)[0].shape)
        compiled = shape not in self._seen_shapes
        self._seen_shapes.add(shape)
        t0 = time.perf_counter()
        out = jax.block_until_ready(call())
        # each device steps its share in chunks that stop at their longest task
        chunk = self._chunk or bucket.num_tasks // self.num_devices
        work = int(sum(len(c) * c.max() for c in np.split(lengths, bucket.num_tasks // chunk)))
        self.records.append(CallRecord(kind, len(bucket.indices), bucket.num_tasks, work, int(lengths.sum()),
                                       time.perf_counter() - t0, compiled))
        return out

    def _task_params(self, stacked, slot):
        return jax.tree_util.tree_map(lambda s: s[int(slot)], stacked)

    def _reference_train(self, client):
        """The debug backend's one-task training for ``client``: ``local_train``, or its adversarial
        reference (:func:`~.adversary.local_train_attacked`) in an engine with adversaries."""
        if self.attack is None:
            return local_train
        return partial(local_train_attacked, self.attack, bool(self.adversarial[int(client)]))

    def _train_debug(self, stacked, slots, clients, task_ids, steps, times) -> CohortTrainOutput:
        results = []
        with jax.disable_jit():
            for slot, c, tid, n, t in zip(slots, clients, task_ids, steps, times):
                key = jax.random.fold_in(self.base_key, int(tid))
                # a zero-step task scans one masked step: un-jitted, a scan of length 0 has no output type
                train = self._reference_train(c)
                results.append(train(self.model, self.train_cfg, max(int(n), 1), self._task_params(stacked, slot),
                                     self.data, jnp.int32(c), key, jnp.int32(n), jnp.float32(t),
                                     jnp.float32(self.prox_mu)))
        stacked_out = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *results)
        host = jax.device_get((stacked_out.first_batch, stacked_out.all_steps, stacked_out.num_steps))
        idx = np.arange(len(results))
        return CohortTrainOutput((stacked_out.delta,), np.zeros(len(idx), np.int64), idx,
                                 _stats_to_host(host[0], idx), _stats_to_host(host[1], idx),
                                 np.asarray(host[2], np.int32))

    def _eval_debug(self, stacked, slots, clients, task_ids, batches, times) -> CohortEvalOutput:
        results = []
        with jax.disable_jit():
            for slot, c, tid, n, t in zip(slots, clients, task_ids, batches, times):
                key = jax.random.fold_in(self.base_key, int(tid))
                results.append(local_eval(self.model, self.eval_cfg, int(n), self._task_params(stacked, slot),
                                          self.data, jnp.int32(c), key, jnp.int32(n), jnp.float32(t)))
        host = jax.device_get(jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *results))
        return CohortEvalOutput(LossStats(*(np.asarray(v) for v in host.stats)), np.asarray(host.correct))


def pad_task_args(size: int, slots, clients, task_ids, times, lengths):
    """Pads task arrays to ``size``; padded tasks run zero steps (and are sliced off)."""
    pad = size - len(clients)

    def padded(a, fill):
        return np.concatenate([a, np.full(pad, fill, a.dtype)])

    return (padded(slots, slots[0]), padded(clients, clients[0]), padded(task_ids, 0), padded(times, times[0]),
            padded(lengths, 0))


def _drain(out: CohortTrainOutput, sink) -> CohortTrainOutput:
    """Hands a whole flush's parts to ``sink`` (as :meth:`CohortEngine.train` documents) and drops them."""
    for p, part in enumerate(out.parts):
        mine = np.flatnonzero(out.part_of == p)
        sink(part, mine, out.rows[mine])
    return out._replace(parts=())


def _assemble_train(parts, order) -> CohortTrainOutput:
    """``parts``: per bucket (output, rows of its real tasks in bucket order); ``order``: their flush positions."""
    inv = np.argsort(order, kind="stable")
    part_of = np.repeat(np.arange(len(parts)), [len(r) for _, r in parts])[inv]
    rows = np.concatenate([r for _, r in parts])[inv]
    host = jax.device_get([(out.first_batch, out.all_steps, out.num_steps) for out, _ in parts])
    part_rows = [r for _, r in parts]

    def cat(field_idx):
        return LossStats(*(np.concatenate([np.asarray(h[field_idx][f])[r] for h, r in zip(host, part_rows)])[inv]
                           for f in range(3)))

    num_steps = np.concatenate([np.asarray(h[2])[r] for h, r in zip(host, part_rows)])[inv].astype(np.int32)
    return CohortTrainOutput(tuple(out.delta for out, _ in parts), part_of, rows, cat(0), cat(1), num_steps)


def run_cohort(init, step, final, model, cfg, stacked, data, slots, clients, task_ids, times, lengths, key_of,
                base_keys, prox_mus=None, *, scan_len, plan, attackers=None):
    """One compiled call: per task, gather its start parameters and key, then init/scan(step)/final.

    ``attackers`` (n,) bool, where given: each task's adversary flag, passed to ``init`` as ``attacker=``
    (an adversarial cohort's functions, :func:`~.adversary.attacked_train`).

    ``base_keys`` (E, key data) holds one base key per experiment sharing the call (one for a
    single engine) and ``key_of`` each task's row in it: task ``i``'s key is
    ``fold_in(base_keys[key_of[i]], task_ids[i])``, the same key whichever call computes it.
    ``prox_mus`` (E,) float32: each experiment's FedProx proximal weight, traced (a new mu compiles
    nothing); task ``i`` trains with ``prox_mus[key_of[i]]`` (eval tasks ignore it); None: 0 for all."""
    def init_task(slot, client, tid, t, which, *attacker):
        params = jax.tree_util.tree_map(lambda s: s[slot], stacked)
        key = jax.random.fold_in(jax.random.wrap_key_data(base_keys[which]), tid)
        flag = {"attacker": attacker[0]} if attacker else {}
        mu = 0.0 if prox_mus is None else prox_mus[which]
        return init(model, cfg, params, data, client, key, t, mu, **flag)

    return cohort_scan(init_task, lambda ctx, c, s, n: step(model, cfg, data, ctx, c, s, n),
                       lambda ctx, c, n: final(ctx, c, n, scan_len), plan,
                       (slots, clients, task_ids, times, key_of) + (() if attackers is None else (attackers,)),
                       lengths, scan_len)
