"""Fleet scale: host time per event, selection time, build time, memory and XLA compilations
as the population grows (docs/architecture.md "The server view at scale").

Each population runs in its own process (peak RSS is per process): scikit-learn's 8x8
digits (1,437 training images, one channel, written once as a ``dataset=PATH.npz``) as a
shared pool (``partition=pool``: the population is far larger than the data), the tiny
MLP (one hidden layer of 32), FeLiX (TierTrack, Oort + TierSelect eval, TierFuse) under the 50% slotted availability,
``c`` tasks in flight. "Host ms per event" is the run's wall time minus the cohort engine's
device calls (``engine.records`` seconds, which include their own compilation), over the
events processed; the other compilations of the run (``compile_s_in_run`` holds all of them)
stay in, so short runs at small N show their fixed costs. ``dispatch_sha1`` digests the run's
dispatch log (time, client, kind, round of every task): two code versions with the same digest for
the same population and seed made the same selections (a check that a speed-up changed no result).

    python benchmarks/fleet_scale.py                              # 10^3 .. 10^6, c = min(N/10, 10^4)
    python benchmarks/fleet_scale.py --populations 1000 100000 --concurrency 100 --out scale.json
    python benchmarks/fleet_scale.py --populations 100000 10000000 --concurrency 10000 --aggregation-goal 1000 \
        --strategy felix oort-async-oracle fedbuff --slot-s 30 --aggregations 40 160 --task one-step local-epochs \
        --exploit-sizes 10000 100000 1000000 --resume --out day.json   # BENCHMARKS.md, "A fleet day"
    python benchmarks/fleet_scale.py --populations --fedscale-clients --index-sizes 1000 100000 10000000 \
        --out index.json   # one write to the view's sorted indexes, chunks against one buffer
    python benchmarks/fleet_scale.py --populations 100000 --preset tiny --concurrency 1000 \
        --aggregation-goal 100 --aggregations 30 --out tiny.json   # a shipped preset's own fleet, scaled

It also times loading a FedScale-format availability trace (a synthetic ``client_behave_trace``
pickle of ``--fedscale-clients`` devices, 10^5 by default) in a process of its own, with its peak RSS.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("fleet_scale.py")

import argparse
import bisect
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from felix_jax.commands import (command_parser, earlier_rows, output_file, parse_sets, positive_float, positive_int,  # noqa: E402
                                run_script)


def digits8_npz(path: str) -> str:
    """scikit-learn's 8x8 digits as a ``dataset=PATH.npz`` (uint8 grey levels, 1,437 train / 360 test)."""
    import numpy as np
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.rint(d.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)[..., None]  # (1797, 8, 8, 1)
    y = d.target.astype(np.int64)
    np.savez(path, train_x=x[:1437], train_y=y[:1437], test_x=x[1437:], test_y=y[1437:])
    return path


TASKS = ("one-step", "local-epochs")
PRESET_TASK = "preset:"  # a task that is a shipped preset's own work: "preset:tiny"


