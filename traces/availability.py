"""Per-client availability traces over three tiers (docs/architecture.md).

Host-only (numpy). A trace is, per client, a sorted list of state changes over the
three FeLiX tiers (paper Sec. 3.2, TierTrack; the paper's reference settings "TierTrack"):

* ``AVL_TRAIN``: may train and evaluate (e.g. charging and on Wi-Fi),
* ``AVL_EVAL``: may only evaluate (e.g. not charging, battery above a threshold),
* ``UN_AVL``: cannot participate.

Strategies that do not use the eval tier (every baseline of the paper's Table 1)
treat ``AVL_EVAL`` as not trainable, i.e. a client may train iff its state is
``AVL_TRAIN``; no separate two-state view is built.

Semantics (the same as the shared reference traces, docs/file-formats.md):

* a row ``(time, state)`` means the client is in ``state`` from ``time`` (inclusive)
  until its next row: exactly at a change time the new state applies;
* rows of one client that share a time apply in file order, the last one wins;
* every client has a row at ``t = 0`` (its initial state);
* after the end of the trace (``duration_s``) the policy ``beyond_end`` applies:
  ``"hold"`` keeps each client's last state forever, ``"repeat"`` repeats the trace
  with period ``duration_s`` (or a per-client period, ``client_duration_s``, as in
  FedScale's ``finish_time``): the state at ``t`` is the state at ``t mod period``,
  so rows at or after the period end are never reached.

Storage is CSR-like: client ``c``'s rows are ``times[offsets[c]:offsets[c+1]]``.
All queries are vectorized over clients: a batched binary search inside each
client's own row range (``log2(rows per client)`` vector steps, exact on float
times), so they scale to millions of clients and give the same answer whatever the
order in which clients are asked for.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

BeyondEnd = Literal["hold", "repeat"]
BEYOND_END_POLICIES: tuple[str, ...] = ("hold", "repeat")


class Tier(enum.IntEnum):
    """Client availability tier; codes match the shared ``*_state`` arrays."""

    UN_AVL = 0
    AVL_EVAL = 1
    AVL_TRAIN = 2

    @classmethod
    def parse(cls, value: int | str) -> "Tier":
        """Tier from its code (``2``, ``"2"``) or name (``"AVL_TRAIN"``, any case)."""
        if isinstance(value, str):
            text = value.strip()
            if text.lstrip("+-").isdigit():
                value = int(text)
            else:
                try:
                    return cls[text.upper()]
                except KeyError:
                    raise ValueError(
                        f"unknown tier name {value!r}; expected one of "
                        f"{[t.name for t in cls]} or a code {[int(t) for t in cls]}"
                    ) from None
        try:
            if int(value) != value:
                raise ValueError
            return cls(int(value))
        except (TypeError, ValueError):
            raise ValueError(
                f"unknown tier code {value!r}; expected one of {[int(t) for t in cls]}"
            ) from None


_VALID_STATES = np.array([int(t) for t in Tier], dtype=np.int8)
# Rows per chunk of (times x clients) work in fraction_in_state: bounds memory.
_CHUNK_ELEMENTS = 1 << 22


def _client_starts(offsets: np.ndarray, num_rows: int) -> np.ndarray:
    """(E,) bool: the rows that start a client (``offsets[:-1]``; every client owns >= 1 row)."""
    starts = np.zeros(num_rows, dtype=bool)
    starts[offsets[:-1]] = True
    return starts


def _as_1d(name: str, value, dtype) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr.astype(dtype, copy=False)


class TraceQueries:
    """What every trace form answers the same way (the table, :class:`AvailabilityTrace`, and the
    on-demand forms of :mod:`felix_jax.traces.on_demand`): argument checks and the queries built on
    ``state_at`` / ``next_change_after``. A form provides ``num_clients``, ``state_at``,
    ``next_change_after``, ``state_of`` and ``next_change_of``."""

    num_clients: int

    def _client_index(self, clients) -> np.ndarray:
        if clients is None:
            return np.arange(self.num_clients, dtype=np.int64)
        c = np.asarray(clients)
        if not np.issubdtype(c.dtype, np.integer):
            raise ValueError(f"clients must be integer indices, got dtype {c.dtype}")
        c = c.astype(np.int64, copy=False)
        if c.size and (c.min() < 0 or c.max() >= self.num_clients):
            raise ValueError(f"client indices must lie in [0, {self.num_clients})")
        return c

    def _query(self, t, clients) -> tuple[np.ndarray, np.ndarray]:
        c = self._client_index(clients)
        t = np.asarray(t, dtype=np.float64)
        if np.any(np.isnan(t)) or np.any(t < 0):
            raise ValueError("query times must be >= 0 and not NaN")
        c, t = np.broadcast_arrays(c, t)
        return c, t

    def _check_client(self, client) -> int:
        client = int(client)
        if not 0 <= client < self.num_clients:
            raise ValueError(f"client index must lie in [0, {self.num_clients}), got {client}")
        return client

    @staticmethod
    def _check_time(t) -> np.float64:
        t = np.float64(t)
        if not t >= 0:  # NaN too
            raise ValueError("query times must be >= 0 and not NaN")
        return t

    def change_cursor(self, t0: float = 0.0) -> "ChangeCursor":
        """A cursor over this trace's changes in time order from ``t0`` (forms may give a faster one
        with the same answers)."""
        return ChangeCursor(self, t0)

    def changes_between(self, t0: float, t1: float, clients=None):
        """All real changes with ``t0 < time <= t1``, sorted by (time, client).

        Returns ``(client, time_s, state)`` arrays. Loops over change *rounds*
        (at most the largest number of changes one client has in the window), each
        round vectorized over clients. Useful to count TierTrack notifications.
        """
        c = self._client_index(clients).ravel()
        t = np.full(c.shape, float(t0))
        out_c, out_t, out_s = [], [], []
        while c.size:
            nt, ns = self.next_change_after(t, c)
            m = nt <= t1
            out_c.append(c[m])
            out_t.append(nt[m])
            out_s.append(ns[m])
            c, t = c[m], nt[m]
        cc = np.concatenate(out_c) if out_c else np.zeros(0, np.int64)
        tt = np.concatenate(out_t) if out_t else np.zeros(0)
        ss = np.concatenate(out_s) if out_s else np.zeros(0, np.int8)
        order = np.lexsort((cc, tt))
        return cc[order], tt[order], ss[order].astype(np.int8)

    def fraction_in_state(self, tier: Tier | int, times, clients=None) -> np.ndarray:
        """Fraction of clients in ``tier`` at each sample time: float64 (T,)."""
        times = np.atleast_1d(np.asarray(times, dtype=np.float64))
        c = self._client_index(clients)
        if c.size == 0:
            return np.full(times.shape, np.nan)
        out = np.empty(times.shape[0])
        step = max(1, _CHUNK_ELEMENTS // c.size)
        for i in range(0, times.shape[0], step):  # loop over time chunks, not clients
            block = self.state_at(times[i : i + step, None], c[None, :])
            out[i : i + step] = np.mean(block == int(tier), axis=1)
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class AvailabilityTrace(TraceQueries):
    """Per-client sorted tier changes (CSR layout); immutable and validated.

    Attributes:
      num_clients: number of clients ``N``; clients are indices ``0..N-1``.
      times: float64 (E,) change times in seconds from the trace start, sorted
        within each client (non-decreasing; equal times apply in row order).
      states: int8 (E,) the tier entered at each row (``Tier`` codes).
      offsets: int64 (N+1,) client ``c`` owns rows ``offsets[c]:offsets[c+1]``;
        every client has at least one row and its first row is at ``t = 0``.
      duration_s: end of the trace in seconds (>= every row time); the period
        under ``beyond_end="repeat"``.
      beyond_end: ``"hold"`` (keep the last state) or ``"repeat"`` (periodic).
      client_duration_s: optional float64 (N,) per-client end / period (FedScale's
        per-client ``finish_time``); ``None`` means ``duration_s`` for everyone.
      client_ids: optional int64 (N,) external ids of the clients (e.g. 1..300 in
        the shared reference file); ``None`` means the ids are the indices.

    Direct construction expects CSR arrays; ``from_rows`` and ``from_client_lists``
    build them from flat rows or per-client lists.
    """

    num_clients: int
    times: np.ndarray
    states: np.ndarray
    offsets: np.ndarray
    duration_s: float
    beyond_end: BeyondEnd = "hold"
    client_duration_s: np.ndarray | None = None
    client_ids: np.ndarray | None = None

    # ------------------------------------------------------------------ build
    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        n = int(self.num_clients)
        if n < 0:
            raise ValueError(f"num_clients must be >= 0, got {self.num_clients}")
        set_("num_clients", n)
        times = _as_1d("times", self.times, np.float64)
        states_raw = np.asarray(self.states)
        offsets = _as_1d("offsets", self.offsets, np.int64)
        if states_raw.ndim != 1 or states_raw.shape[0] != times.shape[0]:
            raise ValueError(
                f"ragged input: times has shape {times.shape} but states has shape "
                f"{states_raw.shape}; they must be parallel 1-D arrays"
            )
        if offsets.shape != (n + 1,):
            raise ValueError(
                f"offsets must have shape ({n + 1},) for {n} clients, got {offsets.shape}"
            )
        if offsets[0] != 0 or offsets[-1] != times.shape[0]:
            raise ValueError(
                f"offsets must start at 0 and end at the number of rows "
                f"({times.shape[0]}), got {offsets[0]} and {offsets[-1]}"
            )
        counts = np.diff(offsets)
        if np.any(counts < 1):
            bad = np.flatnonzero(counts < 1)
            raise ValueError(
                f"every client needs at least one row (its state at t=0); clients "
                f"{bad[:10].tolist()} have none (offsets must be increasing)"
            )
        if not np.all(np.isfinite(times)):
            raise ValueError("times must be finite (no NaN or inf)")
        if times.size and times.min() < 0:
            bad = int(np.argmin(times))
            raise ValueError(f"negative time {times[bad]} at row {bad}; times must be >= 0")
        if np.issubdtype(states_raw.dtype, np.integer):  # codes are 0..2: a range check
            unknown = (states_raw < _VALID_STATES[0]) | (states_raw > _VALID_STATES[-1])
        else:
            unknown = ~np.isin(states_raw, _VALID_STATES)
        if np.any(unknown):
            bad = int(np.flatnonzero(unknown)[0])
            raise ValueError(
                f"unknown state code {states_raw[bad]!r} at row {bad}; valid codes are "
                f"{ {t.name: int(t) for t in Tier} }"
            )
        states = states_raw.astype(np.int8)
        # Client boundaries as a (E,) bool (a row that starts a client), not an int64 row-to-client
        # array: 1 byte a row instead of 8 (72 M rows at 10^6 clients under avail50).
        starts = _client_starts(offsets, times.shape[0])
        backwards = times[1:] < times[:-1]
        backwards &= ~starts[1:]
        if np.any(backwards):
            bad = int(np.flatnonzero(backwards)[0]) + 1
            raise ValueError(
                f"unsorted times within client {int(np.searchsorted(offsets, bad, side='right')) - 1}: "
                f"row {bad} has time {times[bad]} after {times[bad - 1]}"
            )
        del backwards
        first_times = times[offsets[:-1]]
        if np.any(first_times != 0):
            bad = int(np.flatnonzero(first_times != 0)[0])
            raise ValueError(
                f"client {bad} has no row at t=0 (first row at {first_times[bad]}); every "
                f"client needs an initial state (from_rows can insert one)"
            )
        if self.beyond_end not in BEYOND_END_POLICIES:
            raise ValueError(
                f"beyond_end must be one of {BEYOND_END_POLICIES}, got {self.beyond_end!r}"
            )
        duration = float(self.duration_s)
        if not np.isfinite(duration) or duration < 0:
            raise ValueError(f"duration_s must be finite and >= 0, got {self.duration_s}")
        if self.client_duration_s is None:
            period = np.full(n, duration)
        else:
            period = _as_1d("client_duration_s", self.client_duration_s, np.float64)
            if period.shape != (n,):
                raise ValueError(
                    f"client_duration_s must have shape ({n},), got {period.shape}"
                )
            if not np.all(np.isfinite(period)) or np.any(period < 0):
                raise ValueError("client_duration_s must be finite and >= 0")
            if np.any(period > duration):
                raise ValueError("client_duration_s must not exceed duration_s")
            set_("client_duration_s", period)
        if self.beyond_end == "hold":
            last_times = times[offsets[1:] - 1] if n else np.zeros(0)
            if np.any(last_times > period):
                bad = int(np.flatnonzero(last_times > period)[0])
                raise ValueError(
                    f"client {bad} has a row at {last_times[bad]} s, after the trace end "
                    f"{period[bad]} s; raise duration_s"
                )
        elif np.any(period <= 0):
            raise ValueError('beyond_end="repeat" needs a positive duration_s (period)')
        if self.client_ids is not None:
            ids = _as_1d("client_ids", self.client_ids, np.int64)
            if ids.shape != (n,) or np.unique(ids).size != n:
                raise ValueError(f"client_ids must be {n} distinct integers")
            set_("client_ids", ids)
        set_("times", times)
        set_("states", states)
        set_("offsets", offsets)
        set_("duration_s", duration)
        set_("_period", period)
        self._build_changes(starts)

    def _build_changes(self, starts: np.ndarray) -> None:
        """Compact the rows into real changes (used by every query).

        Drops unreachable rows (under "repeat": at or after the period), keeps only
        the last row of each same-time group (the last one wins), then drops rows
        that repeat the previous state. The first row of each client (t=0) stays.
        ``starts``: (E,) bool, the rows that start a client (``_client_starts``).
        """
        t, s, offsets = self.times, self.states, self.offsets

        def kept(keep):  # the rows and client offsets after dropping the rows not in ``keep``
            new = np.zeros(self.num_clients + 1, dtype=np.int64)
            if self.num_clients:
                np.cumsum(np.add.reduceat(keep, offsets[:-1], dtype=np.int64), out=new[1:])
            return t[keep], s[keep], new, _client_starts(new, int(new[-1]))

        # Each step copies only when it drops something (generators emit compact rows).
        if self.beyond_end == "repeat":
            if self.client_duration_s is None:  # one period for every client
                keep = t < float(self._period[0]) if self.num_clients else np.ones(0, bool)
            else:
                keep = t < np.repeat(self._period, np.diff(offsets))
            if not keep.all():
                t, s, offsets, starts = kept(keep)
        last_of_tie = np.ones(t.shape[0], dtype=bool)
        np.not_equal(t[1:], t[:-1], out=last_of_tie[:-1])
        last_of_tie[:-1] |= starts[1:]
        if not last_of_tie.all():
            t, s, offsets, starts = kept(last_of_tie)
        del last_of_tie
        change = np.ones(t.shape[0], dtype=bool)
        np.not_equal(s[1:], s[:-1], out=change[1:])
        change[1:] |= starts[1:]
        if not change.all():
            t, s, offsets, starts = kept(change)
        object.__setattr__(self, "_ct", t)
        object.__setattr__(self, "_cs", s)
        object.__setattr__(self, "_co", offsets)

    def _search_right(self, c: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index of each client's first real change with time > t (or its end).

        A batched binary search over the compact rows ``_co[c]:_co[c+1]``;
        elementwise over the (broadcast) arrays ``c`` and ``t``.
        """
        ct = self._ct
        last = max(ct.shape[0] - 1, 0)
        lo = self._co[c]
        n = self._co[c + 1] - lo
        while n.any():
            half = n >> 1
            mid = lo + half
            go = (ct[np.minimum(mid, last)] <= t) & (n > 0)
            lo = np.where(go, mid + 1, lo)
            n = np.where(go, n - half - 1, half)
        return lo

    @classmethod
    def from_rows(
        cls,
        client,
        time_s,
        state,
        *,
        num_clients: int | None = None,
        duration_s: float | None = None,
        beyond_end: BeyondEnd = "hold",
        initial_state: Tier | int | None = Tier.UN_AVL,
        client_duration_s=None,
        client_ids=None,
    ) -> "AvailabilityTrace":
        """Build from flat parallel rows ``(client index, time, state)`` in any order.

        Rows are sorted stably by (client, time), so rows sharing a client and a
        time keep their given order (the last one wins). Initial-state rule: a
        client without a row at ``t = 0`` gets one with ``initial_state`` (default
        ``UN_AVL``: a client is unavailable until it first reports); pass
        ``initial_state=None`` to raise instead. Clients ``0..num_clients-1`` with no
        row at all get just that initial row. ``duration_s`` defaults to the last
        row time.
        """
        client_raw, state = np.asarray(client), np.asarray(state)
        if client_raw.size and client_raw.dtype.kind not in "iu":  # 1.5 or True would be cast to a client
            raise ValueError(f"client indices must be integers, got {client_raw.dtype} values")
        if state.dtype.kind == "b":  # True would be read as code 1
            raise ValueError("states must be Tier codes or names, got booleans")
        client = _as_1d("client", client_raw, np.int64)
        time_s = _as_1d("time_s", time_s, np.float64)
        if not (client.shape == time_s.shape == state.shape):
            raise ValueError(
                f"ragged input: client {client.shape}, time_s {time_s.shape} and state "
                f"{state.shape} must have the same length"
            )
        if num_clients is None:
            num_clients = int(client.max()) + 1 if client.size else 0
        if num_clients < 1:  # nothing to schedule: a run on it would never aggregate
            raise ValueError("the trace holds no clients (a trace needs at least one)")
        if client.size and (client.min() < 0 or client.max() >= num_clients):
            raise ValueError(f"client indices must lie in [0, {num_clients})")
        has_zero = np.zeros(num_clients, dtype=bool)
        has_zero[client[time_s == 0]] = True
        missing = np.flatnonzero(~has_zero)
        if missing.size:
            if initial_state is None:
                raise ValueError(
                    f"clients {missing[:10].tolist()} have no row at t=0 and "
                    f"initial_state=None"
                )
            init = int(Tier.parse(initial_state))
            # Inserted rows go first so that a given row at t=0 would still win.
            client = np.concatenate([missing, client])
            time_s = np.concatenate([np.zeros(missing.size), time_s])
            state = np.concatenate([np.full(missing.size, init, dtype=np.int64), state])
        order = np.lexsort((time_s, client))
        offsets = np.zeros(num_clients + 1, dtype=np.int64)
        np.cumsum(np.bincount(client, minlength=num_clients), out=offsets[1:])
        if duration_s is None:
            duration_s = float(time_s.max()) if time_s.size else 0.0
            if client_duration_s is not None:
                duration_s = max(duration_s, float(np.max(client_duration_s, initial=0.0)))
        return cls(
            num_clients=num_clients,
            times=time_s[order],
            states=state[order],
            offsets=offsets,
            duration_s=duration_s,
            beyond_end=beyond_end,
            client_duration_s=client_duration_s,
            client_ids=client_ids,
        )

    @classmethod
    def from_client_lists(
        cls,
        times: Sequence[Sequence[float]],
        states: Sequence[Sequence[int | str]],
        **kwargs,
    ) -> "AvailabilityTrace":
        """Build from per-client lists: ``times[c]`` and ``states[c]`` in time order.

        Each client's times must be non-decreasing (a ValueError names the client);
        states may be codes or names. The initial-state rule of ``from_rows``
        applies (a missing t=0 row gets ``initial_state``, default ``UN_AVL``).
        """
        if len(times) != len(states):
            raise ValueError(
                f"ragged input: {len(times)} time lists but {len(states)} state lists"
            )
        lengths = np.array([len(t) for t in times], dtype=np.int64)
        for c, (t, s) in enumerate(zip(times, states)):
            if len(t) != len(s):
                raise ValueError(
                    f"ragged input: client {c} has {len(t)} times but {len(s)} states"
                )
        flat_t = np.concatenate([np.asarray(t, np.float64) for t in times] or [np.zeros(0)])
        flat_s = np.array(
            [int(Tier.parse(x)) if isinstance(x, str) else x for s in states for x in s],
            dtype=np.int64,
        )
        client = np.repeat(np.arange(len(times), dtype=np.int64), lengths)
        backwards = (client[1:] == client[:-1]) & (flat_t[1:] < flat_t[:-1])
        if np.any(backwards):
            c = int(client[np.flatnonzero(backwards)[0] + 1])
            raise ValueError(f"unsorted times within client {c}: {list(times[c])}")
        kwargs.setdefault("num_clients", len(times))
        return cls.from_rows(client, flat_t, flat_s, **kwargs)

    # ---------------------------------------------------------------- queries
    def state_at(self, t, clients=None) -> np.ndarray:
        """Tier of each client at time ``t`` (int8, ``Tier`` codes).

        ``t`` is a scalar or an array broadcast against ``clients`` (default: all
        clients, shape (N,)); e.g. ``state_at(ts[:, None])`` gives a (T, N) matrix.
        At exactly a change time the new state applies; same-time rows: last wins.
        """
        c, t = self._query(t, clients)
        if self.beyond_end == "repeat":
            t = np.mod(t, self._period[c])
        return self._cs[self._search_right(c, t) - 1]

    def next_change_after(self, t, clients=None) -> tuple[np.ndarray, np.ndarray]:
        """Next real state change strictly after ``t``: ``(time_s, new_state)``.

        Rows that repeat the current state are skipped. Where no change ever comes
        (``hold`` after the last change, or a constant client) the time is ``inf``
        and the state is the (unchanging) current state. Under ``repeat`` the change
        may lie in a later period, including the wrap to the t=0 state at a period
        boundary when the period ends in a different state. The returned time is
        always > ``t`` (float rounding of ``k * period + offset`` is guarded).
        """
        c, t = self._query(t, clients)
        ct, cs, co = self._ct, self._cs, self._co
        first, end = co[c], co[c + 1]
        if self.beyond_end == "hold":
            j = self._search_right(c, t)
            has = j < end
            jj = np.where(has, j, end - 1)
            time = np.where(has, ct[jj], np.inf)
            state = np.where(has, cs[jj], cs[j - 1])
            return time, state.astype(np.int8)
        period = self._period[c]
        k, local = np.divmod(t, period)
        j = self._search_right(c, local)
        within = j < end
        jj = np.where(within, j, end - 1)
        last_state, init_state = cs[end - 1], cs[first]
        wraps_to_change = init_state != last_state
        second = np.minimum(first + 1, end - 1)
        has_second = end - first > 1
        time = np.where(
            within,
            k * period + ct[jj],
            np.where(
                wraps_to_change,
                (k + 1) * period,
                np.where(has_second, (k + 1) * period + ct[second], np.inf),
            ),
        )
        state = np.where(
            within,
            cs[jj],
            np.where(wraps_to_change, init_state, np.where(has_second, cs[second], last_state)),
        )
        time = np.where(time <= t, np.nextafter(t, np.inf), time)
        return time, state.astype(np.int8)

    # One client at a time: the same answers as ``state_at`` / ``next_change_after`` (the same
    # float64 operations), without the cost of broadcasting arrays of one element. The simulator
    # asks these at every dispatch, so they are on the hot path.
    def _rows_of(self, client: int, t: float) -> tuple[int, int, int]:
        """``(first, end, j)``: the (checked) client's compact rows and the first one with time > ``t``."""
        first, end = int(self._co[client]), int(self._co[client + 1])
        return first, end, first + int(np.searchsorted(self._ct[first:end], t, side="right"))

    def state_of(self, t: float, client: int) -> int:
        """``state_at(t, [client])[0]`` as an int."""
        t, client = self._check_time(t), self._check_client(client)
        if self.beyond_end == "repeat":
            t = np.mod(t, self._period[client])
        return int(self._cs[self._rows_of(client, t)[2] - 1])

    def next_change_of(self, t: float, client: int) -> tuple[float, int]:
        """``next_change_after(t, [client])`` for one client: ``(time_s, new_state)`` as Python scalars."""
        t, client = self._check_time(t), self._check_client(client)
        ct, cs = self._ct, self._cs
        if self.beyond_end == "hold":
            first, end, j = self._rows_of(client, t)
            if j < end:
                return float(ct[j]), int(cs[j])
            return float("inf"), int(cs[j - 1])
        period = self._period[client]
        k, local = np.divmod(t, period)
        first, end, j = self._rows_of(client, local)
        if j < end:
            time, state = k * period + ct[j], cs[j]
        elif cs[first] != cs[end - 1]:  # the wrap to the t=0 state is a change
            time, state = (k + 1) * period, cs[first]
        elif end - first > 1:
            time, state = (k + 1) * period + ct[first + 1], cs[first + 1]
        else:
            time, state = np.inf, cs[end - 1]
        if time <= t:
            time = np.nextafter(t, np.inf)
        return float(time), int(state)

    def intervals(self, client: int, tier: Tier | int) -> tuple[np.ndarray, np.ndarray]:
        """Maximal intervals ``[start, end)`` that ``client`` spends in ``tier``.

        Under ``hold`` the last interval may end at ``inf``; under ``repeat`` the
        intervals cover one period ``[0, period)`` (an interval ending at the
        period may continue, after the wrap, with one starting at 0).
        """
        c = int(self._client_index(client))
        lo, hi = self._co[c], self._co[c + 1]
        t, s = self._ct[lo:hi], self._cs[lo:hi]
        tail = np.inf if self.beyond_end == "hold" else self._period[c]
        ends = np.append(t[1:], tail)
        m = s == int(tier)
        return t[m].copy(), ends[m]

    # ---------------------------------------------------------- transforms
    def restrict(self, clients) -> "AvailabilityTrace":
        """Sub-trace of the given clients, renumbered ``0..k-1`` in the given order.

        A client may be listed more than once (a trace reused for a larger
        population); external client ids are then dropped, since they would repeat.
        """
        sel = self._client_index(clients).ravel()
        lengths = np.diff(self.offsets)[sel]
        offsets = np.zeros(sel.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        rows = np.repeat(self.offsets[sel] - offsets[:-1], lengths) + np.arange(offsets[-1])
        return AvailabilityTrace(
            num_clients=sel.size,
            times=self.times[rows],
            states=self.states[rows],
            offsets=offsets,
            duration_s=self.duration_s,
            beyond_end=self.beyond_end,
            client_duration_s=None
            if self.client_duration_s is None
            else self.client_duration_s[sel],
            client_ids=None if self.client_ids is None or np.unique(sel).size < sel.size else self.client_ids[sel],
        )

    def clip(self, duration_s: float) -> "AvailabilityTrace":
        """Trace ending at ``duration_s``: rows after it are dropped (every client
        keeps its t=0 row); per-client periods are replaced by ``duration_s``. May
        also lengthen the trace (e.g. to give a constant trace a repeat period)."""
        if not duration_s >= 0:
            raise ValueError(f"duration_s must be >= 0, got {duration_s}")
        keep = self.times <= duration_s
        offsets = np.zeros(self.num_clients + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.row_clients[keep], minlength=self.num_clients), out=offsets[1:])
        return dataclasses.replace(
            self,
            times=self.times[keep],
            states=self.states[keep],
            offsets=offsets,
            duration_s=float(duration_s),
            client_duration_s=None,
        )

    def time_scaled(self, speedup: float) -> "AvailabilityTrace":
        """The trace played ``speedup`` times faster: the result's state at ``t`` is this trace's state
        at ``speedup * t`` (up to the rounding of ``time / speedup``), for every client. Row times, the
        trace's end and the per-client ends / periods are all divided by ``speedup``; the end-of-trace
        policy is kept. ``speedup`` 1 returns the trace itself.
        """
        f = float(speedup)
        if not (math.isfinite(f) and f > 0):
            raise ValueError(f"speedup must be a finite number > 0, got {speedup!r}")
        if f == 1.0:
            return self
        return dataclasses.replace(
            self, times=self.times / f, duration_s=self.duration_s / f,
            client_duration_s=None if self.client_duration_s is None else self.client_duration_s / f)

    def shifted(self, start_s: float) -> "AvailabilityTrace":
        """The trace as seen from ``start_s`` on: the result's state at ``t`` is this trace's state at
        ``t + start_s``, for every client and every ``t >= 0``, under the same end-of-trace policy.

        ``hold``: the rows after ``start_s`` move back by ``start_s``, each client's state at
        ``start_s`` becomes its row at 0, and the trace (and per-client) end moves back too (to 0
        at the latest). ``repeat``: each client's period is rotated by ``start_s mod period``
        (the period itself is kept), so the result repeats exactly as this trace does. Rows are
        the compacted changes (tie groups and repeated states already folded).
        """
        s = float(start_s)
        if not (math.isfinite(s) and s >= 0):
            raise ValueError(f"start_s must be a finite number of seconds >= 0, got {start_s!r}")
        if s == 0 or self.num_clients == 0:
            return self
        n = self.num_clients
        ct, cs, co = self._ct, self._cs, self._co
        row_client = np.repeat(np.arange(n, dtype=np.int64), np.diff(co))
        init = self.state_at(s)  # each client's state at start_s (the same float ops as any query)
        if self.beyond_end == "hold":
            after = ct > s
            parts = [(np.arange(n, dtype=np.int64), np.zeros(n), init), (row_client[after], ct[after] - s, cs[after])]
            duration = max(self.duration_s - s, 0.0)
            client_duration = (None if self.client_duration_s is None
                               else np.maximum(self.client_duration_s - s, 0.0))
        else:
            phase = np.mod(s, self._period)  # (N,) start_s within each client's period, as state_at takes it
            row_phase, row_period = phase[row_client], self._period[row_client]
            after, before = ct > row_phase, ct < row_phase
            parts = [(np.arange(n, dtype=np.int64), np.zeros(n), init),
                     (row_client[after], ct[after] - row_phase[after], cs[after]),
                     (row_client[before], ct[before] + (row_period[before] - row_phase[before]), cs[before])]
            duration, client_duration = self.duration_s, self.client_duration_s
        clients = np.concatenate([p[0] for p in parts])
        order = np.argsort(clients, kind="stable")  # per client: the row at 0, then later rows in time order
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(clients, minlength=n), out=offsets[1:])
        return AvailabilityTrace(
            num_clients=n,
            times=np.concatenate([p[1] for p in parts])[order],
            states=np.concatenate([p[2] for p in parts]).astype(np.int8)[order],
            offsets=offsets,
            duration_s=duration,
            beyond_end=self.beyond_end,
            client_duration_s=client_duration,
            client_ids=self.client_ids,
        )

    def with_beyond_end(self, beyond_end: BeyondEnd) -> "AvailabilityTrace":
        """Same rows with another end-of-trace policy ("hold" or "repeat")."""
        return dataclasses.replace(self, beyond_end=beyond_end)

    @property
    def num_rows(self) -> int:
        return int(self.times.shape[0])

    @property
    def row_clients(self) -> np.ndarray:
        """int64 (E,) client index of every row."""
        return np.repeat(np.arange(self.num_clients, dtype=np.int64), np.diff(self.offsets))

    @property
    def external_ids(self) -> np.ndarray:
        """int64 (N,) client ids (``client_ids`` or the indices)."""
        if self.client_ids is None:
            return np.arange(self.num_clients, dtype=np.int64)
        return self.client_ids

    form = "table"  # every client's rows held (the on-demand forms: felix_jax.traces.on_demand)

    def digest_parts(self) -> tuple:
        """What a snapshot's digest of this trace covers (its rows and ends)."""
        return (self.num_clients, self.times, self.states, self.offsets, self.duration_s, self.beyond_end,
                self.client_duration_s if self.client_duration_s is not None else None)

    def materialized(self) -> "AvailabilityTrace":
        """This trace as a table: itself."""
        return self

    def __repr__(self) -> str:
        return (
            f"AvailabilityTrace(num_clients={self.num_clients}, rows={self.num_rows}, "
            f"duration_s={self.duration_s}, beyond_end={self.beyond_end!r})"
        )


