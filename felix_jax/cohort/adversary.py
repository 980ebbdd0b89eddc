"""Adversarial clients: a fixed, seeded share of the population whose training tasks send corrupted updates
or train on corrupted labels, inside the cohort engine's compiled call.

Which clients are adversarial is drawn once per run (:func:`adversarial_clients`: the first
``round(fraction * N)`` of a seeded permutation of the clients, so the adversaries at a smaller fraction
are among those at a larger one) and stays fixed. Each training task then carries one boolean, its
client's, into the jitted cohort call as a task array beside its slot, client and key: the corruption is
a ``jnp.where`` on that flag, so neither the fraction nor the draw compiles anything new; only the kind of
attack picks the program (:class:`Attack` is a static argument). An honest task's result is the one it
has without any adversary, bit for bit (``where`` selects it unchanged).

Kinds (``adversary.kind``):

* ``sign_flip``: the client sends ``-delta`` (the update it trained, negated);
* ``scale:X``: it sends ``X * delta``;
* ``gaussian:SIGMA``: it sends noise ``N(0, SIGMA^2 I)`` in place of its update (the Gaussian Byzantine
  workers of Blanchard et al., NeurIPS 2017, Sec. 5), drawn from the task's own key
  (``fold_in(task key, NOISE_STREAM)``), so a run reproduces;
* ``label_flip``: it trains on labels ``y -> C - 1 - y`` (C classes: ``9 - y`` on digits and CIFAR-10)
  and sends the update it trained, honestly computed; the losses it reports (its utility) are those on
  the flipped labels.

A task's work is otherwise the honest one: the same data, batches, steps and key.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from fractions import Fraction
from functools import lru_cache, partial
from typing import ClassVar, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..options import Range
from .local import TrainContext, TrainResult, train_final, train_init, train_step

# the adversary draw's stream under the run's seed, and the Gaussian noise's under the task's key: streams
# no other draw uses
ADVERSARY_STREAM = 0xAD7
NOISE_STREAM = 0xAD7


class AttackKind(enum.Enum):
    SIGN_FLIP = "sign_flip"
    SCALE = "scale"
    GAUSSIAN = "gaussian"
    LABEL_FLIP = "label_flip"


KIND_FORMS = "sign_flip, scale:X, gaussian:SIGMA or label_flip"


@dataclasses.dataclass(frozen=True)
class Attack:
    """What an adversarial client does (hashable: a static argument of the compiled cohort call)."""

    kind: AttackKind
    amount: float = 0.0  # scale: X; gaussian: SIGMA
    num_classes: int = 0  # label_flip: y -> num_classes - 1 - y

    @classmethod
    def parse(cls, text: str, num_classes: int = 0) -> "Attack":
        """``sign_flip``, ``scale:X`` (X finite), ``gaussian:SIGMA`` (SIGMA finite, > 0) or ``label_flip``;
        a ValueError saying the forms otherwise."""
        name, colon, value = str(text).partition(":")
        try:
            kind = AttackKind(name.strip())
        except ValueError:
            raise ValueError(f"kind={text!r}: expected {KIND_FORMS}") from None
        if kind in (AttackKind.SIGN_FLIP, AttackKind.LABEL_FLIP):
            if colon:
                raise ValueError(f"kind={text!r}: {kind.value} takes no value (expected {KIND_FORMS})")
            return cls(kind, 0.0, int(num_classes) if kind is AttackKind.LABEL_FLIP else 0)
        try:
            amount = float(value)
        except ValueError:
            raise ValueError(f"kind={text!r}: {kind.value} needs a number, e.g. {kind.value}:"
                             f"{'10' if kind is AttackKind.SCALE else '1.0'}") from None
        if kind is AttackKind.GAUSSIAN and not (math.isfinite(amount) and amount > 0):
            raise ValueError(f"kind={text!r}: SIGMA must be a finite number > 0")
        if not math.isfinite(amount):
            raise ValueError(f"kind={text!r}: X must be a finite number")
        return cls(kind, amount, 0)


@dataclasses.dataclass(frozen=True)
class AdversaryConfig:
    """A scenario's adversarial clients (``adversary.KEY=V``)."""

    fraction: float = 0.0  # share of the population that is adversarial (round(fraction * N) clients)
    kind: str = "sign_flip"  # what they do: sign_flip, scale:X, gaussian:SIGMA, label_flip
    seed: int | None = None  # the draw of which clients; None: the scenario's seed

    RANGES: ClassVar[Mapping[str, Range]] = {"fraction": Range.fraction(), "seed": Range(0, 2 ** 32 - 1)}
    HELP: ClassVar[Mapping[str, str]] = {"kind": KIND_FORMS, "seed": "none: the scenario's seed"}

    def __post_init__(self):
        Attack.parse(self.kind)  # a bad kind is refused when the scenario is built