def fleet_scenario(num_clients: int, concurrency: int, aggregations: int, strategy: str, seed: int,
                   dataset: str, availability: str = "avail50", slot_s: float = 600.0, trace_form: str = "auto",
                   aggregation_goal: int | None = None, task: str = "one-step", plugins: str = "",
                   sets: dict | None = None):
    """The benchmark's scenario: the tiny MLP on a shared pool, ``concurrency`` tasks in flight.
    ``plugins``: files or modules whose strategies ``strategy`` may name (a user's selector at scale).
    ``task`` ``"preset:NAME"``: the named preset as shipped (its model, data set unless ``dataset`` is
    given, local work, slots' defaults, eval tier, timeouts), overriding only the population, ``c``, K,
    ``partition=pool``, the run length (no target) and the benchmark's axes (strategy, regime, slot
    length, trace form, seed): what a user who raises ``concurrency`` on a shipped preset runs.

    ``sets``: scenario fields set last (``--set KEY=VALUE``: ``model=cifar_cnn``, ``batch_size=4``,
    ``memory_budget_gb=12``, ``flush_max_tasks=none``...).

    ``task``: "one-step" (one local step a task, the test set read 4 times a run) or "local-epochs"
    (a local epoch over the client's pool share, batch 4, and the test set read after every
    aggregation: the host work of a realistic task, batch tables, padding and evaluation included)."""
    from felix_jax.experiment.scenario import Scenario

    if sets:
        return fleet_scenario(num_clients, concurrency, aggregations, strategy, seed, dataset, availability, slot_s,
                              trace_form, aggregation_goal, task, plugins).with_overrides(sets)
    if task.startswith(PRESET_TASK):
        return preset_scenario(task[len(PRESET_TASK):], num_clients, concurrency, aggregations, strategy, seed,
                               dataset, availability, slot_s, trace_form, aggregation_goal, plugins)
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS} or {PRESET_TASK}NAME, not {task!r}")
    epochs = task == "local-epochs"
    return Scenario(name="fleet-scale", dataset=dataset, model="mlp", partition="pool", num_clients=num_clients,
                    alpha=0.5, batch_size=4, learning_rate=0.1, local_mode="epochs" if epochs else "steps",
                    local_steps=1, local_epochs=1,
                    availability=availability, slot_s=slot_s, trace_form=trace_form, strategy=strategy,
                    concurrency=concurrency,
                    aggregation_goal=max(1, concurrency // 10) if aggregation_goal is None else aggregation_goal,
                    target_accuracy=None, max_virtual_hours=24.0, max_aggregations=aggregations,
                    eval_every=1 if epochs else max(1, aggregations // 4), seed=seed, plugins=plugins)


def preset_scenario(name: str, num_clients: int, concurrency: int, aggregations: int, strategy: str, seed: int,
                    dataset: str | None, availability: str, slot_s: float, trace_form: str,
                    aggregation_goal: int | None, plugins: str):
    """:func:`fleet_scenario` for ``task="preset:NAME"``: the shipped preset with only the scale, the
    run length and the benchmark's axes overridden."""
    from felix_jax.experiment import get_preset

    return get_preset(name).with_overrides({
        "num_clients": num_clients, "concurrency": concurrency, "partition": "pool",
        "aggregation_goal": max(1, concurrency // 10) if aggregation_goal is None else aggregation_goal,
        "max_aggregations": aggregations, "target_accuracy": None, "max_virtual_hours": 24.0,
        "strategy": strategy, "availability": availability, "slot_s": slot_s, "trace_form": trace_form,
        "seed": seed, "plugins": plugins, **({"dataset": dataset} if dataset else {})})


def task_name(text: str) -> str:
    """``--task``: one of :data:`TASKS`, or ``preset:NAME`` for a shipped preset."""
    if text in TASKS:
        return text
    if text.startswith(PRESET_TASK):
        from felix_jax.experiment import PRESETS

        if text[len(PRESET_TASK):] in PRESETS:
            return text
        raise argparse.ArgumentTypeError(f"unknown preset {text[len(PRESET_TASK):]!r}; presets: "
                                         f"{', '.join(PRESETS)}")
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(TASKS)} or {PRESET_TASK}NAME, got {text!r}")


def preset_name(text: str) -> str:
    """``--preset``: a shipped preset's name."""
    return task_name(f"{PRESET_TASK}{text}")[len(PRESET_TASK):]


def dispatch_log_of(path) -> list:
    """``Accounting.dispatch_log`` read back from a streamed ``events.csv``: the dispatch rows, in the
    order written (their times never go back, ties in the order logged), as the same tuples."""
    import csv

    with open(path, newline="") as f:
        return [(float(r[0]), int(r[2]), r[3], int(r[4])) for r in csv.reader(f) if r[1] == "dispatch"]


def measure(num_clients: int, concurrency: int, aggregations: int, strategy: str, seed: int,
            dataset: str = "digits", availability: str = "avail50", slot_s: float = 600.0,
            trace_form: str = "auto", aggregation_goal: int | None = None, snapshot: bool = False,
            task: str = "one-step", plugins: str = "", sets: dict | None = None) -> dict:
    """One population, in this process. The event log is streamed to an ``events.csv`` in a temporary
    folder, as a run with a results folder streams it (memory bounded by a chunk)."""
    import jax
    import numpy as np

    from felix_jax.experiment.runner import build_simulator

    compiles = []  # seconds of each XLA compilation
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: compiles.append(secs) if name == "/jax/core/compile/backend_compile_duration" else None)
    sc = fleet_scenario(num_clients, concurrency, aggregations, strategy, seed, dataset, availability, slot_s,
                        trace_form, aggregation_goal, task, plugins, sets)
    t0 = time.perf_counter()
    sim = build_simulator(sc)
    log_dir = tempfile.TemporaryDirectory()
    events_csv = os.path.join(log_dir.name, "events.csv")
    sim.stream_events(events_csv)
    build_s = time.perf_counter() - t0
    build_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    compiles_build = len(compiles)
    # (wall clock, device seconds and compiling calls' seconds so far, compilations so far, selections so
    # far) at every event, or every 2nd, 4th...: a list of a tuple an event would itself grow by ~200 bytes
    # an event and show up in the resident memory this measures; the engine keeps running totals
    stamps = EventStamps()
    pop = sim.queue.pop

    curve = []  # every 10th aggregation: (aggregation, resident MB now, delta store rows, updates held)
    seen = [-1]

    def stamped_pop():
        if stamps.due():
            stamps.add((time.perf_counter(), sim.engine.records.seconds, sim.engine.records.compiled_seconds,
                        len(compiles), len(sim.acct.selection_seconds)))
        if sim.version != seen[0]:
            seen[0] = sim.version
            if sim.version % 10 == 0:
                curve.append((sim.version, resident_mb(), sim.executor.deltas.capacity, sim.executor.deltas.num_used))
        return pop()

    sim.queue.pop = stamped_pop
    rec = sim.run()
    t_end = time.perf_counter()
    run_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sim.event_stream.close()
    dispatch_log = dispatch_log_of(events_csv)
    sim.queue.pop = pop
    warm = {}
    if stamps.count >= 2:  # the run's second half: its fixed costs (first compilations) are behind it
        n_half, (t_h, dev_h, dev_compiled_h, comp_h, sel_h) = stamps.second_half()
        dev_half = sim.engine.records.seconds - dev_h
        # compilations outside the device calls (the calls' own are in their seconds): at least the
        # half's compile seconds beyond what its compiling calls took, so this errs toward more host time
        compiling_calls = sim.engine.records.compiled_seconds - dev_compiled_h
        outside = max(0.0, float(sum(compiles[comp_h:])) - compiling_calls)
        warm = {"warm_events": n_half, "warm_host_ms_per_event": 1000 * (t_end - t_h - dev_half) / n_half,
                "warm_host_ms_per_event_excl_compile": 1000 * (t_end - t_h - dev_half - outside) / n_half,
                "warm_selection_ms_per_event": 1000 * float(np.sum(sim.acct.selection_seconds[sel_h:])) / n_half,
                "warm_device_s": dev_half, "warm_compilations": len(compiles) - comp_h,
                "warm_compile_s": float(sum(compiles[comp_h:]))}
    snap = {}
    if snapshot:  # the run's end state written and read back into a fresh simulator
        from felix_jax.fleet.snapshot import load_snapshot, save_snapshot

        with tempfile.TemporaryDirectory() as d:
            t1 = time.perf_counter()
            folder = save_snapshot(sim, d)
            snap["snapshot_write_s"] = time.perf_counter() - t1
            snap["snapshot_mb"] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2 ** 20
            other = build_simulator(sc)
            t1 = time.perf_counter()
            load_snapshot(other, d)
            snap["snapshot_restore_s"] = time.perf_counter() - t1
            snap["restored_equal"] = (other.now == sim.now and other.version == sim.version
                                      and other.acct.summary() == sim.acct.summary())
            del other
    device_s = sim.engine.records.seconds
    sel = sim.acct.selection_seconds
    events = max(rec.events_processed, 1)
    return {
        "num_clients": num_clients, "concurrency": concurrency, "aggregation_goal": sc.aggregation_goal,
        "strategy": strategy, "plugins": sc.plugins, "model": sc.model, "dataset": os.path.basename(sc.dataset),
        "availability": availability, "slot_s": slot_s,
        "trace_form": sim.trace.form,
        "build_peak_rss_mb": build_rss_mb, **snap, "aggregations": len(rec.aggregation_times) - 1, "events": rec.events_processed,
        "virtual_s": rec.end_time_s, "build_s": build_s, "run_s": rec.host_seconds, "device_s": device_s,
        "compile_s_in_run": float(sum(compiles[compiles_build:])),
        "host_ms_per_event": 1000 * (rec.host_seconds - device_s) / events, **warm,
        "selection_ms_mean": 1000 * float(np.mean(sel)) if sel else 0.0, "selections": len(sel),
        "selection_ms_per_event": 1000 * float(np.sum(sel)) / events,
        "peak_rss_mb": run_peak_mb, "task": task, "max_aggregations": aggregations,
        "events_csv_mb": os.path.getsize(events_csv) / 2 ** 20,
        "compilations": len(compiles), "compilations_in_build": compiles_build,
        "control_messages": sim.acct.control_messages, "stop_reason": rec.stop_reason,
        # the run's decisions: equal digests, equal selections (same scenario and seed, two code versions)
        "dispatch_sha1": hashlib.sha1(repr(dispatch_log).encode()).hexdigest(),
        "final_accuracy": rec.checkpoints[-1].accuracy if rec.checkpoints else None,
        "queue_len_end": len(sim.queue),
        "rss_curve": curve,  # [aggregation, resident MB, delta store rows, updates held] every 10th
        "sets": dict(sets or {}), "batch_size": sc.batch_size,
        # the memory budget (cohort/budget.py) and what the executor did under it
        "memory": None if sim.executor.memory is None else sim.executor.memory.to_dict(),
        "flushes": sim.executor.flushes, "flush_tasks_mean": sim.executor.flushed_tasks / max(sim.executor.flushes, 1),
        "largest_train_flush": sim.executor.largest_flush, "evicted_results": sim.executor.evicted,
        # how the aggregation holds its updates: a running sum folding them in as they arrive (fleet/running_sum.py),
        # or the buffer of K gathered at the aggregation
        "aggregation": sim.aggregation_path,
        "rejected_updates": [sim.acct.rejected_updates_nonfinite, sim.acct.rejected_updates_norm],
        # update_guard.median_over=arrivals: verdicts at arrival unlike the median over the whole buffer's
        "guard_verdicts_unlike_buffer": sim.acct.guard_verdicts_unlike_buffer,
        "delta_store_rows": sim.executor.deltas.capacity, "version_store_rows": sim.executor.store.capacity,
        "tasks_per_call_mean": sim.engine.records.summary().get("train", {}).get("mean_tasks_per_call"),
    }


class EventStamps:
    """A stamp every ``stride`` events, at most ``2 * keep`` of them: when full, every other one goes and
    the stride doubles, so memory stays bounded however long the run. The second half then starts at
    the kept stamp nearest at or below the middle event: the exact middle while the run has fewer than
    ``2 * keep`` events, within ``count / keep`` events of it after."""

    def __init__(self, keep: int = 4096):
        self.keep, self.stride, self.count = keep, 1, 0
        self._at: list[int] = []  # the event index of each kept stamp
        self._stamps: list[tuple] = []

    def due(self) -> bool:
        """Counts an event; True if its stamp is to be kept (call :meth:`add` then)."""
        self.count += 1
        return (self.count - 1) % self.stride == 0

    def add(self, stamp: tuple) -> None:
        self._at.append(self.count - 1)
        self._stamps.append(stamp)
        if len(self._stamps) >= 2 * self.keep:
            self._at, self._stamps, self.stride = self._at[::2], self._stamps[::2], 2 * self.stride

    def second_half(self) -> tuple[int, tuple]:
        """(events from the half's first stamp to the end, that stamp)."""
        i = bisect.bisect_right(self._at, self.count // 2) - 1
        return self.count - self._at[i], self._stamps[i]


def resident_mb() -> float:
    """This process's resident memory now (Linux ``/proc/self/statm``; NaN elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return float("nan")


def index_op_us(n: int, ops: int = 2000, seed: int = 0) -> dict:
    """One insert or removal in the view's sorted indexes (``_SortedValues``, chunks) holding ``n`` values,
    in microseconds, against one sorted buffer shifted in place (the layout before the chunks), on the
    same random values; both end equal to the sorted array."""
    import numpy as np

    from felix_jax.fleet.clientmap import _SortedValues

    rng = np.random.default_rng(seed)
    held, values = rng.random(n), rng.random(ops)
    chunks = _SortedValues(held)
    t = time.perf_counter()
    for v in values:
        chunks.add(v)
    for v in values:
        chunks.remove(v)
    chunked_us = 1e6 * (time.perf_counter() - t) / (2 * ops)
    buf, size = np.empty(n + ops), n
    buf[:n] = np.sort(held)
    t = time.perf_counter()
    for v in values:  # a binary search and a shift of every value after the slot
        i = int(np.searchsorted(buf[:size], v, side="right"))
        buf[i + 1:size + 1] = buf[i:size]
        buf[i] = v
        size += 1
    for v in values:
        i = int(np.searchsorted(buf[:size], v, side="left"))
        buf[i:size - 1] = buf[i + 1:size]
        size -= 1
    buffer_us = 1e6 * (time.perf_counter() - t) / (2 * ops)
    same = bool(np.array_equal(np.asarray(chunks.values()), buf[:size]))
    return {"values": n, "ops": 2 * ops, "chunked_us": chunked_us, "one_buffer_us": buffer_us, "same_values": same}


def exploit_call_ms(explored: int, picks: int = 1, calls: int = 20, seed: int = 0) -> dict:
    """One Oort call that exploits (FeLiX's selector, epsilon at its floor, every eligible client explored),
    timed over ``calls`` calls: ``explored`` explored clients of ``2 x explored``, half of them eligible
    (idle and AVL_TRAIN), utilities, rounds and durations drawn at random. Its cost grows with the explored
    eligible clients: each is scored, and the candidates are ranked (``sorted``: a sort of every score, as
    before weighted selection) or found by weighted selection (``exploit_call_ms``), the same picks."""
    import numpy as np

    from felix_jax.policies.selectors import oort_math

    fast = _exploit_calls(explored, picks, calls, seed)
    threshold = oort_math._FAST_MIN_SCORED
    oort_math._FAST_MIN_SCORED = 1 << 62  # every call the sorted way
    try:
        slow = _exploit_calls(explored, picks, calls, seed)
    finally:
        oort_math._FAST_MIN_SCORED = threshold
    same = all(np.array_equal(a, b) for a, b in zip(fast["picks"], slow["picks"]))
    return {"explored_eligible": fast["explored_eligible"], "picks": picks, "exploit_call_ms": fast["ms"],
            "exploit_call_sorted_ms": slow["ms"], "same_picks": same}


def _exploit_calls(explored: int, picks: int, calls: int, seed: int) -> dict:
    import numpy as np

    from felix_jax.fleet.clientmap import ClientMap
    from felix_jax.policies.selectors.base import SelectionContext
    from felix_jax.policies.selectors.oort import make_oort_selector
    from felix_jax.traces import Tier

    rng = np.random.default_rng(seed)
    n = 2 * explored
    view = ClientMap.create(rng.integers(1, 500, n), rng.uniform(5, 60, n))
    view.set_tier(slice(None), np.where(np.arange(n) % 2 == 0, Tier.AVL_TRAIN, Tier.UN_AVL))
    for c in rng.permutation(n)[:explored].tolist():
        view.record_utility(c, float(rng.exponential(10)), int(rng.integers(0, 50)))
        view.record_training(c, float(rng.uniform(5, 60)))
    for c in np.flatnonzero(view.utility_round < 0).tolist():  # the rest explored too: none left to explore
        view.record_utility(c, float(rng.exponential(10)), int(rng.integers(0, 50)))
    sel = make_oort_selector()
    state = sel.init()._replace(calls=1_000)  # epsilon at its floor
    eligible = view.trainable(60, False)
    times, chosen = [], []
    for i in range(calls):
        ctx = SelectionContext(view, eligible, 60, 0.0, np.random.default_rng([seed, i]),
                               num_eligible=view.num_trainable(60, False))
        t0 = time.perf_counter()
        clients, state = sel.select(state, ctx, picks)
        times.append(time.perf_counter() - t0)
        chosen.append(clients)
    return {"explored_eligible": int(view.num_trainable(60, False)), "ms": 1000 * float(np.median(times)),
            "picks": chosen}


def fedscale_pickle(path: str, num_clients: int, seed: int = 0) -> dict:
    """A FedScale-format ``client_behave_trace`` pickle of ``num_clients`` synthetic devices (FedScale's
    schema: per client ``active`` / ``inactive`` lists, ``finish_time``, ``duration``, ``model``; 1-40
    online intervals in a period of 2-7 days, about the shape of its 107,749-device trace)."""
    import pickle

    import numpy as np

    rng = np.random.default_rng(seed)
    data, intervals = {}, 0
    for cid in range(1, num_clients + 1):
        period = float(rng.uniform(2, 7) * 86_400)
        k = int(rng.integers(1, 41))
        edges = np.sort(rng.uniform(0, period, 2 * k))
        data[cid] = {"duration": period, "active": edges[0::2].tolist(), "inactive": edges[1::2].tolist(),
                     "finish_time": period, "model": "synthetic"}
        intervals += k
    with open(path, "wb") as f:
        pickle.dump(data, f, protocol=4)
    return {"clients": num_clients, "intervals": intervals, "file_mb": os.path.getsize(path) / 2 ** 20}


def measure_fedscale_load(path: str) -> dict:
    """Loads a FedScale trace in this process: seconds, rows, peak RSS."""
    from felix_jax.traces import load_fedscale_trace

    t0 = time.perf_counter()
    trace = load_fedscale_trace(path)
    return {"load_s": time.perf_counter() - t0, "clients": trace.num_clients, "rows": trace.num_rows,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv=None) -> int:
    ap = command_parser(__doc__.splitlines()[0])
    ap.add_argument("--populations", type=positive_int, nargs="*", default=[1_000, 10_000, 100_000, 1_000_000],
        help="client populations measured (none: only the --exploit-sizes / --index-sizes / FedScale timings)")
    ap.add_argument("--concurrency", type=positive_int, default=None, help="tasks in flight (default min(N/10, 10^4))")
    ap.add_argument("--aggregations", type=positive_int, nargs="+", default=[40],
                    help="aggregations per run (max_aggregations); several: a cell per run length (memory over a run)")
    ap.add_argument("--preset", nargs="+", default=[], metavar="NAME", type=preset_name,
                    help="also (or, without --task, only) a fleet built from each named preset as shipped: "
                         "its model, data set (or --dataset), local work and eval tier, with only the "
                         "population, concurrency, K, partition=pool and run length set here (task preset:NAME)")
    ap.add_argument("--task", nargs="+", default=None, type=task_name,
                    help="one-step: one local step a task; local-epochs: an epoch a task and the test set after every "
                         "aggregation; preset:NAME (as --preset) (default: one-step, unless --preset is given)")
    ap.add_argument("--strategy", nargs="+", default=["felix"], help="one or more strategies")
    ap.add_argument("--plugins", default="", metavar="FILES",
                    help="comma-separated plugin files or modules whose strategies --strategy may name")
    ap.add_argument("--availability", nargs="+", default=["avail50"],
                    help="one or more regimes (avail50, mobiperf: the recorded trace reused cyclically, ...)")
    ap.add_argument("--slot-s", type=positive_float, nargs="+", default=[600.0],
                    help="slot lengths of the slot regimes")
    ap.add_argument("--trace-form", default="auto", choices=["auto", "table", "function"],
        help="how the trace is held (the scenario's trace_form)")
    ap.add_argument("--aggregation-goal", type=positive_int, default=None, help="K (default c / 10)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a scenario field set in every cell, last (repeatable): model=cifar_cnn, batch_size=4, "
                         "memory_budget_gb=12, flush_max_tasks=none")
    ap.add_argument("--snapshot", action="store_true", help="also write the end state and restore it")
    ap.add_argument("--seed", type=int, default=0, help="the runs' seed")
    ap.add_argument("--resume", action="store_true", help="keep the cells --out already holds and run the rest")
    ap.add_argument("--out", type=output_file, default=None, help="JSON file for the rows")
    ap.add_argument("--dataset", default=None, help="data set (default: the 8x8 digits, written to a temp .npz)")
    ap.add_argument("--fedscale-clients", type=positive_int, nargs="*", default=[100_000],
                    help="also time loading a synthetic FedScale-format trace of this many clients (none: skip)")
    ap.add_argument("--exploit-sizes", type=positive_int, nargs="*", default=[],
                    help="also time an exploiting Oort call with this many explored clients (half of them eligible)")
    ap.add_argument("--index-sizes", type=positive_int, nargs="*", default=[],
                    help="also time an insert or removal in the view's sorted indexes holding this many values")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process: one population
    ap.add_argument("--load-fedscale", default=None, help=argparse.SUPPRESS)  # child process: one trace load
    args = ap.parse_args(argv)
    args.task = (args.task or ([] if args.preset else ["one-step"])) + [f"{PRESET_TASK}{p}" for p in args.preset]
    sets = parse_sets(args.sets)
    if args.load_fedscale:
        print(json.dumps(measure_fedscale_load(args.load_fedscale)))
        return 0
    if args.one:
        n = args.populations[0]
        print(json.dumps(measure(n, args.concurrency, args.aggregations[0], args.strategy[0], args.seed, args.dataset,
                                 args.availability[0], args.slot_s[0], args.trace_form, args.aggregation_goal,
                                 args.snapshot, args.task[0], args.plugins, sets)))
        return 0
    if args.plugins:  # a strategy a plugin names, checked before the first cell
        for strategy in args.strategy:
            fleet_scenario(10, 1, 1, strategy, args.seed, "digits", plugins=args.plugins)
    tmp = tempfile.TemporaryDirectory()
    own = args.dataset or digits8_npz(os.path.join(tmp.name, "digits8.npz"))
    rows = []
    if args.out and os.path.exists(args.out) and args.resume:  # a long matrix continues: finished cells are kept
        rows = earlier_rows(args.out, "fleet_scale.py")
    cells = [(task, n, strategy, regime, slot_s, aggs) for task in args.task for n in args.populations
             for strategy in args.strategy for regime in args.availability
             for slot_s in (args.slot_s if regime.startswith("avail") else [600.0]) for aggs in args.aggregations]
    for task, n, strategy, regime, slot_s, aggs in cells:
        c = max(1, min(n // 10, 10_000)) if args.concurrency is None else args.concurrency
        key = (task, n, c, strategy, regime, float(slot_s), aggs, sets)
        if any((r.get("task", "one-step"), r["num_clients"], r["concurrency"], r["strategy"], r["availability"],
                float(r["slot_s"]), r.get("max_aggregations", aggs), r.get("sets", {})) == key for r in rows):
            print(f"{task} N={n:>9,} {strategy} {regime} slot {slot_s:g} s c={c:,} {aggs} aggregations: finished "
                  f"earlier, kept", flush=True)
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--one", "--populations", str(n), "--concurrency", str(c),
               "--aggregations", str(aggs), "--task", task, "--strategy", strategy, "--seed", str(args.seed),
               # a preset's own data set unless --dataset names one; the benchmark's digits otherwise
               *(["--dataset", own] if args.dataset or not task.startswith(PRESET_TASK) else []),
               "--availability", regime, "--slot-s", str(slot_s),
               "--trace-form", args.trace_form, *(["--snapshot"] if args.snapshot else []),
               *(["--plugins", args.plugins] if args.plugins else []),
               *[f"--set={item}" for item in args.sets],
               *(["--aggregation-goal", str(args.aggregation_goal)] if args.aggregation_goal is not None else [])]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            sys.stderr.write(out.stderr)
            return out.returncode
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        snap = (f" snapshot {r['snapshot_mb']:.0f} MB write {r['snapshot_write_s']:.1f} s restore "
                f"{r['snapshot_restore_s']:.1f} s equal={r['restored_equal']}" if args.snapshot else "")
        print(f"{task} N={n:>9,} {strategy} {regime}{f'@{slot_s:g}s' if regime.startswith('avail') else ''} "
              f"({r['trace_form']}) c={c:>6,} K={r['aggregation_goal']} events={r['events']:>7,} "
              f"host ms/event={r['host_ms_per_event']:7.3f} warm={r.get('warm_host_ms_per_event', float('nan')):7.3f} "
              f"(compilations {r.get('warm_compilations', 0)}; without them "
              f"{r.get('warm_host_ms_per_event_excl_compile', float('nan')):.3f}) selection ms={r['selection_ms_mean']:7.3f} "
              f"build s={r['build_s']:6.1f} peak RSS MB={r['peak_rss_mb']:7.0f} (build {r['build_peak_rss_mb']:.0f}) "
              f"compilations={r['compilations']} aggregations={r['aggregations']} events.csv MB={r['events_csv_mb']:.0f} "
              f"dispatches sha1={r['dispatch_sha1'][:12]}{snap} | largest flush {r['largest_train_flush']:,} "
              f"evicted {r['evicted_results']:,} tasks/call {r['tasks_per_call_mean'] or 0:.0f} "
              f"budget {(r['memory'] or {}).get('memory_budget_gb')} GB{' bounded' if (r['memory'] or {}).get('bounded') else ''}",
              flush=True)
        if args.out:  # after every cell: a long matrix keeps what finished
            with open(args.out, "w") as f:
                json.dump({"rows": rows, "fedscale_loads": [], "argv": sys.argv[1:]}, f, indent=2)
    exploits = []
    for n in args.exploit_sizes:
        exploits.append(exploit_call_ms(n, seed=args.seed))
        r = exploits[-1]
        print(f"Oort exploiting call: {r['explored_eligible']:>9,} explored eligible clients, {r['picks']} pick: "
              f"{r['exploit_call_ms']:.2f} ms (sorted: {r['exploit_call_sorted_ms']:.2f} ms; same picks: "
              f"{r['same_picks']})", flush=True)
    index_ops = []
    for n in args.index_sizes:
        index_ops.append(index_op_us(n, seed=args.seed))
        r = index_ops[-1]
        print(f"sorted index: {n:>11,} values: {r['chunked_us']:.1f} us an insert or removal in chunks, "
              f"{r['one_buffer_us']:.1f} us in one buffer (same values: {r['same_values']})", flush=True)
    loads = []
    for n in args.fedscale_clients:  # each load in its own process: its peak RSS is the loader's
        path = os.path.join(tmp.name, f"fedscale_{n}.pkl")
        made = fedscale_pickle(path, n, args.seed)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--load-fedscale", path],
                             capture_output=True, text=True)
        if out.returncode:
            sys.stderr.write(out.stderr)
            return out.returncode
        loads.append({**made, **json.loads(out.stdout.strip().splitlines()[-1])})
        r = loads[-1]
        print(f"FedScale trace: {n:>9,} clients, {r['intervals']:,} intervals ({r['file_mb']:.0f} MB pickle): "
              f"loaded in {r['load_s']:.1f} s, {r['rows']:,} rows, peak RSS MB={r['peak_rss_mb']:.0f}", flush=True)
        os.remove(path)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "fedscale_loads": loads, "exploit_calls": exploits, "index_ops": index_ops,
                       "argv": sys.argv[1:]}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(run_script("fleet_scale.py", main))
