"""The server view's bytes per client, and what its availability history adds (docs/architecture.md
"Memory per client").

Builds a ``ClientMap`` of ``--clients`` clients, sums the nbytes of its columns and of its five
maintained masks, with and without the history's four columns, and times a full refresh that flips
half of the clients (the history's whole-array update at a slot boundary) against the same refresh
with the history's writes switched off.

    python benchmarks/view_bytes.py --clients 1000000
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("view_bytes.py")

import dataclasses
import time

import numpy as np

from felix_jax.commands import command_parser, positive_int, run_script
from felix_jax.fleet.clientmap import ClientMap
from felix_jax.traces import Tier

HISTORY = ("tier_since_s", "last_online_s", "departures", "online_weight")


def refresh_seconds(n: int, history: bool, repeats: int = 4) -> float:
    """Median seconds of ``set_tier(slice(None), ...)`` flipping about half of ``n`` clients."""
    view = ClientMap.create(np.ones(n, np.int64))
    if not history:
        view.__dict__["_history_many"] = lambda rows, now: None
    view.trainable(0, True)  # the once-per-round mask is maintained too, as in a TierTrack run
    rng = np.random.default_rng(0)
    took = []
    for k in range(repeats):
        tiers = np.where(rng.random(n) < 0.5, Tier.AVL_TRAIN, Tier.UN_AVL).astype(np.int8)
        t0 = time.perf_counter()
        view.set_tier(slice(None), tiers, 30.0 * (k + 1))
        took.append(time.perf_counter() - t0)
    return float(np.median(took))


def main(argv=None) -> None:
    parser = command_parser(__doc__)
    parser.add_argument("--clients", type=positive_int, default=10 ** 6, help="clients in the view")
    n = parser.parse_args(argv).clients
    view = ClientMap.create(np.ones(n, np.int64), np.ones(n))
    view.trainable(0, True)
    index = view._index()
    columns = {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}
    columns = {k: v.nbytes for k, v in columns.items() if isinstance(v, np.ndarray)}
    masks = sum(m.nbytes for m in (index.train_ok, index.eval_ok, index.once_ok, index.explored.mask,
                                   index.trained.mask))
    history = sum(columns[k] for k in HISTORY)
    total = sum(columns.values()) + masks
    print(f"{n:,} clients: {total:,} bytes, {total / n:.1f} a client "
          f"({(total - history) / n:.1f} without the availability history, which takes {history / n:.1f})")
    for name, b in columns.items():
        print(f"  {name:<24} {b / n:4.1f}")
    print(f"  {'five maintained masks':<24} {masks / n:4.1f}")
    with_s, without_s = refresh_seconds(n, True), refresh_seconds(n, False)
    print(f"a full refresh flipping half the clients: {1e3 * with_s:.1f} ms ({1e3 * without_s:.1f} ms without "
          "the history's writes)")


if __name__ == "__main__":
    run_script("view_bytes.py", main)
