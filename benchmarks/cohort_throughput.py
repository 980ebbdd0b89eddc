"""Cohort-engine throughput: samples/s of vectorized client training vs baselines.

Prints a table and (with --json PATH) writes every figure. Measures, on the
paper's CIFAR-10 CNN (537,610 parameters), 5 local SGD steps of batch 32 per task:
  (a) centralized jitted training on one batch of the same total size,
  (b) the cohort engine at 8, 32, 128 tasks (its automatic execution plan),
  (c) a per-client Python loop over a jitted single-client step, with the engine's
      conv formulation and with plain flax nn.Conv (what per-client simulators run),
  (d) forward-only evaluation (eval tasks; server test-set evaluation),
plus compile time per bucket shape and peak memory. ``--sweep-plans`` also times
vmap / lax.map / chunked plans at 32 tasks (how ``auto_plan`` was chosen).
Inputs are random uint8 images: throughput does not depend on pixel values.

    python benchmarks/cohort_throughput.py [--quick] [--json out.json] [--sweep-plans]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from felix_jax.cohort import CohortEngine, LocalTrainConfig, LocalEvalConfig, VersionStore, auto_plan
from felix_jax.cohort.evaluate import evaluate
from felix_jax.data.dataset import ArrayDataset
from felix_jax.data.federated import to_device, held_out_to_device
from felix_jax.models import cifar_cnn

BATCH = 32
STEPS = 5


def peak_memory_mb() -> float:
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        return stats.get("peak_bytes_in_use", 0) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def make_data(num_clients: int, per_client: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = num_clients * per_client
    x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    y = rng.integers(0, 10, n).astype(np.int32)
    ds = ArrayDataset("random", x, y, x[:2000], y[:2000], 10, input_scale=1 / 255,
                      input_mean=(0.49, 0.48, 0.45), input_std=(0.25, 0.24, 0.26))
    table = np.arange(n, dtype=np.int32).reshape(num_clients, per_client)
    part = types.SimpleNamespace(index_table=table, counts=np.full(num_clients, per_client, np.int32))
    return ds, to_device(ds, part), held_out_to_device(ds)


def timeit(fn, reps: int) -> float:
    jax.block_until_ready(fn())  # warm-up / compile
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def bench_central(model, data, total: int, reps: int) -> float:
    opt_lr = 0.04
    idx = jnp.arange(total) % data.x.shape[0]

    @jax.jit
    def train(params):
        def step(p, s):
            rows = (idx + s * total) % data.x.shape[0]
            g = jax.grad(lambda q: model.loss(q, data.inputs(rows), data.y[rows])[0].mean())(p)
            return jax.tree_util.tree_map(lambda a, b: a - opt_lr * b, p, g), None
        return jax.lax.scan(step, params, jnp.arange(STEPS))[0]

    params = model.init(jax.random.key(0))
    return total * STEPS / timeit(lambda: train(params), reps)


def bench_loop(model, data, k: int, reps: int) -> float:
    """A per-client simulator: Python loops over clients and steps, one jitted SGD step."""
    @jax.jit
    def sgd_step(p, rows):
        g = jax.grad(lambda q: model.loss(q, data.inputs(rows), data.y[rows])[0].mean())(p)
        return jax.tree_util.tree_map(lambda a, b: a - 0.04 * b, p, g)

    params = model.init(jax.random.key(0))
    table = np.asarray(data.index_table)

    def run():
        out = None
        for c in range(k):
            p = params
            for s in range(STEPS):
                p = sgd_step(p, jnp.asarray(table[c, s * BATCH:(s + 1) * BATCH]))
            out = jax.tree_util.tree_map(lambda a, b: a - b, p, params)
        return out

    return k * STEPS * BATCH / timeit(run, reps)


def bench_engine(engine: CohortEngine, store: VersionStore, k: int, reps: int) -> tuple[float, float]:
    clients = np.arange(k) % engine.data.num_clients
    slots = np.zeros(k, np.int32)
    t0 = time.perf_counter()
    jax.block_until_ready(engine.train(store.stacked, slots, clients, np.arange(k)).delta)
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for r in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(engine.train(store.stacked, slots, clients, np.arange(k) + 1000 * (r + 1)).delta)
        best = min(best, time.perf_counter() - t0)
    return k * STEPS * BATCH / best, compile_s - best


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, skip 128 tasks")
    ap.add_argument("--json", help="write all figures to this path")
    ap.add_argument("--sweep-plans", action="store_true", help="also time vmap/map/chunked plans at 32 tasks")
    ap.add_argument("--sizes", default=None, help="comma-separated task counts (default 8,32,128)")
    args = ap.parse_args(argv)
    reps = 1 if args.quick else 3
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([8, 32] if args.quick else [8, 32, 128])

    model = cifar_cnn("shift")
    flax_model = cifar_cnn("flax")
    _, data, test = make_data(max(sizes), STEPS * BATCH)
    cfg = LocalTrainConfig(batch_size=BATCH, mode="steps", local_steps=STEPS, learning_rate=0.04)
    store = VersionStore(model.init(jax.random.key(0)), capacity=2)
    store.put(0, model.init(jax.random.key(0)))
    plan = auto_plan()
    res: dict = {"backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind),
                 "jax": jax.__version__, "python": platform.python_version(), "model": model.name,
                 "num_params": model.num_params, "batch": BATCH, "local_steps": STEPS, "plan": str(plan),
                 "cohort": {}, "compile_s": {}, "central": {}, "loop_shift": {}, "loop_flax": {}}
    rows = []
    for k in sizes:
        engine = CohortEngine(model, data, cfg, plan=plan)
        sps, comp = bench_engine(engine, store, k, reps)
        res["cohort"][k], res["compile_s"][k] = sps, comp
        res["central"][k] = bench_central(model, data, k * BATCH, reps)
        loop_k = min(k, 32)  # the loop's per-client rate does not depend on k
        res["loop_shift"][k] = bench_loop(model, data, loop_k, reps)
        res["loop_flax"][k] = bench_loop(flax_model, data, loop_k, reps)
        rows.append((k, sps, res["central"][k], res["loop_shift"][k], res["loop_flax"][k], comp))
        print(f"  measured {k} tasks", flush=True)

    # (d) forward-only: eval tasks over each client's 160 samples, and the server's test set.
    ev_engine = CohortEngine(model, data, cfg, LocalEvalConfig(batch_size=BATCH), plan=plan)
    k_ev = 32
    t = timeit(lambda: ev_engine.evaluate(store.stacked, np.zeros(k_ev, np.int32), np.arange(k_ev),
                                          np.arange(k_ev)).stats.sum, reps)
    res["eval_tasks_samples_per_s"] = k_ev * STEPS * BATCH / t
    params = model.init(jax.random.key(0))
    t = timeit(lambda: evaluate(model, params, test), reps)
    res["test_eval_samples_per_s"] = int(test.y.shape[0]) / t

    if args.sweep_plans:
        res["plan_sweep_32"] = {}
        for p in ["vmap", "map", "chunked:4", "chunked:8", "chunked:16"]:
            engine = CohortEngine(model, data, cfg, plan=p)
            res["plan_sweep_32"][p] = bench_engine(engine, store, 32, reps)[0]
            print(f"  plan {p}: {res['plan_sweep_32'][p]:.0f} samples/s", flush=True)

    res["peak_memory_mb"] = peak_memory_mb()
    k_ref = 32 if 32 in res["cohort"] else sizes[0]
    best_loop = max(res["loop_shift"][k_ref], res["loop_flax"][k_ref])
    res["cohort_over_loop"] = res["cohort"][k_ref] / best_loop
    res["cohort_over_central"] = res["cohort"][k_ref] / res["central"][k_ref]
    res["reference_tasks"] = k_ref

    print(f"\nbackend={res['backend']} ({res['device']}), jax {res['jax']}, plan={plan}, "
          f"{model.num_params:,} params, {STEPS} steps x batch {BATCH}  [samples/s]")
    print(f"{'tasks':>6} {'cohort':>9} {'central':>9} {'loop(shift)':>12} {'loop(flax)':>11} {'compile s':>10}")
    for k, c, ce, ls, lf, comp in rows:
        print(f"{k:>6} {c:>9.0f} {ce:>9.0f} {ls:>12.0f} {lf:>11.0f} {comp:>10.1f}")
    print(f"eval tasks (forward, 32 tasks): {res['eval_tasks_samples_per_s']:.0f} samples/s; "
          f"test-set eval: {res['test_eval_samples_per_s']:.0f} samples/s; peak memory {res['peak_memory_mb']:.0f} MB")
    print(f"cohort/central at {k_ref} tasks: {res['cohort_over_central']:.2f}x")
    print(f"cohort/loop at {k_ref} tasks (vs faster loop): {res['cohort_over_loop']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
    return res


if __name__ == "__main__":
    main()
