"""Cohort-engine throughput: samples/s of vectorized client training vs baselines.

Prints a table and (with --json PATH) writes every figure. Measures, on the
paper's CIFAR-10 CNN (537,610 parameters), 5 local SGD steps of batch 32 per task:
  (a) centralized jitted training on one batch of the same total size,
  (b) the cohort engine at 8, 32, 128 tasks (its automatic execution plan),
  (c) a per-client Python loop over a jitted single-client step, with the engine's
      conv formulation and with plain flax nn.Conv (what per-client simulators run),
  (d) forward-only evaluation (eval tasks; server test-set evaluation),
plus compile time per bucket shape and peak memory. ``--sweep-plans`` also times
vmap / lax.map / chunked plans at 32 tasks (how ``auto_plan`` was chosen);
``--plans vmap,map`` times the named plans at every ``--sizes`` task count.
``--device-counts 1,2,4`` times the sharded cohort (one bucket split over that many
devices) at every ``--sizes`` task count: on a CPU each count runs in a subprocess
with that many forced host devices (they share the same cores, so expect no
speed-up there: it checks the path, not the hardware), on accelerators in this
process with the first N devices. ``--skip-baselines`` leaves out (a), (c), (d).
Inputs are random uint8 images: throughput does not depend on pixel values.

    python benchmarks/cohort_throughput.py [--quick] [--json out.json] [--sweep-plans]
    python benchmarks/cohort_throughput.py --skip-baselines --device-counts 1,2,4 --sizes 8,32
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("cohort_throughput.py")

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from felix_jax.commands import command_parser, output_file, positive_int, run_script
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


def sharded_throughput(num_devices: int, sizes: list[int], reps: int, plan: str | None = None) -> dict:
    """samples/s (and compile s) of the cohort engine over ``num_devices`` devices, per task count."""
    model = cifar_cnn("shift")
    _, data, _ = make_data(max(sizes), STEPS * BATCH)
    cfg = LocalTrainConfig(batch_size=BATCH, mode="steps", local_steps=STEPS, learning_rate=0.04)
    store = VersionStore(model.init(jax.random.key(0)), capacity=2)
    store.put(0, model.init(jax.random.key(0)))
    out = {"devices": num_devices, "device_kind": str(jax.devices()[0].device_kind), "samples_per_s": {},
           "compile_s": {}}
    for k in sizes:
        engine = CohortEngine(model, data, cfg, plan=plan, devices=num_devices)
        out["plan"] = str(engine.plan)
        out["samples_per_s"][k], out["compile_s"][k] = bench_engine(engine, store, k, reps)
        out.setdefault("bucket_sizes", {})[k] = engine.records[-1].padded_tasks
    return out


def by_device_count(counts: list[int], sizes: list[int], reps: int, plan: str | None) -> dict:
    """``sharded_throughput`` per device count: forced host devices in subprocesses on CPU."""
    res = {}
    for n in counts:
        if jax.default_backend() != "cpu":
            if n > jax.device_count():
                print(f"  {n} devices: only {jax.device_count()} present, skipped", flush=True)
                continue
            res[n] = sharded_throughput(n, sizes, reps, plan)
        else:
            cmd = [sys.executable, __file__, "--child-devices", str(n), "--sizes", ",".join(map(str, sizes)),
                   "--reps", str(reps)] + (["--plan", plan] if plan else [])
            env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"}
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            child = json.loads(proc.stdout.strip().splitlines()[-1])
            res[n] = {key: {int(k): v for k, v in val.items()} if isinstance(val, dict) else val  # JSON keys: str
                      for key, val in child.items()}
        print(f"  {n} device(s): " + ", ".join(f"{k} tasks {v:.0f}" for k, v in res[n]["samples_per_s"].items())
              + " samples/s", flush=True)
    return res


def main(argv=None) -> dict:
    ap = command_parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, skip 128 tasks")
    ap.add_argument("--json", type=output_file, help="write all figures to this path")
    ap.add_argument("--sweep-plans", action="store_true", help="also time vmap/map/chunked plans at 32 tasks")
    ap.add_argument("--sizes", default=None, help="comma-separated task counts (default 8,32,128)")
    ap.add_argument("--plans", default=None, help="comma-separated plans to time at every size (vmap,map,chunked:8)")
    ap.add_argument("--device-counts", default=None, help="comma-separated device counts for the sharded cohort")
    ap.add_argument("--plan", default=None, help="the plan of --device-counts (default: auto per backend)")
    ap.add_argument("--skip-baselines", action="store_true", help="no central / loop / eval figures")
    ap.add_argument("--reps", type=positive_int, default=None,
                    help="timed repetitions (best of; default 3, 1 with --quick)")
    ap.add_argument("--child-devices", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    reps = (1 if args.quick else 3) if args.reps is None else args.reps
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([8, 32] if args.quick else [8, 32, 128])
    if args.child_devices:  # one device count, in a process started with that many forced host devices
        print(json.dumps(sharded_throughput(args.child_devices, sizes, reps, args.plan)))
        return {}

    model = cifar_cnn("shift")
    flax_model = cifar_cnn("flax")
    plan = auto_plan()
    res: dict = {"backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind),
                 "device_count": jax.device_count(), "jax": jax.__version__, "python": platform.python_version(),
                 "model": model.name, "num_params": model.num_params, "batch": BATCH, "local_steps": STEPS,
                 "plan": str(plan), "sizes": sizes}
    print(f"backend={res['backend']} ({res['device']} x {res['device_count']}), jax {res['jax']}, "
          f"{model.num_params:,} params, {STEPS} steps x batch {BATCH}", flush=True)
    if args.device_counts:  # first: children on a CPU must not share the cores with this process's work
        counts = [int(n) for n in args.device_counts.split(",")]
        res["by_devices"] = by_device_count(counts, sizes, reps, args.plan)
    if not args.skip_baselines or args.plans or args.sweep_plans:
        _, data, test = make_data(max(sizes), STEPS * BATCH)
        cfg = LocalTrainConfig(batch_size=BATCH, mode="steps", local_steps=STEPS, learning_rate=0.04)
        store = VersionStore(model.init(jax.random.key(0)), capacity=2)
        store.put(0, model.init(jax.random.key(0)))
    if not args.skip_baselines:
        res.update(baselines(model, flax_model, data, test, cfg, store, plan, sizes, reps))
    if args.plans:
        res["plans"] = {}
        for p in args.plans.split(","):
            res["plans"][p] = {k: bench_engine(CohortEngine(model, data, cfg, plan=p, devices=1), store, k, reps)[0]
                               for k in sizes}
            print(f"  plan {p}: " + ", ".join(f"{k} tasks {v:.0f}" for k, v in res["plans"][p].items())
                  + " samples/s", flush=True)
    if args.sweep_plans:
        res["plan_sweep_32"] = {}
        for p in ["vmap", "map", "chunked:4", "chunked:8", "chunked:16"]:
            engine = CohortEngine(model, data, cfg, plan=p, devices=1)
            res["plan_sweep_32"][p] = bench_engine(engine, store, 32, reps)[0]
            print(f"  plan {p}: {res['plan_sweep_32'][p]:.0f} samples/s", flush=True)
    res["peak_memory_mb"] = peak_memory_mb()

    print(f"\n[samples/s; auto plan {plan}]")
    if "cohort" in res:
        print(f"{'tasks':>6} {'cohort':>9} {'central':>9} {'loop(shift)':>12} {'loop(flax)':>11} {'compile s':>10}")
        for k in sizes:
            print(f"{k:>6} {res['cohort'][k]:>9.0f} {res['central'][k]:>9.0f} {res['loop_shift'][k]:>12.0f} "
                  f"{res['loop_flax'][k]:>11.0f} {res['compile_s'][k]:>10.1f}")
        print(f"eval tasks (forward, 32 tasks): {res['eval_tasks_samples_per_s']:.0f} samples/s; "
              f"test-set eval: {res['test_eval_samples_per_s']:.0f} samples/s; "
              f"peak memory {res['peak_memory_mb']:.0f} MB")
        print(f"cohort/central at {res['reference_tasks']} tasks: {res['cohort_over_central']:.2f}x")
        print(f"cohort/loop at {res['reference_tasks']} tasks (vs faster loop): {res['cohort_over_loop']:.2f}x")
    tables = [("plan", res["plans"])] if "plans" in res else []
    if "by_devices" in res:
        tables.append(("devices", {n: r["samples_per_s"] for n, r in res["by_devices"].items()}))
    for title, table in tables:
        print(f"{title:>10} " + " ".join(f"{k:>9}" for k in sizes) + "   (tasks)")
        for name, row in table.items():
            print(f"{name!s:>10} " + " ".join(f"{row[k]:>9.0f}" for k in sizes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
    return res


def baselines(model, flax_model, data, test, cfg, store, plan, sizes, reps) -> dict:
    """(a) central, (b) the cohort engine on one device, (c) per-client loops, (d) forward-only."""
    res: dict = {"cohort": {}, "compile_s": {}, "central": {}, "loop_shift": {}, "loop_flax": {}}
    for k in sizes:
        engine = CohortEngine(model, data, cfg, plan=plan, devices=1)
        res["cohort"][k], res["compile_s"][k] = bench_engine(engine, store, k, reps)
        res["central"][k] = bench_central(model, data, k * BATCH, reps)
        loop_k = min(k, 32)  # the loop's per-client rate does not depend on k
        res["loop_shift"][k] = bench_loop(model, data, loop_k, reps)
        res["loop_flax"][k] = bench_loop(flax_model, data, loop_k, reps)
        print(f"  measured {k} tasks", flush=True)

    # (d) forward-only: eval tasks over each client's 160 samples, and the server's test set.
    ev_engine = CohortEngine(model, data, cfg, LocalEvalConfig(batch_size=BATCH), plan=plan, devices=1)
    k_ev = 32
    t = timeit(lambda: ev_engine.evaluate(store.stacked, np.zeros(k_ev, np.int32), np.arange(k_ev),
                                          np.arange(k_ev)).stats.sum, reps)
    res["eval_tasks_samples_per_s"] = k_ev * STEPS * BATCH / t
    params = model.init(jax.random.key(0))
    t = timeit(lambda: evaluate(model, params, test), reps)
    res["test_eval_samples_per_s"] = int(test.y.shape[0]) / t
    k_ref = 32 if 32 in res["cohort"] else sizes[0]
    best_loop = max(res["loop_shift"][k_ref], res["loop_flax"][k_ref])
    res["cohort_over_loop"] = res["cohort"][k_ref] / best_loop
    res["cohort_over_central"] = res["cohort"][k_ref] / res["central"][k_ref]
    res["reference_tasks"] = k_ref
    return res


if __name__ == "__main__":
    run_script("cohort_throughput.py", main)
