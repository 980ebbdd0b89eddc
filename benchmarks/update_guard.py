"""Cost of the update guard per aggregation, against one aggregation without it.

Prints a table and (with --json PATH) writes every figure. On the paper's CIFAR-10
CNN (537,610 parameters) with a buffer of K=10 updates, it times the server's
aggregation as ``FleetSimulator.aggregate`` runs it: per-update norms to the host,
FedBuff weights, the jitted weighted reduction and the server step (optax sgd),
until the new model is ready. Without the guard the norms come from a plain
jitted L2 norm (what the simulator used before); with it, the same norms also
tell finiteness (a second device call only when a norm is not finite), the host
rule judges the buffer, and the new model is checked for finiteness. "guarded,
1 rejected" adds zeroing the rejected row (a 1e6x update).
Baseline and guarded runs alternate in one loop, so both see the same machine
load; every figure is the median over ``--reps`` after a warm-up.

    python benchmarks/update_guard.py [--reps 50] [--json out.json]
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("update_guard.py")

import json
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from felix_jax.commands import command_parser, output_file, run_script
from felix_jax.fleet.server_optimizer import server_step, weighted_mean_delta
from felix_jax.fleet.update_guard import (UpdateGuardConfig, judge_updates, remember_norms, tree_all_finite,
                                          update_health, zero_rejected)
from felix_jax.models import cifar_cnn
from felix_jax.policies.aggregators.fedbuff import fedbuff_weight

K = 10


@jax.jit
def plain_norms(deltas) -> jax.Array:
    """The unguarded server's per-update L2 norms (BufferInfo.delta_norms)."""
    return jnp.sqrt(sum(jnp.sum(d.reshape(d.shape[0], -1) ** 2, axis=1) for d in jax.tree_util.tree_leaves(deltas)))


def make_buffer(params, seed: int = 0):
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    rows = [0.01 * jax.random.normal(k, (K,) + p.shape, p.dtype) for k, p in zip(keys, leaves)]
    return jax.tree_util.tree_unflatten(tree, rows)


class Server:
    """The server step of one aggregation, with or without the guard (mirrors FleetSimulator.aggregate)."""

    def __init__(self, params, guard: UpdateGuardConfig | None):
        self.opt = optax.sgd(0.3)
        self.params, self.state = params, self.opt.init(params)
        self.guard, self.recent = guard, np.zeros(0)
        self.staleness = np.arange(K) % 3

    def aggregate(self, deltas) -> None:
        if self.guard is None:
            norms = np.asarray(plain_norms(deltas), np.float64)
            keep = np.ones(K, bool)
        else:
            finite, norms = update_health(deltas)
            verdict = judge_updates(finite, norms, self.recent, self.guard)
            self.recent = remember_norms(self.recent, norms, verdict, self.guard)
            keep = verdict.accepted
            if not keep.all():
                deltas = zero_rejected(deltas, jnp.asarray(keep))
        assert norms.shape == (K,)
        weights = np.where(keep, fedbuff_weight(self.staleness), 0.0) * (K / keep.sum())
        mean = weighted_mean_delta(deltas, jnp.asarray(weights, jnp.float32), normalize=False)
        params, state = server_step(self.opt, self.params, self.state, mean)
        if self.guard is not None and not bool(tree_all_finite(params)):
            raise RuntimeError("diverged")
        jax.block_until_ready(params)
        # keep the model fixed so every repetition does the same work
        self.last = params


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - t0)


def main(argv=None) -> None:
    ap = command_parser(__doc__)
    ap.add_argument("--reps", type=int, default=50, help="timed repetitions (after one warm-up)")
    ap.add_argument("--json", type=output_file, help="write the figures here")
    args = ap.parse_args(argv)

    model = cifar_cnn()
    params = model.init(jax.random.key(0))
    num_params = sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))
    clean = make_buffer(params)
    poisoned = jax.tree_util.tree_map(lambda d: d.at[3].multiply(1e6), clean)  # one 1e6x update
    nan_row = jax.tree_util.tree_map(lambda d: d.at[3].set(jnp.nan), clean)
    guard = UpdateGuardConfig(min_history=1)  # the ratio rule applies from the first buffer
    servers = {"unguarded": (Server(params, None), clean), "guarded": (Server(params, guard), clean),
               "guarded, 1 rejected": (Server(params, guard), poisoned)}
    parts = {
        "update_health (finite + norms)": lambda: update_health(clean),
        "update_health, one NaN update": lambda: update_health(nan_row),
        "plain norms (unguarded)": lambda: jax.device_get(plain_norms(clean)),
        "judge_updates + remember_norms (host)": lambda: remember_norms(
            np.ones(100), np.ones(K), judge_updates(np.ones(K, bool), np.ones(K), np.ones(100), guard), guard),
        "tree_all_finite (new model)": lambda: bool(tree_all_finite(params)),
        "zero_rejected": lambda: jax.block_until_ready(zero_rejected(clean, jnp.arange(K) != 3)),
    }
    for _ in range(3):  # warm-up: compile everything
        for server, deltas in servers.values():
            server.aggregate(deltas)
        for fn in parts.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in [*servers, *parts]}
    for _ in range(args.reps):
        for name, (server, deltas) in servers.items():
            times[name].append(timed(lambda: server.aggregate(deltas)))
        for name, fn in parts.items():
            times[name].append(timed(fn))
    med = {name: float(np.median(v)) for name, v in times.items()}
    base = med["unguarded"]

    print(f"update guard on the paper CNN ({num_params:,} parameters), K={K}, {jax.devices()[0].platform}, "
          f"median of {args.reps}")
    print(f"{'':40s} {'ms':>8s} {'vs unguarded':>13s}")
    for name in servers:
        print(f"{'aggregation, ' + name:40s} {med[name]:8.2f} {med[name] / base:12.2f}x")
    for name in parts:
        print(f"{'  ' + name:40s} {med[name]:8.2f}")
    overhead = med["guarded"] - base
    print(f"guard overhead per aggregation: {overhead:+.2f} ms ({100 * overhead / base:+.1f}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"num_params": num_params, "K": K, "reps": args.reps, "platform": jax.devices()[0].platform,
                       "machine": platform.processor() or platform.machine(), "median_ms": med,
                       "overhead_ms": overhead, "overhead_fraction": overhead / base}, f, indent=2)


if __name__ == "__main__":
    run_script("update_guard.py", main)