def adversary_count(num_clients: int, fraction: float) -> int:
    """``round(fraction * N)``, half up, with ``fraction`` read as the decimal it is written as
    (``0.3 * 10`` is 3, never 2 from binary rounding).

    >>> adversary_count(12, 0.3), adversary_count(10, 0.25), adversary_count(10, 0.0), adversary_count(7, 1.0)
    (4, 3, 0, 7)
    """
    return int(math.floor(Fraction(repr(float(fraction))) * int(num_clients) + Fraction(1, 2)))


def adversarial_clients(num_clients: int, fraction: float, seed: int) -> np.ndarray:
    """(N,) bool: the adversarial clients, the first ``adversary_count(N, fraction)`` of a permutation of
    the clients drawn from ``seed`` (nested: a smaller fraction's are among a larger one's)."""
    chosen = np.zeros(int(num_clients), bool)
    count = adversary_count(num_clients, fraction)
    if count:
        order = np.random.default_rng(np.random.SeedSequence([int(seed), ADVERSARY_STREAM])).permutation(num_clients)
        chosen[order[:count]] = True
    return chosen


class Adversaries(NamedTuple):
    """What a cohort engine is given: the attack and the (N,) bool mask of the clients who make it."""

    attack: Attack
    clients: np.ndarray


def make_adversaries(config: AdversaryConfig, num_clients: int, num_classes: int, seed: int) -> Adversaries:
    """The run's adversaries (``config.seed``, else the scenario's ``seed``, draws them)."""
    draw = seed if config.seed is None else config.seed
    return Adversaries(Attack.parse(config.kind, num_classes),
                       adversarial_clients(num_clients, config.fraction, draw))


# ---------------------------------------------------------------- device side
def flip_labels(attack: Attack, attacker: jax.Array, y: jax.Array) -> jax.Array:
    """An adversarial task's labels: ``C - 1 - y`` where ``attacker``, else ``y`` itself."""
    return jnp.where(attacker, attack.num_classes - 1 - y, y).astype(y.dtype)


def corrupt_update(attack: Attack, delta, attacker: jax.Array, key: jax.Array):
    """The update a task sends: its ``delta`` corrupted by ``attack`` where ``attacker``, else ``delta``
    unchanged (``label_flip`` corrupts the labels, not the update)."""
    leaves, tree = jax.tree_util.tree_flatten(delta)
    if attack.kind is AttackKind.SIGN_FLIP:
        bad = [-d for d in leaves]
    elif attack.kind is AttackKind.SCALE:
        bad = [d * jnp.asarray(attack.amount, d.dtype) for d in leaves]
    elif attack.kind is AttackKind.GAUSSIAN:
        keys = jax.random.split(jax.random.fold_in(key, NOISE_STREAM), len(leaves))
        bad = [jnp.asarray(attack.amount, d.dtype) * jax.random.normal(k, d.shape, d.dtype)
               for k, d in zip(keys, leaves)]
    else:
        return delta
    return jax.tree_util.tree_unflatten(tree, [jnp.where(attacker, b, d) for b, d in zip(bad, leaves)])


class AttackedContext(NamedTuple):
    """A training task's context with its adversary flag and key (vmapped with the task)."""

    task: TrainContext
    attacker: jax.Array  # () bool: the task's client is adversarial
    key: jax.Array  # the task's key (Gaussian noise)


@lru_cache(maxsize=None)
def attacked_train(attack: Attack):
    """``(init, step, final)``: :mod:`.local`'s training functions for a cohort whose tasks may be
    adversarial; ``init`` takes the task's flag as ``attacker=``. One set per attack, so the engine's
    compiled programs are found again (``engine._cohort_jit``)."""

    def init(model, cfg, params, data, client, key, *rest, attacker):
        relabel = partial(flip_labels, attack, attacker) if attack.kind is AttackKind.LABEL_FLIP else None
        ctx, carry = train_init(model, cfg, params, data, client, key, *rest, relabel=relabel)
        return AttackedContext(ctx, attacker, key), carry

    def step(model, cfg, data, ctx: AttackedContext, carry, s, num_steps):
        return train_step(model, cfg, data, ctx.task, carry, s, num_steps)

    def final(ctx: AttackedContext, carry, num_steps, max_steps) -> TrainResult:
        out = train_final(ctx.task, carry, num_steps, max_steps)
        return out._replace(delta=corrupt_update(attack, out.delta, ctx.attacker, ctx.key))

    return init, step, final


def local_train_attacked(attack: Attack, attacker, model, cfg, max_steps: int, params, data, client, key, num_steps,
                         *rest) -> TrainResult:
    """:func:`~.local.local_train` for a task whose client may be adversarial (``attacker``): the debug
    backend's one-task reference, the same init / scan(step) / final the cohort runs."""
    init, step, final = attacked_train(attack)
    ctx, carry = init(model, cfg, params, data, client, key, *rest, attacker=jnp.asarray(attacker, bool))
    carry, _ = jax.lax.scan(lambda c, s: (step(model, cfg, data, ctx, c, s, num_steps), None), carry,
                            jnp.arange(max_steps))
    return final(ctx, carry, num_steps, max_steps)
