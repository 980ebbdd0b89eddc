"""The selector interface: pure ``select(state, ctx, k) -> (clients, state)``.

A selector holds no mutable state (its state is a value threaded by the server,
gymnax style), reads the server's :class:`~felix_jax.fleet.clientmap.ClientMap`
through a :class:`SelectionContext`, and returns client ids. A new selector is
one file plus one registry line.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import numpy as np

from ...fleet.clientmap import ClientMap
from ...traces import AvailabilityTrace


@dataclasses.dataclass(frozen=True)
class SelectionContext:
    view: ClientMap  # the server's view (read-only for selectors)
    eligible: np.ndarray  # (N,) bool: clients that may be picked now
    round: int  # aggregation round = current model version
    now: float  # virtual time, seconds
    rng: np.random.Generator
    trace: AvailabilityTrace | None = None  # the true trace: only oracle policies may read it
    num_eligible: int | None = None  # eligible.sum(), when the caller keeps it (None: count it)


class Selector(NamedTuple):
    name: str
    init: Callable[[], Any]
    select: Callable[[Any, SelectionContext, int], tuple[np.ndarray, Any]]
