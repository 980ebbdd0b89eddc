"""Centralized reference: how far a model gets on a preset's data (CIFAR-10 or Speech Commands) without federation.

Trains one model from the registry (``--model``, e.g. ``cifar_cnn_narrow``) by plain
minibatch SGD on the pooled training subset the preset's federated runs use, and
evaluates its accuracy on the preset's test subset every ``--eval-every`` steps.
It answers "what can this learner reach on this data at all", independently of any
federated strategy.

Same as the emulator (felix_jax/experiment/build.py and felix_jax/cohort/local.py):

- data: ``load_dataset(preset.dataset).subset(num_train, num_test)``, the runner's
  seeded uniform sample (seed 0) of the training and test sets, not a prefix (the
  shared CIFAR-10 copy is ordered by class);
- inputs: the data set's own normalisation (``felix_jax.data.federated.normalize``);
- augmentation: the project's random crop (4-pixel padding) + horizontal flip
  (``felix_jax.data.augment.random_crop_flip``) on the raw images when the preset has
  ``augment=True`` (``--no-augment`` turns it off);
- optimizer: ``LocalTrainConfig(...).optimizer()``, i.e. optax SGD at the preset's
  learning rate (0.04), no momentum, no weight decay, batch 32;
- initial parameters: the runner's model-init seed for the preset's ``seed``.

Batches: each epoch is a fresh permutation of the pooled subset cut into full
batches (the last partial batch dropped, as the clients' loader does); step i's crop and
flip use the seed's augmentation key folded with i, whatever ``--eval-every`` is. Test accuracy
uses the whole test subset (evaluation mode, argmax of the logits).

Reproducible: the same seed gives the same curve in every process on the same jax/XLA
build and CPU. XLA's CPU code splits sums differently with the number of CPUs the process
may use and the number of host devices (``--xla_force_host_platform_device_count`` in
``XLA_FLAGS``), and 375 SGD steps turn those last-bit differences into a few points of
one-epoch accuracy. Run as a script, it therefore fixes both before jax starts: the first
``--cpus`` CPUs of its affinity (default 1) and one host device. Called as ``main()`` from
another program, it leaves that program's process as it is. The JSON records the CPU
configuration and the jax version it ran with. (On a GPU backend the pin covers the host side only.)

    python benchmarks/centralized_reference.py --model cifar_cnn_narrow --steps 6000 --eval-every 250 \\
        [--preset cifar10-fidelity] [--num-train 12000] [--num-test 500] [--json out.json]
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: a Ctrl-C while jax loads ends it in one line
    from felix_jax.startup import exit_on_interrupt

    exit_on_interrupt("centralized_reference.py")

import argparse
import json
import os
import platform
import re
import time

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

from felix_jax.commands import command_parser, output_file, positive_float, positive_int, run_script
from felix_jax.cohort import LocalTrainConfig
from felix_jax.data.augment import random_crop_flip
from felix_jax.data.federated import normalize
from felix_jax.data.loaders import load_dataset
from felix_jax.experiment.presets import get_preset
from felix_jax.experiment.registry import make_model


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser(__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="cifar10-fidelity", help="scenario whose data subset / lr / batch to use")
    p.add_argument("--model", default="cifar_cnn_narrow", help="registry model name")
    p.add_argument("--num-train", type=int, default=None, help="training subset size (default: the preset's)")
    p.add_argument("--num-test", type=int, default=None, help="test subset size (default: the preset's)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="default: the preset's (32)")
    p.add_argument("--lr", type=positive_float, default=None, help="default: the preset's (0.04)")
    p.add_argument("--steps", type=int, default=6000, help="training steps")
    p.add_argument("--eval-every", type=int, default=250, help="a test evaluation every this many steps")
    p.add_argument("--no-augment", action="store_true", help="no crop+flip even if the preset augments")
    p.add_argument("--augment", action="store_true", help="crop+flip even if the preset does not")
    p.add_argument("--seed", type=int, default=None, help="model-init / batch-order seed (default: the preset's)")
    p.add_argument("--json", type=output_file, default=None, help="write the curve and settings here")
    p.add_argument("--cpus", type=int, default=1,
                   help="run as a script, use only the first N CPUs of this process (XLA's CPU code depends on them)")
    return p.parse_args(argv)


def fix_cpu_configuration(cpus: int) -> None:
    """Pins this process to its first ``cpus`` allowed CPUs and one XLA host device (host-only).

    Must run before jax starts its backend (the first jax operation); XLA reads both then.
    """
    if cpus < 1:
        raise SystemExit(f"centralized_reference: --cpus {cpus}: must be at least 1")
    if hasattr(os, "sched_setaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, allowed[:cpus])
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = " ".join(flags.split() + ["--xla_force_host_platform_device_count=1"])


def cpu_configuration() -> dict:
    """What XLA's CPU code depended on in this run: CPUs, host devices, flags, versions."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpus": cpus, "host_devices": jax.local_device_count("cpu"), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "processor": platform.processor() or platform.machine()}