class ChangeCursor:
    """Walks a trace's real changes in time order, from ``t0`` on (docs/architecture.md "The server view at scale").

    ``advance(t)`` returns the clients of every change in ``(time, t]`` (a client
    once per change, in time order) and moves the cursor to ``t``; ``peek_time()``
    is the time of the next change after the cursor. Each client's changes are
    followed as a chain of ``next_change_after`` steps (the chain that
    ``changes_between`` walks), so ``consumed``, the number of changes passed,
    matches ``changes_between``'s count over the same interval.

    Cost: a sorted window of upcoming changes is built ahead of the cursor from a
    per-client next-change array; building one scans that array once (O(N)), and
    the window's span adapts so that a window holds about ``N / 4`` changes (or
    ends at the next change), which spreads the scan over as many changes. An
    advance that stays inside the window is a binary search plus the changes it
    passes. Memory: O(N) for the next-change array plus the window.
    """

    def __init__(self, trace: AvailabilityTrace, t0: float = 0.0):
        self.trace = trace
        self.time = float(t0)
        self.consumed = 0
        n = trace.num_clients
        self._target = max(n // 4, 256)  # changes a window aims to hold
        if n:
            self._nxt = trace.next_change_after(self.time)[0]
        else:
            self._nxt = np.zeros(0)
        self._end = self.time  # the window covers (time, _end]
        self._wc = np.zeros(0, np.int64)
        self._wt = np.zeros(0)
        self._wi = 0
        span = trace.duration_s / 64 if trace.duration_s > 0 else 1.0
        self._span = span

    def _extend(self, min_end: float) -> None:
        """Replaces the (exhausted) window by the next one, ending at or after ``min_end``."""
        a = self._end
        nxt = self._nxt
        first = float(nxt.min()) if nxt.size else math.inf
        if not math.isfinite(first):  # no client ever changes again
            self._end = math.inf
            self._wc, self._wt, self._wi = np.zeros(0, np.int64), np.zeros(0), 0
            return
        b = max(min_end, a + self._span, first)
        c = np.flatnonzero(nxt <= b)
        t = nxt[c]
        out_c, out_t = [], []
        while c.size:
            out_c.append(c)
            out_t.append(t)
            nt, _ = self.trace.next_change_after(t, c)
            later = nt > b
            if later.any():
                nxt[c[later]] = nt[later]
                keep = ~later
                c, t = c[keep], nt[keep]
            else:
                t = nt
        cc = np.concatenate(out_c) if out_c else np.zeros(0, np.int64)
        tt = np.concatenate(out_t) if out_t else np.zeros(0)
        order = np.lexsort((cc, tt))
        self._wc, self._wt, self._wi = cc[order], tt[order], 0
        self._end = b
        # next span: about _target changes at this window's rate (never below the gap to the first change)
        if cc.size and b > a:
            self._span = max((b - a) * self._target / cc.size, 1e-9)
        else:
            self._span *= 4.0

    def advance(self, t: float) -> np.ndarray:
        """Clients of the changes in ``(time, t]`` (int64, in time order); the cursor moves to ``t``."""
        t = float(t)
        if not t > self.time:
            return np.zeros(0, np.int64)
        parts = []
        while True:
            j = self._wi + int(np.searchsorted(self._wt[self._wi:], t, side="right"))
            if j > self._wi:
                parts.append(self._wc[self._wi:j])
                self.consumed += j - self._wi
                self._wi = j
            if t <= self._end:
                break
            self._extend(t)
        self.time = t
        if not parts:
            return np.zeros(0, np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def peek_time(self) -> float:
        """Time of the next change after the cursor (``inf`` if none ever comes)."""
        while self._wi >= self._wt.size:
            if not math.isfinite(self._end):
                return math.inf
            self._extend(self._end)
        return float(self._wt[self._wi])
