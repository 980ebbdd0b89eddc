"""The selector interface: pure ``select(state, ctx, k) -> (clients, state)``.

A selector holds no mutable state (its state is a value threaded by the server,
gymnax style), reads the server's :class:`~felix_jax.fleet.clientmap.ClientMap`
through a :class:`SelectionContext` (as its read-only
:class:`~felix_jax.fleet.clientmap.ReadOnlyView`: nothing a selector does through it
changes the server's state), and returns client ids. A new selector is
one file plus one registry line.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import numpy as np

from ...fleet.clientmap import ClientMap, ReadOnlyView
from ...traces import AvailabilityTrace


@dataclasses.dataclass(frozen=True)
class SelectionContext:
    # the server's view, read-only: a ClientMap given here is held as its ReadOnlyView (reads only,
    # arrays that cannot be made writeable, no attribute set)
    view: ReadOnlyView
    eligible: np.ndarray  # (N,) bool: clients that may be picked now
    round: int  # aggregation round = current model version
    now: float  # virtual time, seconds
    rng: np.random.Generator
    trace: AvailabilityTrace | None = None  # the true trace: only oracle policies may read it
    num_eligible: int | None = None  # eligible.sum(), when the caller keeps it (None: count it)

    def __post_init__(self):
        if isinstance(self.view, ClientMap):
            object.__setattr__(self, "view", self.view.read_only())


class Selector(NamedTuple):
    name: str
    init: Callable[[], Any]
    select: Callable[[Any, SelectionContext, int], tuple[np.ndarray, Any]]
