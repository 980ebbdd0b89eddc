"""Traces that are functions, not tables (docs/architecture.md "Traces at scale").

A table (:class:`~felix_jax.traces.availability.AvailabilityTrace`) holds every client's change
rows, which grows with clients x slots: the 50% slot regime with 30 s slots holds ~73 rows a
client. Two sources need no table at all, and here answer the same queries from what defines them:

* :class:`SlotTrace`: the slotted synthetic regimes (:func:`~felix_jax.traces.generators.slot_bernoulli`).
  Client ``c``'s slot ``k`` is available when draw number ``c * num_slots + k`` of
  ``np.random.default_rng(seed)`` is below ``p``, the draw the table's generator makes; the draw is
  computed where it is asked for (:mod:`felix_jax.traces.pcg64`), never stored. What is held: each
  client's stream position (two uint64, 16 bytes a client) and the slot times, which are the same for
  every client.
* :class:`CyclicTrace`: a recorded trace reused for a larger population (client ``i`` follows the
  recorded client ``i mod M``), answered by the recorded trace itself instead of a copy of its rows
  for every client.

Both answer every query exactly as the table they stand for (the rows ``slot_bernoulli`` builds, or
``restrict(arange(N) % M)``), including after ``shifted`` and ``time_scaled``, which act on the slot
times the same float64 operations the table applies to its rows: ``tests/test_on_demand_traces.py``
checks ``state_at`` / ``next_change_after`` / ``state_of`` / ``next_change_of`` equal on random
queries, and whole runs give the same ``metrics.csv``. ``materialized()`` builds the table (for a
file, or to check).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from . import pcg64
from .availability import AvailabilityTrace, BeyondEnd, ChangeCursor, Tier, TraceQueries

_TRAIN, _OFF = np.int8(int(Tier.AVL_TRAIN)), np.int8(int(Tier.UN_AVL))
_CACHED_CLIENTS = 8192  # clients whose slot states a SlotTrace keeps for the one-client queries
_COLUMN_BYTES = 1 << 27  # whole-slot columns kept (int8, one byte a client): at least two


class _SlotTimes:
    """The slot times after the trace's transforms, the same for every client.

    ``times[j]`` is when position ``j`` starts (position 0 at t = 0) and ``slots[j]`` the slot whose
    state holds from then on; ``period`` is the repeat period (``None`` under hold). Built as a
    one-client table's rows would be: ``slot * slot_s``, then ``shifted`` and ``time_scaled`` with the
    same operations, and the same clean-up (rows at or after the period dropped, the last of equal
    times kept). Unlike the table, positions whose slot repeats the state before it stay: they do
    not change a state, so every query answers the same.
    """

    def __init__(self, times: np.ndarray, slots: np.ndarray, duration: float, beyond_end: BeyondEnd):
        self.beyond_end = beyond_end
        self.duration = float(duration)
        times = np.asarray(times, dtype=np.float64)
        slots = np.asarray(slots, dtype=np.int64)
        if np.any(times[1:] < times[:-1]):
            bad = int(np.flatnonzero(times[1:] < times[:-1])[0]) + 1
            raise ValueError(f"unsorted times within client 0: row {bad} has time {times[bad]} after "
                             f"{times[bad - 1]}")
        if beyond_end == "repeat":
            if not self.duration > 0:
                raise ValueError('beyond_end="repeat" needs a positive duration_s (period)')
            keep = times < self.duration
            times, slots = times[keep], slots[keep]
            self.period: float | None = self.duration
        else:
            if times.size and times[-1] > self.duration:
                raise ValueError(f"client 0 has a row at {times[-1]} s, after the trace end {self.duration} s; "
                                 f"raise duration_s")
            self.period = None
        last_of_tie = np.ones(times.shape[0], dtype=bool)
        np.not_equal(times[1:], times[:-1], out=last_of_tie[:-1])
        self.times, self.slots = times[last_of_tie], slots[last_of_tie]

    def active(self, t: np.ndarray) -> np.ndarray:
        """The position in force at (period-local) time ``t``."""
        return np.searchsorted(self.times, t, side="right") - 1

    def shifted(self, s: float) -> "_SlotTimes":
        t, k = self.times, self.slots
        if self.beyond_end == "hold":
            init = k[self.active(np.float64(s))]
            after = t > s
            return _SlotTimes(np.concatenate([[0.0], t[after] - s]), np.concatenate([[init], k[after]]),
                              max(self.duration - s, 0.0), "hold")
        period = np.float64(self.period)
        phase = np.mod(np.float64(s), period)
        init = k[self.active(phase)]
        after, before = t > phase, t < phase
        return _SlotTimes(np.concatenate([[0.0], t[after] - phase, t[before] + (period - phase)]),
                          np.concatenate([[init], k[after], k[before]]), self.duration, "repeat")

    def scaled(self, f: float) -> "_SlotTimes":
        return _SlotTimes(self.times / f, self.slots, self.duration / f, self.beyond_end)


class SlotTrace(TraceQueries):
    """``slot_bernoulli(num_clients, p, num_slots, slot_s, seed, ...)``, computed where it is asked.

    The same arguments as :func:`~felix_jax.traces.generators.slot_bernoulli` (``seed`` an int or a
    ``SeedSequence``), and the same answers to every query, after any ``shifted`` / ``time_scaled``.
    Memory: 16 bytes a client (its position in the random stream) and the slot times.
    """

    form = "function"
    client_duration_s = None
    client_ids = None

    def __init__(self, num_clients: int, p: float, num_slots: int = 144, slot_s: float = 600.0, seed=0, *,
                 first_slot_available: bool = True, end_state: Tier | int = Tier.UN_AVL,
                 beyond_end: BeyondEnd = "hold", _transforms: tuple = (), _stream=None):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must lie in [0, 1], got {p}")
        if num_slots < 1 or slot_s <= 0:
            raise ValueError("num_slots must be >= 1 and slot_s > 0")
        if beyond_end not in ("hold", "repeat"):
            raise ValueError(f"beyond_end must be one of ('hold', 'repeat'), got {beyond_end!r}")
        self.num_clients = int(num_clients)
        self.p, self.num_slots, self.slot_s = float(p), int(num_slots), float(slot_s)
        self.seed, self.first_slot_available = seed, bool(first_slot_available)
        self.end_state = int(Tier.parse(end_state))
        self.beyond_end: BeyondEnd = beyond_end
        self._transforms = tuple(_transforms)
        n_slots = self.num_slots + (beyond_end == "hold")  # under hold the end state is a last slot
        times = _SlotTimes(np.arange(n_slots, dtype=np.int64) * self.slot_s, np.arange(n_slots),
                           self.num_slots * self.slot_s, beyond_end)
        for kind, value in self._transforms:
            times = times.shifted(value) if kind == "shift" else times.scaled(value)
        self._times = times
        self.duration_s = times.duration
        if _stream is None:
            state, inc = pcg64.seed_state(seed)
            base_hi, base_lo = pcg64.strided_states((state, inc), self.num_clients, self.num_slots)
            jumps = [pcg64.jump(k + 1, inc) for k in range(self.num_slots)]  # draw k: k + 1 steps on
            (a_hi, c_hi), (a_lo, c_lo) = (part.reshape(2, -1) for part in
                                          pcg64.split([a for a, _ in jumps] + [c for _, c in jumps]))
            _stream = (state, inc, base_hi, base_lo, a_hi, a_lo, c_hi, c_lo)
        self._stream = _stream
        self._threshold = pcg64.threshold(self.p)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._columns: OrderedDict[int, np.ndarray] = OrderedDict()  # slot -> every client's state

    # ------------------------------------------------------------ the draws
    def _draw(self, c: np.ndarray, k) -> np.ndarray:
        """int8 tier of client ``c`` in drawn slot ``k`` (``0 <= k < num_slots``; ``k`` an array or one int)."""
        _, _, base_hi, base_lo, a_hi, a_lo, c_hi, c_lo = self._stream
        hi, lo = pcg64.affine(a_hi[k], a_lo[k], c_hi[k], c_lo[k], base_hi[c], base_lo[c])  # one slot: scalars
        return np.where(pcg64.below(hi, lo, self._threshold), _TRAIN, _OFF)

    def _column(self, k: int) -> np.ndarray:
        """Every client's int8 tier in slot ``k``, drawn in cache-sized chunks; the latest few are
        kept (a slot boundary's queries, from the view's refresh and the change cursor, hit one)."""
        col = self._columns.get(k)
        if col is not None:
            self._columns.move_to_end(k)
            return col
        n = self.num_clients
        const = self._constant_slot(k)
        if const is not None:
            col = np.full(n, const, dtype=np.int8)
        else:
            _, _, base_hi, base_lo, a_hi, a_lo, c_hi, c_lo = self._stream
            up = pcg64.Column().below((a_hi[k], a_lo[k]), (c_hi[k], c_lo[k]), base_hi, base_lo, self._threshold,
                                      np.empty(n, dtype=bool))
            col = up.view(np.int8)  # 0 / 1, in place to UN_AVL / AVL_TRAIN
            if _OFF == 0:
                col *= _TRAIN
            else:
                col = np.where(up, _TRAIN, _OFF)
        self._columns[k] = col
        if len(self._columns) > max(2, _COLUMN_BYTES // max(n, 1)):
            self._columns.popitem(last=False)
        return col

    def _constant_slot(self, k: int) -> int | None:
        """The state every client has in slot ``k`` when no draw can differ (else ``None``)."""
        if k >= self.num_slots:
            return self.end_state
        if k == 0 and self.first_slot_available:
            return int(_TRAIN)
        if self.p >= 1.0 or self.p <= 0.0:  # every draw is below 1, none below 0
            return int(_TRAIN if self.p >= 1.0 else _OFF)
        return None

    def _slot_changes(self, k_before: int, k: int) -> np.ndarray:
        """Clients (ascending) whose state in slot ``k`` differs from their state in slot ``k_before``."""
        a, b = self._constant_slot(k_before), self._constant_slot(k)
        if a is not None and b is not None:
            return np.arange(self.num_clients, dtype=np.int64) if a != b else np.zeros(0, np.int64)
        return np.flatnonzero(self._column(k_before) != self._column(k))

    def change_cursor(self, t0: float = 0.0):
        """A cursor over this trace's changes from ``t0`` (:class:`~felix_jax.traces.availability.ChangeCursor`'s
        interface): slot by slot from whole-slot columns where the slot times allow it (:class:`SlotCursor`),
        else the generic one."""
        if SlotCursor.exact(self._times):
            return SlotCursor(self, t0)
        return ChangeCursor(self, t0)

    def _slot_states(self, c: np.ndarray, k: np.ndarray) -> np.ndarray:
        """int8 tier of client ``c`` in slot ``k`` (elementwise). Many clients in one slot (a slot
        boundary) read that slot's column; otherwise each draw is computed where it is asked."""
        c, k = np.broadcast_arrays(np.asarray(c, np.int64), np.asarray(k, np.int64))
        if c.size == 0:
            return np.empty(c.shape, dtype=np.int8)
        k_lo, k_hi = int(k.min()), int(k.max())
        if k_lo == k_hi:  # one slot
            if c.size * 4 >= self.num_clients or k_lo in self._columns:
                return self._column(k_lo)[c]
            if k_lo >= self.num_slots:
                return np.full(c.shape, self.end_state, dtype=np.int8)
            if k_lo == 0 and self.first_slot_available:
                return np.full(c.shape, _TRAIN, dtype=np.int8)
            return self._draw(c, k_lo)
        out = np.empty(c.shape, dtype=np.int8)
        drawn = k < self.num_slots
        if self.first_slot_available:
            drawn &= k > 0
            out[k == 0] = _TRAIN
        out[k >= self.num_slots] = self.end_state
        if drawn.all():
            return self._draw(c, k)
        out[drawn] = self._draw(c[drawn], k[drawn])
        return out

    def _position_states(self, c: np.ndarray, j: np.ndarray) -> np.ndarray:
        return self._slot_states(c, self._times.slots[j])

    def _first_change(self, c: np.ndarray, start: np.ndarray, cur: np.ndarray) -> np.ndarray:
        """Per element: the first position ``>= start`` whose state is not ``cur`` (the number of
        positions where none is). Looks ahead in blocks that widen as fewer clients are left."""
        n_pos = self._times.slots.shape[0]
        out = np.full(c.shape, n_pos, dtype=np.int64)
        idx = np.arange(c.shape[0])
        pos = start.astype(np.int64, copy=True)
        while idx.size:
            width = int(min(64, max(1, (1 << 18) // idx.size)))
            p = pos[:, None] + np.arange(width)[None, :]
            valid = p < n_pos
            st = self._position_states(c[idx][:, None], np.minimum(p, n_pos - 1))
            diff = (st != cur[idx][:, None]) & valid
            found = diff.any(axis=1)
            first = np.argmax(diff, axis=1)
            out[idx[found]] = p[found, first[found]]
            more = ~found & valid[:, -1]
            idx, pos = idx[more], pos[more] + width
        return out

    # -------------------------------------------------------------- queries
    def state_at(self, t, clients=None) -> np.ndarray:
        """As :meth:`AvailabilityTrace.state_at`."""
        if np.ndim(t) == 0:  # one time (a refresh): one slot for every client asked, no per-client times
            t = self._check_time(t)
            if self._times.period is not None:
                t = np.mod(t, np.float64(self._times.period))
            k = int(self._times.slots[self._times.active(t)])
            if clients is None:
                return self._column(k).copy()
            return self._slot_states(self._client_index(clients), np.int64(k))
        c, t = self._query(t, clients)
        if self._times.period is not None:
            t = np.mod(t, self._times.period)
        return self._position_states(c, self._times.active(t)).reshape(c.shape)

    def next_change_after(self, t, clients=None) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`AvailabilityTrace.next_change_after` (the same float64 expressions)."""
        c, t = self._query(t, clients)
        shape = c.shape
        c, t = c.ravel(), t.ravel()
        st, n_pos = self._times, self._times.slots.shape[0]
        if st.period is None:
            j = st.active(t)
            cur = self._position_states(c, j)
            nxt = self._first_change(c, j + 1, cur)
            has = nxt < n_pos
            jj = np.minimum(nxt, n_pos - 1)
            time = np.where(has, st.times[jj], np.inf)
            state = np.where(has, self._position_states(c, jj), cur)
            return time.reshape(shape), state.astype(np.int8).reshape(shape)
        period = np.float64(st.period)
        k, local = np.divmod(t, period)
        j = st.active(local)
        cur = self._position_states(c, j)
        nxt = self._first_change(c, j + 1, cur)
        within = nxt < n_pos
        time = np.empty(c.shape)
        state = np.empty(c.shape, dtype=np.int8)
        w = np.flatnonzero(within)
        time[w] = k[w] * period + st.times[nxt[w]]
        state[w] = self._position_states(c[w], nxt[w])
        o = np.flatnonzero(~within)
        if o.size:
            co = c[o]
            init = self._position_states(co, np.zeros(o.size, np.int64))
            last = cur[o]  # no change after j: the state at the period's end
            wraps = init != last
            second = self._first_change(co, np.ones(o.size, np.int64), init)
            has_second = second < n_pos
            ss = np.minimum(second, n_pos - 1)
            ko = k[o]
            time[o] = np.where(wraps, (ko + 1) * period,
                               np.where(has_second, (ko + 1) * period + st.times[ss], np.inf))
            state[o] = np.where(wraps, init, np.where(has_second, self._position_states(co, ss), last))
        time = np.where(time <= t, np.nextafter(t, np.inf), time)
        return time.reshape(shape), state.reshape(shape)

    def _client_states(self, client: int) -> np.ndarray:
        """One client's state at every position (kept for the ``_CACHED_CLIENTS`` latest clients)."""
        states = self._cache.get(client)
        if states is None:
            n_pos = self._times.slots.shape[0]
            states = self._position_states(np.full(n_pos, client, np.int64), np.arange(n_pos))
            self._cache[client] = states
            if len(self._cache) > _CACHED_CLIENTS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(client)
        return states

    def _draw_one(self, client: int, k: int) -> int:
        """``_draw([client], k)[0]`` in Python integers (one draw costs microseconds, not array calls)."""
        _, _, base_hi, base_lo, a_hi, a_lo, c_hi, c_lo = self._stream
        below = pcg64.below_one(pcg64.join(base_hi[client], base_lo[client]), pcg64.join(a_hi[k], a_lo[k]),
                                pcg64.join(c_hi[k], c_lo[k]), int(self._threshold))
        return int(_TRAIN) if below else int(_OFF)

    def _state_in(self, client: int, j: int) -> int:
        """One client's state at position ``j``: one draw (or a cached column / a constant slot)."""
        k = int(self._times.slots[j])
        const = self._constant_slot(k)
        if const is not None:
            return const
        col = self._columns.get(k)
        if col is not None:
            return int(col[client])
        return self._draw_one(client, k)

    def _next_change_ahead(self, t: np.float64, client: int) -> tuple[float, int] | None:
        """``next_change_of`` for a long row, position by position from the one in force, when the
        change falls before the row's end (else ``None``: the whole row decides)."""
        st = self._times
        n_pos = st.slots.shape[0]
        if st.period is None:
            j = int(np.searchsorted(st.times, t, side="right")) - 1
        else:
            period = np.float64(st.period)
            k, local = np.divmod(t, period)
            j = int(np.searchsorted(st.times, local, side="right")) - 1
        cur = self._state_in(client, j)
        for p in range(j + 1, n_pos):
            state = self._state_in(client, p)
            if state != cur:
                if st.period is None:
                    return float(st.times[p]), state
                time = k * period + st.times[p]
                if time <= t:
                    time = np.nextafter(t, np.inf)
                return float(time), state
        return None

    def state_of(self, t: float, client: int) -> int:
        """``state_at(t, [client])[0]`` as an int."""
        t, client = self._check_time(t), self._check_client(client)
        st = self._times
        if st.period is not None:
            t = np.mod(t, np.float64(st.period))
        return self._state_in(client, int(np.searchsorted(st.times, t, side="right")) - 1)

    def next_change_of(self, t: float, client: int) -> tuple[float, int]:
        """``next_change_after(t, [client])`` for one client, as Python scalars."""
        t, client = self._check_time(t), self._check_client(client)
        found = self._next_change_ahead(t, client)  # slot by slot; the whole row only past its end
        if found is not None:
            return found
        st, states = self._times, self._client_states(client)
        if st.period is None:
            j = int(np.searchsorted(st.times, t, side="right")) - 1
            d = np.flatnonzero(states[j + 1:] != states[j])
            if d.size:
                return float(st.times[j + 1 + d[0]]), int(states[j + 1 + d[0]])
            return float("inf"), int(states[j])
        period = np.float64(st.period)
        k, local = np.divmod(t, period)
        j = int(np.searchsorted(st.times, local, side="right")) - 1
        d = np.flatnonzero(states[j + 1:] != states[j])
        if d.size:
            time, state = k * period + st.times[j + 1 + d[0]], states[j + 1 + d[0]]
        elif states[0] != states[j]:
            time, state = (k + 1) * period, states[0]
        else:
            d = np.flatnonzero(states[1:] != states[0])
            if d.size:
                time, state = (k + 1) * period + st.times[1 + d[0]], states[1 + d[0]]
            else:
                time, state = np.inf, states[j]
        if time <= t:
            time = np.nextafter(t, np.inf)
        return float(time), int(state)

    # ------------------------------------------------------------ transforms
    def _with(self, transform) -> "SlotTrace":
        return SlotTrace(self.num_clients, self.p, self.num_slots, self.slot_s, self.seed,
                         first_slot_available=self.first_slot_available, end_state=self.end_state,
                         beyond_end=self.beyond_end, _transforms=(*self._transforms, transform), _stream=self._stream)

    def shifted(self, start_s: float) -> "SlotTrace":
        """As :meth:`AvailabilityTrace.shifted`."""
        s = float(start_s)
        if not (math.isfinite(s) and s >= 0):
            raise ValueError(f"start_s must be a finite number of seconds >= 0, got {start_s!r}")
        if s == 0 or self.num_clients == 0:
            return self
        return self._with(("shift", s))

    def time_scaled(self, speedup: float) -> "SlotTrace":
        """As :meth:`AvailabilityTrace.time_scaled`."""
        f = float(speedup)
        if not (math.isfinite(f) and f > 0):
            raise ValueError(f"speedup must be a finite number > 0, got {speedup!r}")
        return self if f == 1.0 else self._with(("scale", f))

    def restrict(self, clients) -> AvailabilityTrace:
        """The table of the given clients (renumbered in the given order), as the table's ``restrict``."""
        return self.materialized(clients)

    def materialized(self, clients=None) -> AvailabilityTrace:
        """The table this trace stands for (of ``clients``, in that order; default all of them):
        ``slot_bernoulli``'s rows for those clients, then the same ``shifted`` / ``time_scaled``."""
        c = self._client_index(clients).ravel()
        n_slots = self.num_slots
        k = np.arange(n_slots)
        states = np.empty((c.size, n_slots + 1), dtype=np.int8)
        for start in range(0, c.size, 1 << 12):  # bounded (clients, slots) blocks
            cc = c[start:start + (1 << 12)]
            states[start:start + cc.size, :n_slots] = self._slot_states(cc[:, None], k[None, :])
        states[:, n_slots] = self.end_state
        change = np.ones(states.shape, dtype=bool)
        change[:, 1:] = states[:, 1:] != states[:, :-1]
        client, slot = np.nonzero(change)
        offsets = np.zeros(c.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(client, minlength=c.size), out=offsets[1:])
        table = AvailabilityTrace(num_clients=c.size, times=slot * self.slot_s, states=states[client, slot],
                                  offsets=offsets, duration_s=n_slots * self.slot_s, beyond_end=self.beyond_end)
        for kind, value in self._transforms:
            table = table.shifted(value) if kind == "shift" else table.time_scaled(value)
        return table

    @property
    def external_ids(self) -> np.ndarray:
        return np.arange(self.num_clients, dtype=np.int64)

    def digest_parts(self) -> tuple:
        """What a snapshot's digest of this trace covers: what defines it."""
        state, inc = self._stream[:2]
        return ("slot process", self.num_clients, self.p, self.num_slots, self.slot_s, str(state), str(inc),
                self.first_slot_available, self.end_state, self.beyond_end, self._transforms)

    @property
    def nbytes(self) -> int:
        """Bytes held: the stream positions, the draw tables, the slot times and the cached columns."""
        return (sum(a.nbytes for a in self._stream[2:]) + self._times.times.nbytes + self._times.slots.nbytes
                + sum(col.nbytes for col in self._columns.values()))

    def __repr__(self) -> str:
        return (f"SlotTrace(num_clients={self.num_clients}, p={self.p}, num_slots={self.num_slots}, "
                f"slot_s={self.slot_s}, beyond_end={self.beyond_end!r}, transforms={list(self._transforms)})")


class SlotCursor:
    """:class:`~felix_jax.traces.availability.ChangeCursor` for a :class:`SlotTrace`, slot by slot.

    Every change of a slot trace happens at a slot time, the same for every client: the clients that
    change at position ``g`` (position ``j = g mod P`` of period ``g // P`` under repeat, ``P`` the
    positions a period holds) are those whose state there differs from the position before, one
    comparison of two whole-slot columns. So a slot boundary that flips millions of clients costs one
    column's draws and one pass, with no per-client next-change array (the generic cursor's O(N)
    array and its per-client chains of ``next_change_after``).

    The same changes, in the same order (time, then client), and the same ``consumed`` count as the
    generic cursor: a client's chain of ``next_change_after`` steps visits exactly the positions where
    its state differs from the one before, provided each change time ``k * period + times[j]`` maps
    back to position ``(k, j)``. That holds under hold (the times are used as they are), and under
    repeat when every slot time and the period are multiples of 2**-20 s below 2**32 s, where the sums
    and ``divmod`` are exact (:meth:`exact`); elsewhere (e.g. a speed-up of 3) the trace uses the
    generic cursor.
    """

    _GRID = 2.0 ** 20
    _LIMIT = 2.0 ** 32

    @classmethod
    def exact(cls, times: _SlotTimes) -> bool:
        if times.period is None:
            return True
        grid = np.concatenate([times.times, [times.period]]) * cls._GRID
        return bool(np.all(grid == np.floor(grid)) and times.period < cls._LIMIT)

    def __init__(self, trace: SlotTrace, t0: float = 0.0):
        self.trace = trace
        self.time = float(t0)
        self.consumed = 0
        self._st = trace._times
        self._n_pos = int(self._st.slots.shape[0])
        self._g = self._position(self.time)  # the position in force at the cursor
        self._found: tuple[int, np.ndarray] | None = None  # the next position with changes, once peeked
        self._never = False  # no change after the cursor, ever

    def _position(self, t: float) -> int:
        st = self._st
        if st.period is None:
            return int(st.active(np.float64(t)))
        if t >= self._LIMIT:
            raise ValueError(f"a slot cursor runs to {self._LIMIT:.0f} s, asked for {t} s")
        k, local = np.divmod(np.float64(t), np.float64(st.period))
        return int(k) * self._n_pos + int(st.active(local))

    def _time(self, g: int) -> float:
        st = self._st
        if st.period is None:
            return float(st.times[g])
        k, j = divmod(g, self._n_pos)
        return float(k * np.float64(st.period) + st.times[j])

    def _changes(self, g: int) -> np.ndarray:
        slots, n = self._st.slots, self._n_pos
        return self.trace._slot_changes(int(slots[(g - 1) % n]), int(slots[g % n]))

    def _next(self) -> tuple[int, np.ndarray] | None:
        """The first position after the cursor's with a change (``None``: no change ever again)."""
        if self._found is not None or self._never:
            return self._found
        g = self._g + 1
        last = self._n_pos - 1 if self._st.period is None else self._g + self._n_pos  # a period without one: never
        while g <= last:
            ch = self._changes(g)
            if ch.size:
                self._found = (g, ch)
                return self._found
            g += 1
        self._never = True  # past the end (hold), or a whole period without a change (repeat)
        return None

    def advance(self, t: float) -> np.ndarray:
        """Clients of the changes in ``(time, t]`` (int64, in time order); the cursor moves to ``t``."""
        t = float(t)
        if not t > self.time:
            return np.zeros(0, np.int64)
        target = self._position(t)
        parts = []
        while True:
            nxt = self._next()
            if nxt is None or nxt[0] > target:
                break
            g, ch = nxt
            parts.append(ch)
            self.consumed += int(ch.size)
            self._g, self._found = g, None
        self._g = max(self._g, target)
        self.time = t
        if not parts:
            return np.zeros(0, np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def peek_time(self) -> float:
        """Time of the next change after the cursor (``inf`` if none ever comes)."""
        nxt = self._next()
        return math.inf if nxt is None else self._time(nxt[0])


class CyclicTrace(TraceQueries):
    """A recorded trace reused for ``num_clients`` clients: client ``i`` follows its client ``i mod M``.

    The same answers as ``base.restrict(np.arange(num_clients) % M)``, without copying a row.
    """

    form = "cyclic"
    client_ids = None  # the ids would repeat

    def __init__(self, base, num_clients: int):
        if base.num_clients < 1:
            raise ValueError("a cyclic trace needs a base trace with at least one client")
        self.base, self.num_clients = base, int(num_clients)
        self.duration_s, self.beyond_end = base.duration_s, base.beyond_end

    @property
    def client_duration_s(self):
        per = self.base.client_duration_s
        return None if per is None else per[np.arange(self.num_clients) % self.base.num_clients]

    def _tile(self, values: np.ndarray) -> np.ndarray:
        reps = -(-self.num_clients // self.base.num_clients)
        return np.tile(values, reps)[: self.num_clients]

    def state_at(self, t, clients=None) -> np.ndarray:
        if clients is None and np.ndim(t) == 0:
            self._query(t, np.zeros(0, np.int64))  # the time's checks
            return self._tile(self.base.state_at(t))
        c, t = self._query(t, clients)
        return self.base.state_at(t, c % self.base.num_clients)

    def next_change_after(self, t, clients=None) -> tuple[np.ndarray, np.ndarray]:
        if clients is None and np.ndim(t) == 0:
            self._query(t, np.zeros(0, np.int64))
            time, state = self.base.next_change_after(t)
            return self._tile(time), self._tile(state)
        c, t = self._query(t, clients)
        return self.base.next_change_after(t, c % self.base.num_clients)

    def state_of(self, t: float, client: int) -> int:
        return self.base.state_of(t, self._check_client(client) % self.base.num_clients)

    def next_change_of(self, t: float, client: int) -> tuple[float, int]:
        return self.base.next_change_of(t, self._check_client(client) % self.base.num_clients)

    def shifted(self, start_s: float) -> "CyclicTrace":
        base = self.base.shifted(start_s)
        return self if base is self.base else CyclicTrace(base, self.num_clients)

    def time_scaled(self, speedup: float) -> "CyclicTrace":
        base = self.base.time_scaled(speedup)
        return self if base is self.base else CyclicTrace(base, self.num_clients)

    def restrict(self, clients) -> AvailabilityTrace:
        return self.base.restrict(self._client_index(clients) % self.base.num_clients)

    def materialized(self, clients=None) -> AvailabilityTrace:
        return self.restrict(np.arange(self.num_clients) if clients is None else clients)

    @property
    def external_ids(self) -> np.ndarray:
        return np.arange(self.num_clients, dtype=np.int64)

    def digest_parts(self) -> tuple:
        return ("cyclic", self.num_clients, *self.base.digest_parts())

    def __repr__(self) -> str:
        return f"CyclicTrace(num_clients={self.num_clients}, base={self.base!r})"
