"""Synthetic availability traces (docs/architecture.md), all seeded and vectorized.

* ``always_available``: the paper's "100%" scenario (reference trace ``syn_0``).
* ``slot_bernoulli``: the paper's synthetic "90%" / "50%" scenarios (Sec. 5, Fig. 8a;
  reference traces ``syn_20`` / ``syn_50``, docs/file-formats.md): 144 slots of 600 s, each
  slot independently available with probability ``p``.
* ``diurnal``: a day/night model for experiments beyond the paper (Sec. 2 reports
  5x daily swings, 10% at the trough to 80% at the peak, in production fleets).

``seed`` everywhere accepts an int, a ``np.random.SeedSequence`` or a
``np.random.Generator`` (docs/architecture.md "Determinism").
"""

from __future__ import annotations

import numpy as np

from .availability import AvailabilityTrace, BeyondEnd, Tier


# Clients per generation chunk: bounds the (clients, slots) work arrays' memory.
_CHUNK_CLIENTS = 1 << 15


def always_available(num_clients: int, duration_s: float = 0.0) -> AvailabilityTrace:
    """Every client ``AVL_TRAIN`` from t=0 on, forever (the paper's "100%")."""
    return AvailabilityTrace(
        num_clients=num_clients,
        times=np.zeros(num_clients),
        states=np.full(num_clients, int(Tier.AVL_TRAIN), dtype=np.int8),
        offsets=np.arange(num_clients + 1, dtype=np.int64),
        duration_s=float(duration_s),
        beyond_end="hold",
    )


