"""Device calls shared by several experiments (a sweep group, ``experiment/sweep.py``).

Each experiment keeps its own :class:`CohortEngine` (its partition, seed, version store and
call records). A :class:`SharedCohort` builds one device data set for all of them: the same
training arrays, the client index tables stacked (each experiment's clients at an offset,
rows padded to the widest), the stream tables stacked the same way. A shared flush takes
every experiment's pending tasks, gathers the model versions they start from into one
stacked array, and runs them in one bucketed cohort call per (local-training settings,
bucket): the per-client functions, keys (``fold_in(experiment's base key, task id)``) and
execution plan are the solo engine's, so under the CPU plan (``lax.map``, one task at a
time) every task's result equals its solo run's bit for bit. Padding an index row wider
changes nothing: a task reads only its first ``count`` positions and its batch order draws
one uniform per position (jax's partitionable threefry, on by default), so the positions
below ``count`` get the same order.
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..data.federated import FederatedData
from ..data.streams import DeviceStreams
from .adversary import attacked_train
from .buckets import plan_buckets
from .engine import (CallRecord, CohortEngine, CohortEvalOutput, CohortTrainOutput, pad_task_args, run_cohort)
from .local import eval_final, eval_init, eval_step, train_final, train_init, train_step
from .stats import LossStats


# arrival and label time of a static data set's samples in a group with client streams: finite
# (a time window compares ``arrival > t - window``) and before any task's start
ALWAYS = np.float32(-1e30)


class GroupError(ValueError):
    """Engines that cannot share device calls (another model, data set, plan or device count)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """One experiment's pending tasks of one kind (checked by its engine)."""

    engine: CohortEngine
    stacked: object  # the experiment's version store (leaves (capacity, ...))
    slots: np.ndarray
    clients: np.ndarray
    task_ids: np.ndarray
    times: np.ndarray


@dataclasses.dataclass
class GroupCall:
    """One shared device call (the sweep's batch statistics)."""

    kind: str
    num_tasks: int  # real tasks, all experiments
    experiments: int  # experiments with tasks in it
    padded_tasks: int
    seconds: float
    compiled: bool


def _pad_rows(a: np.ndarray, width: int, fill) -> np.ndarray:
    return np.concatenate([a, np.full((a.shape[0], width - a.shape[1]), fill, a.dtype)], axis=1)


def array_fingerprint(a) -> tuple:
    host = np.asarray(jax.device_get(a))
    return host.shape, str(host.dtype), hash(host.tobytes())