def main(argv=None) -> dict:
    args = parse_args(argv)
    sc = get_preset(args.preset)
    num_train = args.num_train if args.num_train is not None else sc.num_train
    num_test = args.num_test if args.num_test is not None else sc.num_test
    batch = sc.batch_size if args.batch_size is None else args.batch_size
    lr = sc.learning_rate if args.lr is None else args.lr
    if args.augment and args.no_augment:
        raise SystemExit("centralized_reference: --augment and --no-augment contradict each other")
    augment = (bool(sc.augment) or args.augment) and not args.no_augment
    seed = sc.seed if args.seed is None else args.seed

    ds = load_dataset(sc.dataset)
    if num_train is not None or num_test is not None:
        ds = ds.subset(num_train, num_test)  # the runner's subset (seed 0)
    n = len(ds.train_y)
    if n < batch:
        raise SystemExit(f"{n} training samples < batch {batch}")
    model = make_model(args.model, ds.input_shape, ds.num_classes)
    seeds = np.random.SeedSequence(seed).spawn(5)  # as the runner: partition, trace, profile, model init, streams
    params = model.init(jax.random.key(int(seeds[3].generate_state(1)[0])))
    opt = LocalTrainConfig(batch_size=batch, learning_rate=lr).optimizer()
    opt_state = opt.init(params)

    scale, mean, std = (jnp.asarray(v, jnp.float32) for v in (ds.input_scale, ds.input_mean, ds.input_std))
    train_x, train_y = jnp.asarray(ds.train_x), jnp.asarray(ds.train_y, jnp.int32)
    test_x, test_y = jnp.asarray(ds.test_x), jnp.asarray(ds.test_y, jnp.int32)

    def step(carry, inp):
        params, opt_state = carry
        idx, key = inp
        raw = train_x[idx]
        if augment:
            raw = random_crop_flip(key, raw)
        x, y = normalize(raw, scale, mean, std), train_y[idx]

        def loss_fn(p):
            return model.loss(p, x, y)[0].mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (jax.tree_util.tree_map(lambda a, u: a + u, params, updates), opt_state), loss

    @jax.jit
    def run_chunk(params, opt_state, idx, keys):
        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), (idx, keys))
        return params, opt_state, losses.mean()

    @jax.jit
    def accuracy(params):
        correct = 0
        for lo in range(0, test_x.shape[0], 500):  # static chunks
            logits = model.apply(params, normalize(test_x[lo:lo + 500], scale, mean, std))
            correct = correct + (jnp.argmax(logits, -1) == test_y[lo:lo + 500]).sum()
        return correct / test_x.shape[0]

    rng = np.random.default_rng(int(seeds[0].generate_state(1)[0]))
    per_epoch = n // batch  # drop_last

    def batches(count: int, state: dict) -> np.ndarray:
        out = []
        while len(out) < count:
            if state["pos"] >= per_epoch:
                state["perm"], state["pos"] = rng.permutation(n), 0
            out.append(state["perm"][state["pos"] * batch:(state["pos"] + 1) * batch])
            state["pos"] += 1
        return np.stack(out).astype(np.int32)

    order = {"perm": rng.permutation(n), "pos": 0}
    aug_key = jax.random.key(seed + 1)
    rows = [{"steps": 0, "samples": 0, "epochs": 0.0, "train_loss": None, "accuracy": float(accuracy(params)),
             "wall_s": 0.0}]
    print(f"{model.name}: {model.num_params:,} params | {args.preset}: {n} train / {len(ds.test_y)} test | "
          f"batch {batch}, lr {lr}, augment {augment} | backend {jax.default_backend()}")
    print(f"| {'steps':>6} | {'samples':>8} | {'epochs':>6} | {'train loss':>10} | {'test acc':>8} | {'wall s':>7} |")
    print(f"|{'-' * 8}|{'-' * 10}|{'-' * 8}|{'-' * 12}|{'-' * 10}|{'-' * 9}|")

    def show(r):
        loss = "-" if r["train_loss"] is None else f"{r['train_loss']:.4f}"
        print(f"| {r['steps']:>6} | {r['samples']:>8} | {r['epochs']:>6.2f} | {loss:>10} | {r['accuracy']:>8.4f} "
              f"| {r['wall_s']:>7.1f} |", flush=True)

    show(rows[0])
    t0, done = time.perf_counter(), 0
    while done < args.steps:
        k = min(args.eval_every, args.steps - done)
        idx = batches(k, order)
        # one augmentation key per step, by its index: the curve does not depend on --eval-every
        keys = jax.vmap(lambda i: jax.random.fold_in(aug_key, i))(jnp.arange(done, done + k))
        params, opt_state, loss = run_chunk(params, opt_state, jnp.asarray(idx), keys)
        done += k
        rows.append({"steps": done, "samples": done * batch, "epochs": done * batch / n, "train_loss": float(loss),
                     "accuracy": float(accuracy(params)), "wall_s": time.perf_counter() - t0})
        show(rows[-1])
    best = max(rows, key=lambda r: r["accuracy"])
    print(f"best test accuracy {best['accuracy']:.4f} at step {best['steps']}; final {rows[-1]['accuracy']:.4f}")
    result = {"model": args.model, "model_name": model.name, "num_params": model.num_params, "preset": args.preset,
              "num_train": n, "num_test": int(len(ds.test_y)), "batch_size": batch, "learning_rate": lr,
              "augment": augment, "seed": seed, "steps": args.steps, "eval_every": args.eval_every,
              "optimizer": "optax.sgd (no momentum, no weight decay)", "backend": jax.default_backend(),
              "machine": platform.platform(), "cpu_configuration": cpu_configuration(), "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    fix_cpu_configuration(parse_args().cpus)
    run_script("centralized_reference.py", main)