def slot_bernoulli(
    num_clients: int,
    p: float,
    num_slots: int = 144,
    slot_s: float = 600.0,
    seed=0,
    *,
    first_slot_available: bool = True,
    end_state: Tier | int = Tier.UN_AVL,
    beyond_end: BeyondEnd = "hold",
) -> AvailabilityTrace:
    """The paper's slotted synthetic availability (Sec. 5 "90%"/"50%" scenarios).

    Each client's time is cut into ``num_slots`` slots of ``slot_s`` seconds; each
    slot is ``AVL_TRAIN`` with probability ``p`` (independently), else ``UN_AVL``;
    consecutive equal slots are merged into one row. As in the reference traces
    ``syn_20``/``syn_50`` (docs/file-formats.md), every client is ``AVL_TRAIN`` in the
    first slot (``first_slot_available``) and enters ``end_state`` (``UN_AVL``) at
    ``num_slots * slot_s`` (24 h by default), which it holds afterwards.
    The expected time-average availability over the slots is
    ``(1 + (num_slots - 1) * p) / num_slots`` (90.07% for p = 0.9).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    if num_slots < 1 or slot_s <= 0:
        raise ValueError("num_slots must be >= 1 and slot_s > 0")
    rng = np.random.default_rng(seed)
    end = int(Tier.parse(end_state))
    counts = np.zeros(num_clients, dtype=np.int64)
    times_parts, states_parts = [], []
    # Chunks over clients only bound memory: the random stream is consumed in the
    # same order as one (num_clients, num_slots) draw, so results do not depend on it.
    for start in range(0, num_clients, _CHUNK_CLIENTS):
        m = min(_CHUNK_CLIENTS, num_clients - start)
        avail = rng.random((m, num_slots)) < p
        if first_slot_available:
            avail[:, 0] = True
        states = np.empty((m, num_slots + 1), dtype=np.int8)
        states[:, :num_slots] = np.where(avail, int(Tier.AVL_TRAIN), int(Tier.UN_AVL))
        states[:, num_slots] = end
        change = np.ones(states.shape, dtype=bool)
        change[:, 1:] = states[:, 1:] != states[:, :-1]
        client, slot = np.nonzero(change)  # row-major: sorted by client, then slot
        counts[start : start + m] = np.bincount(client, minlength=m)
        times_parts.append(slot * float(slot_s))
        states_parts.append(states[client, slot])
    offsets = np.zeros(num_clients + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    times = np.concatenate(times_parts) if times_parts else np.zeros(0)
    row_states = np.concatenate(states_parts) if states_parts else np.zeros(0, np.int8)
    return AvailabilityTrace(
        num_clients=num_clients,
        times=times,
        states=row_states,
        offsets=offsets,
        duration_s=num_slots * float(slot_s),
        beyond_end=beyond_end,
    )


def diurnal(
    num_clients: int,
    seed=0,
    period_s: float = 86400.0,
    *,
    num_periods: int = 7,
    slot_s: float = 300.0,
    mean_availability: float = 0.3,
    amplitude: float = 0.2,
    peak_time_s: float = 3 * 3600.0,
    phase_spread_s: float = 2 * 3600.0,
    stickiness: float = 0.9,
    eval_availability: float = 0.0,
    beyond_end: BeyondEnd = "repeat",
) -> AvailabilityTrace:
    """Day/night availability with per-client phase and sticky sessions.

    Model (documented here; not from the paper, which motivates it in Sec. 2):
    client ``c`` has a phase offset ``phi_c ~ Normal(0, phase_spread_s)`` (time
    zone, habits) and a train-availability probability

        p_c(t) = clip(mean_availability
                      + amplitude * cos(2 pi (t - peak_time_s - phi_c) / period_s), 0, 1)

    peaking at night (03:00 by default: idle and charging). Time is cut into
    slots of ``slot_s``; the trainable indicator follows a sticky chain: slot k keeps
    slot k-1's value with probability ``stickiness``, else it is redrawn as
    Bernoulli(p_c(t_k)) (the marginal stays close to p_c(t), mean session length
    is about ``slot_s / (1 - stickiness)``). A client that cannot train is
    ``AVL_EVAL`` with an independent sticky chain of probability
    ``eval_availability`` (0 disables the eval tier), else ``UN_AVL``. The trace
    covers ``num_periods`` periods; the state at t=0 is the chain's first slot
    (not forced available). The defaults swing between 10% and 50% available.
    """
    for name, v in (("mean_availability", mean_availability), ("stickiness", stickiness),
                    ("eval_availability", eval_availability)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {v}")
    if slot_s <= 0 or period_s <= 0 or num_periods < 1:
        raise ValueError("slot_s and period_s must be > 0 and num_periods >= 1")
    rng = np.random.default_rng(seed)
    num_slots = int(round(num_periods * period_s / slot_s))
    phase = rng.normal(0.0, phase_spread_s, size=num_clients)
    train = np.zeros(num_clients, dtype=bool)
    evals = np.zeros(num_clients, dtype=bool)
    prev = np.full(num_clients, -1, dtype=np.int8)
    rows_c, rows_k, rows_s = [], [], []
    for k in range(num_slots):  # loop over time slots; each step vectorized over clients
        t = k * slot_s
        p = np.clip(
            mean_availability
            + amplitude * np.cos(2 * np.pi * (t - peak_time_s - phase) / period_s),
            0.0,
            1.0,
        )
        redraw = (rng.random(num_clients) >= stickiness) if k else np.ones(num_clients, bool)
        train = np.where(redraw, rng.random(num_clients) < p, train)
        if eval_availability > 0:
            redraw_e = (rng.random(num_clients) >= stickiness) if k else redraw
            evals = np.where(redraw_e, rng.random(num_clients) < eval_availability, evals)
        state = np.where(
            train, int(Tier.AVL_TRAIN), np.where(evals, int(Tier.AVL_EVAL), int(Tier.UN_AVL))
        ).astype(np.int8)
        changed = np.flatnonzero(state != prev)
        rows_c.append(changed)
        rows_k.append(np.full(changed.size, k, dtype=np.int64))
        rows_s.append(state[changed])
        prev = state
    client = np.concatenate(rows_c)
    slot = np.concatenate(rows_k)
    states = np.concatenate(rows_s)
    order = np.lexsort((slot, client))
    offsets = np.zeros(num_clients + 1, dtype=np.int64)
    np.cumsum(np.bincount(client, minlength=num_clients), out=offsets[1:])
    return AvailabilityTrace(
        num_clients=num_clients,
        times=slot[order] * float(slot_s),
        states=states[order],
        offsets=offsets,
        duration_s=num_slots * float(slot_s),
        beyond_end=beyond_end,
    )