class SharedCohort:
    """See the module docstring. ``engines``: the group's experiments, in a fixed order."""

    def __init__(self, engines: list[CohortEngine], call_overhead: int | None = None):
        if not engines:
            raise GroupError("a shared cohort needs at least one engine")
        first = engines[0]
        for e in engines:
            if e.backend != "jit" or e.num_devices != 1:
                raise GroupError("experiments share device calls on one device with the jit backend "
                                 f"(an experiment has backend={e.backend!r} on {e.num_devices} devices)")
            if e.plan != first.plan:
                raise GroupError(f"experiments of a group need the same execution plan ({first.plan} and {e.plan})")
            if e.model.name != first.model.name or e.model.num_params != first.model.num_params:
                raise GroupError(f"experiments of a group need the same model ({first.model.name} and {e.model.name})")
        base = first.data
        same = (base.x, base.y, base.input_scale, base.input_mean, base.input_std)
        prints = [array_fingerprint(a) for a in same]
        for e in engines[1:]:
            d = e.data
            if d.x is not base.x and [array_fingerprint(a) for a in (d.x, d.y, d.input_scale, d.input_mean,
                                                                  d.input_std)] != prints:
                raise GroupError("experiments of a group need the same training data (data set, num_train)")
        self.engines = list(engines)
        self.model = first.model
        self.plan = first.plan
        self._index = {id(e): i for i, e in enumerate(engines)}
        sizes = [e.data.num_clients for e in engines]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
        width = max(e.data.max_count for e in engines)
        table = np.concatenate([_pad_rows(np.asarray(jax.device_get(e.data.index_table)), width, 0) for e in engines])
        counts = np.concatenate([np.asarray(jax.device_get(e.data.counts)) for e in engines])
        streams = None
        if any(e.streams is not None for e in engines):
            streams = self._stack_streams(engines, width)
        self.data = FederatedData(x=base.x, y=base.y, index_table=jnp.asarray(table, jnp.int32),
                                  counts=jnp.asarray(counts, jnp.int32), input_scale=base.input_scale,
                                  input_mean=base.input_mean, input_std=base.input_std, streams=streams)
        self.keys = jnp.concatenate([e._key_data for e in engines])
        self.prox_mus = jnp.asarray([e.prox_mu for e in engines], jnp.float32)  # each experiment's FedProx mu
        self.max_tasks_per_call = first.max_tasks_per_call
        self.min_tasks_per_call = first.min_tasks_per_call
        self._chunk = first._chunk
        self.call_overhead = first.call_overhead if call_overhead is None else call_overhead
        self.train_scan_len = max(e.train_scan_len for e in engines)
        self.eval_scan_len = max(e.eval_scan_len for e in engines)
        self._jits: dict = {}
        self._store_shapes: dict[int, object] = {}  # experiment -> its version store's shapes, as last seen
        self._placeholders: dict = {}
        self._seen: set = set()
        self.calls: list[GroupCall] = []

    def _zeros(self, shapes):
        """A cached all-zeros stand-in with ``shapes`` (a pytree of ShapeDtypeStruct)."""
        key = str(jax.tree_util.tree_map(lambda s: (s.shape, str(s.dtype)), shapes))
        if key not in self._placeholders:
            self._placeholders[key] = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return self._placeholders[key]

    @staticmethod
    def _stack_streams(engines, width) -> DeviceStreams:
        """Every engine's stream tables, stacked. An engine with static data joins as a stream whose
        samples all arrived, labelled, long before time 0 (``ALWAYS``): each task then reads the
        same rows, count and labels as on the static path."""
        devs = [e.data.streams for e in engines if e.streams is not None]
        window_s = {float(d.window_s) for d in devs}
        explicit = {e.streams.cfg.window_samples for e in engines if e.streams is not None}
        if any(e.streams is None for e in engines):
            explicit.add(None)  # static data has no count window
        if len(window_s) > 1 or len(explicit) > 1:
            raise GroupError("experiments with client streams share a group only with the same window "
                             "(window_hours, window_samples); static data only with no count window")
        (samples,) = explicit
        host = lambda a: np.asarray(jax.device_get(a))  # noqa: E731
        arrival, label, proxy = [], [], []
        for e in engines:
            if e.streams is not None:
                d = e.data.streams
                arrival.append(_pad_rows(host(d.arrival_s), width, np.inf))
                label.append(_pad_rows(host(d.label_s), width, np.inf))
                proxy.append(_pad_rows(host(d.proxy_y), width, -1))
            else:
                held = np.arange(width)[None, :] < np.asarray(e.counts)[:, None]
                arrival.append(np.where(held, ALWAYS, np.inf).astype(np.float32))
                label.append(arrival[-1])
                proxy.append(np.full(held.shape, -1, np.int32))
        return DeviceStreams(jnp.asarray(np.concatenate(arrival), jnp.float32),
                             jnp.asarray(np.concatenate(label), jnp.float32),
                             jnp.asarray(np.concatenate(proxy), jnp.int32),
                             devs[0].window_s, jnp.int32(width if samples is None else samples))

    # ---- the shared calls -----------------------------------------------------------
    def train(self, requests: list[Request]) -> list[CohortTrainOutput]:
        """Every request's training tasks, computed together; one output per request, in order."""
        return self._shared("train", requests)

    def evaluate(self, requests: list[Request]) -> list[CohortEvalOutput]:
        """Every request's eval tasks, computed together; one output per request, in order."""
        return self._shared("eval", requests)

    def _shared(self, kind: str, requests: list[Request]) -> list:
        outputs: list = [None] * len(requests)
        for (cfg, attack), members in self._by_config(requests, kind).items():
            for i, out in zip(members, self._run(kind, cfg, [requests[i] for i in members], attack)):
                outputs[i] = out
        return outputs

    def _by_config(self, requests, kind) -> dict:
        groups: dict = {}
        for i, r in enumerate(requests):
            if id(r.engine) not in self._index:
                raise GroupError("a request from an engine outside the group")
            # a training call runs one program: one local config, one attack (cohort/adversary.py) or none
            key = (r.engine.train_cfg, r.engine.attack) if kind == "train" else (r.engine.eval_cfg, None)
            groups.setdefault(key, []).append(i)
        return groups

    def _jit(self, kind, cfg, attack=None):
        key = (kind, cfg, attack)
        if key not in self._jits:
            fns = (eval_init, eval_step, eval_final) if kind == "eval" else (
                (train_init, train_step, train_final) if attack is None else attacked_train(attack))
            self._jits[key] = jax.jit(partial(_grouped_cohort, *fns, self.model, cfg),
                                      static_argnames=("scan_len", "plan"))
        return self._jits[key]

    def _run(self, kind: str, cfg, requests: list[Request], attack=None):
        # every experiment's version store goes into the call whole and is concatenated inside it; an
        # experiment without tasks in this flush is stood in for by zeros of its store's last shape (its
        # store may have been updated in place since). Shapes stay fixed while stores keep their
        # capacity, so nothing new compiles from one flush to the next. A task's slot is its store's
        # offset plus its own slot.
        current = {self._index[id(r.engine)]: r.stacked for r in requests}
        for m, stacked in current.items():
            self._store_shapes[m] = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), stacked)
        order = sorted(self._store_shapes)
        stores = tuple(current[m] if m in current else self._zeros(self._store_shapes[m]) for m in order)
        sizes = [jax.tree_util.tree_leaves(st)[0].shape[0] for st in stores]
        store_base = dict(zip(order, np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()))
        slots, clients, ids, times, lengths, key_of, owner = [], [], [], [], [], [], []
        flags: list = []
        for r_i, r in enumerate(requests):
            m = self._index[id(r.engine)]
            slots.append(r.slots + store_base[m])
            clients.append(r.clients + self.offsets[m])
            ids.append(r.task_ids)
            times.append(r.times)
            lengths.append(r.engine.train_lengths(r.clients, r.task_ids, r.times) if kind == "train"
                           else r.engine.num_eval_batches(r.clients, r.times))
            key_of.append(np.full(len(r.clients), m, np.int32))
            if attack is not None:  # each task's adversary flag, its client's in its own experiment
                flags.append(r.engine.attackers_of(r.clients))
            owner.append(np.full(len(r.clients), r_i, np.int64))
        cat = lambda parts, dtype: np.concatenate(parts).astype(dtype)  # noqa: E731
        slots, clients, ids = cat(slots, np.int32), cat(clients, np.int32), cat(ids, np.int32)
        times, lengths = cat(times, np.float32), cat(lengths, np.int64)
        key_of, owner = cat(key_of, np.int32), cat(owner, np.int64)
        flags = cat(flags, bool) if attack is not None else None
        size = tuple(sizes)
        scan_len = self.train_scan_len if kind == "train" else self.eval_scan_len
        buckets = plan_buckets(lengths, self.max_tasks_per_call, self.call_overhead, min_tasks=self.min_tasks_per_call,
                               chunk=self._chunk)
        outs = []
        for b in buckets:
            idx = b.indices
            args = pad_task_args(b.num_tasks, slots[idx], clients[idx], ids[idx], times[idx], lengths[idx])
            which = np.concatenate([key_of[idx], np.zeros(b.num_tasks - len(idx), np.int32)])
            shape = (kind, cfg, attack, b.num_tasks, size)
            extra = {} if flags is None else {
                "attackers": jnp.asarray(np.concatenate([flags[idx], np.zeros(b.num_tasks - len(idx), bool)]))}
            compiled = shape not in self._seen
            self._seen.add(shape)
            t0 = time.perf_counter()
            out = jax.block_until_ready(self._jit(kind, cfg, attack)(
                stores, self.data, *(jnp.asarray(a) for a in args), jnp.asarray(which), self.keys, self.prox_mus,
                scan_len=scan_len, plan=self.plan, **extra))
            seconds = time.perf_counter() - t0
            members = np.unique(owner[idx])
            self.calls.append(GroupCall(kind, len(idx), len(members), b.num_tasks, seconds, compiled))
            padded_lengths = args[-1]
            chunk = self._chunk or b.num_tasks
            work = int(sum(len(c) * c.max() for c in np.split(padded_lengths, b.num_tasks // chunk)))
            for m in members:
                mine = owner[idx] == m
                requests[m].engine.records.append(CallRecord(kind, len(idx), b.num_tasks, work,
                                                             int(lengths[idx].sum()), seconds, compiled,
                                                             own_tasks=int(mine.sum())))
            outs.append(out)
        return self._split_train(requests, buckets, outs, owner) if kind == "train" else \
            self._split_eval(requests, buckets, outs, owner)

    @staticmethod
    def _positions(buckets, n):
        """Per task of the flush (``n`` of them): its bucket and its row there."""
        part_of = np.zeros(n, np.int64)
        row = np.zeros(n, np.int64)
        for p, b in enumerate(buckets):
            part_of[b.indices] = p
            row[b.indices] = np.arange(len(b.indices))
        return part_of, row

    @staticmethod
    def _in_flush_order(buckets, n, per_bucket):
        """Host arrays of the real tasks, in flush order: ``per_bucket[p]`` holds bucket p's rows."""
        flat = np.zeros(n, np.asarray(per_bucket[0]).dtype)
        for b, rows in zip(buckets, per_bucket):
            flat[b.indices] = np.asarray(rows)[:len(b.indices)]
        return flat

    def _split_train(self, requests, buckets, outs, owner) -> list[CohortTrainOutput]:
        part_of, row = self._positions(buckets, len(owner))
        host = jax.device_get([(o.first_batch, o.all_steps, o.num_steps) for o in outs])
        flat = lambda pick: self._in_flush_order(buckets, len(owner), [pick(h) for h in host])  # noqa: E731
        first = [flat(lambda h, f=f: h[0][f]) for f in range(3)]
        every = [flat(lambda h, f=f: h[1][f]) for f in range(3)]
        steps = flat(lambda h: h[2]).astype(np.int32)
        results = []
        for m in range(len(requests)):
            mine = np.flatnonzero(owner == m)  # the request's tasks, in its order
            used, part = np.unique(part_of[mine], return_inverse=True)  # its buckets, renumbered
            results.append(CohortTrainOutput(
                tuple(outs[p].delta for p in used), part.reshape(-1).astype(np.int64), row[mine],
                LossStats(*(a[mine] for a in first)), LossStats(*(a[mine] for a in every)), steps[mine]))
        return results

    def _split_eval(self, requests, buckets, outs, owner) -> list[CohortEvalOutput]:
        host = jax.device_get([(o.stats, o.correct) for o in outs])
        stats = [self._in_flush_order(buckets, len(owner), [h[0][f] for h in host]) for f in range(3)]
        correct = self._in_flush_order(buckets, len(owner), [h[1] for h in host]).astype(np.float32)
        return [CohortEvalOutput(LossStats(*(a[mine] for a in stats)), correct[mine])
                for mine in (np.flatnonzero(owner == m) for m in range(len(requests)))]


def _grouped_cohort(init, step, final, model, cfg, stores, data, *task_args, scan_len, plan, attackers=None):
    """:func:`~felix_jax.cohort.engine.run_cohort` over several experiments' version stores."""
    stacked = stores[0] if len(stores) == 1 else jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *stores)
    return run_cohort(init, step, final, model, cfg, stacked, data, *task_args, scan_len=scan_len, plan=plan,
                      attackers=attackers)
