"""The server's view of the fleet: numpy struct-of-arrays, one row per client.

Never a Python object per client, so it scales to 10^6 clients. It holds only
what the orchestrator may know (FeLiX's ClientMap: statistical utility, system
metric, last utility round, tier), plus bookkeeping the strategies share, and
each client's availability history as the server learned it (docs/architecture.md,
"The server view").
"""

from __future__ import annotations

import bisect
import dataclasses
import math

import numpy as np

from ..traces import Tier

ONLINE_TAU_S = 3600.0  # time constant of online_fraction's weighting: a second an hour old counts 1/e


@dataclasses.dataclass
class ClientMap:
    # Integer columns are int32 (rounds, counts and sizes stay far below 2**31): exact, and 16 bytes a
    # client less than int64 (a snapshot written with int64 columns restores as it was written).
    tier: np.ndarray  # (N,) int8: tier as the server believes it
    busy: np.ndarray  # (N,) bool: has a task the server has not heard back from
    num_samples: np.ndarray  # (N,) int32: client data size (reported at registration)
    utility: np.ndarray  # (N,) float64: latest statistical utility U
    utility_round: np.ndarray  # (N,) int32: aggregation round U was measured at (-1: never)
    last_selected_round: np.ndarray  # (N,) int32: round of the last training selection (-1: never)
    times_trained: np.ndarray  # (N,) int32: training replies received
    duration_s: np.ndarray  # (N,) float64: last observed training-task duration (nan: unknown)
    # (N,) float64: training-task duration the client's system profile gives at registration (nan: unknown)
    registered_duration_s: np.ndarray
    # Availability history, from the changes of the believed tier only (set_tier): what the server has
    # learned, 20 bytes a client. Online: believed tier != UN_AVL (AVL_TRAIN <-> AVL_EVAL is one spell).
    # Defaults: a snapshot written before the history has none (the simulator starts it at the restore).
    tier_since_s: np.ndarray | None = None  # (N,) float64: time it entered its current online / offline state
    last_online_s: np.ndarray | None = None  # (N,) float32: its last completed online spell (nan: none ended)
    departures: np.ndarray | None = None  # (N,) int32: times it went from online to UN_AVL
    # (N,) float32: its online time up to tier_since_s, each second weighted exp(-age / ONLINE_TAU_S), over
    # ONLINE_TAU_S: online_fraction's numerator
    online_weight: np.ndarray | None = None
    history_start_s: float = 0.0  # when the history starts: what the view learns then is its initial state

    def __post_init__(self):
        if self.tier_since_s is None:
            self.tier_since_s, self.last_online_s, self.departures, self.online_weight = \
                _empty_history(len(self.tier), self.history_start_s)
        self.history_start_s = float(self.history_start_s)
        # the arrays the maintained sets derive from take writes through the setters only: a direct
        # write would leave those sets stale, so it raises instead (the history: read-only to policies)
        for name in _GUARDED:
            arr = np.array(getattr(self, name), copy=True)
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    @staticmethod
    def create(num_samples: np.ndarray, registered_duration_s: np.ndarray | None = None) -> "ClientMap":
        n = len(num_samples)
        registered = np.full(n, np.nan) if registered_duration_s is None else registered_duration_s
        num_samples = np.asarray(num_samples)
        if num_samples.size and not 0 <= int(num_samples.min()) <= int(num_samples.max()) < 2 ** 31:
            raise ValueError("client sizes must lie in [0, 2**31)")
        return ClientMap(
            tier=np.full(n, Tier.AVL_TRAIN, np.int8),  # every client is registered available at t=0
            busy=np.zeros(n, bool),
            num_samples=num_samples.astype(np.int32),
            utility=np.zeros(n),
            utility_round=np.full(n, -1, np.int32),
            last_selected_round=np.full(n, -1, np.int32),
            times_trained=np.zeros(n, np.int32),
            duration_s=np.full(n, np.nan),
            registered_duration_s=np.asarray(registered, np.float64).copy(),
        )

    @property
    def num_clients(self) -> int:
        return len(self.tier)

    def read_only(self) -> "ReadOnlyView":
        """This map as policies get it (``ctx.view``): every read, no write (:class:`ReadOnlyView`)."""
        view = self.__dict__.get("_read_only")
        if view is None:
            view = self.__dict__["_read_only"] = ReadOnlyView(self)
        return view

    def _column_alias(self, name: str) -> np.ndarray:
        """A read-only alias of column ``name`` whose writeable flag cannot be set again (its base is a
        read-only buffer, :func:`read_only_alias`), made once per array: the same memory, current with
        every write the map makes."""
        column = getattr(self, name)
        aliases = self.__dict__.setdefault("_aliases", {})
        held = aliases.get(name)
        if held is None or held[0] is not column:  # first read, or the array replaced (start_history)
            held = aliases[name] = (column, read_only_alias(column))
        return held[1]

    # -- writes: through these, so the maintained sets below stay current ---------------------------
    def set_tier(self, clients, tiers, now: float | None = None) -> None:
        """``tier[clients] = tiers``, learned at virtual time ``now`` (None: the time of the map's latest
        change, its history's start if none). The clients whose online-ness changes update their
        availability history; a full refresh (``slice(None)``) stays whole-array passes."""
        index = self._index()
        now = self._clock(now)
        if isinstance(clients, (int, np.integer)):  # one client (a reply, a timeout): scalar steps
            was = bool(self.tier[clients] != Tier.UN_AVL)
            _write(self.tier, clients, tiers)
            if bool(self.tier[clients] != Tier.UN_AVL) != was:
                self._history_one(int(clients), was, now)
        elif isinstance(clients, slice) and clients == slice(None):
            was = self.tier != Tier.UN_AVL
            _write(self.tier, clients, tiers)
            self._history_many(np.flatnonzero(was != (self.tier != Tier.UN_AVL)), now)
        else:
            rows = np.arange(self.num_clients)[clients] if isinstance(clients, slice) else np.asarray(clients)
            rows = np.flatnonzero(rows) if rows.dtype == bool else rows.ravel()
            was = self.tier[rows] != Tier.UN_AVL
            _write(self.tier, clients, tiers)
            moved = rows[was != (self.tier[rows] != Tier.UN_AVL)]
            self._history_many(np.unique(moved) if moved.size > 1 else moved, now)
        index.update(self, clients)

    def start_history(self, now: float) -> None:
        """Forgets the availability history: it starts empty at ``now`` (a view restored from a snapshot
        written before the history existed)."""
        history = _empty_history(self.num_clients, now)
        for name, arr in zip(("tier_since_s", "last_online_s", "departures", "online_weight"), history):
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)
        self.history_start_s = float(now)
        self.__dict__["_latest_s"] = float(now)

    def _clock(self, now: float | None) -> float:
        """``now`` checked against the latest change (time runs forward), and kept as the latest."""
        latest = self.__dict__.get("_latest_s")
        if latest is None:  # first use, or a view rebuilt from a snapshot
            latest = float(self.tier_since_s.max(initial=self.history_start_s))
        now = latest if now is None else float(now)
        if now < latest:
            raise ValueError(f"set_tier at t={now} is before the view's latest change at t={latest}")
        self.__dict__["_latest_s"] = now
        return now

    def _history_one(self, i: int, was_online: bool, now: float) -> None:
        spell = now - float(self.tier_since_s[i])
        on = 1.0 if was_online else 0.0
        _write(self.online_weight, i, on + (float(self.online_weight[i]) - on) * math.exp(-spell / ONLINE_TAU_S))
        if was_online and now > self.history_start_s:  # a departure (not the initial state's correction)
            _write(self.departures, i, self.departures[i] + 1)
            _write(self.last_online_s, i, spell)
        _write(self.tier_since_s, i, now)

    def _history_many(self, rows: np.ndarray, now: float) -> None:
        """``_history_one`` for the (distinct) clients ``rows``, whose online-ness just changed: in parts of
        ``HISTORY_ROWS`` ids, whose temporaries stay in cache (a slot boundary that flips half of 10^7
        clients: ~0.12 s on 2 cores, ~0.2 s in one pass)."""
        for i in range(0, rows.size, HISTORY_ROWS):
            self._history_part(rows[i:i + HISTORY_ROWS], now)

    def _history_part(self, rows: np.ndarray, now: float) -> None:
        left = self.tier[rows] == Tier.UN_AVL  # were online
        spell = now - self.tier_since_s[rows]
        on = left.astype(np.float64)
        _write(self.online_weight, rows, on + (self.online_weight[rows] - on) * np.exp(-spell / ONLINE_TAU_S))
        if now > self.history_start_s:
            gone = rows[left]
            _write(self.departures, gone, self.departures[gone] + 1)
            _write(self.last_online_s, gone, spell[left])
        _write(self.tier_since_s, rows, now)

    def set_busy(self, client: int, busy: bool) -> None:
        index = self._index()
        _write(self.busy, client, busy)
        index.update(self, client)

    def mark_selected(self, client: int, current_round: int) -> None:
        """A training pick in ``current_round`` (the once-per-round rule counts these only)."""
        index = self._index()
        _write(self.last_selected_round, client, current_round)
        index.update(self, client)
        index.marked(client)

    def record_utility(self, client: int, utility: float, current_round: int) -> None:
        index = self._index()
        n = self.num_clients
        if index.trained.mask[client]:  # its place in the staleness order moves
            index.staleness.remove(int(self.utility_round[client]) * n + client)
            index.staleness.add(int(current_round) * n + client)
        self.utility[client] = utility
        _write(self.utility_round, client, current_round)
        if index.explored.add(client):
            index.became_explored(client)
            if np.isfinite(self.duration_s[client]):
                index.durations.add(self.duration_s[client])

    def record_training(self, client: int, duration_s: float) -> None:
        index = self._index()
        _write(self.times_trained, client, self.times_trained[client] + 1)
        if index.explored.mask[client]:
            if np.isfinite(self.duration_s[client]):
                index.durations.remove(self.duration_s[client])
            if np.isfinite(duration_s):
                index.durations.add(duration_s)
        _write(self.duration_s, client, duration_s)
        if index.trained.add(client):
            index.staleness.add(int(self.utility_round[client]) * self.num_clients + client)

    # -- availability history, read as of a time -------------------------------------------------------
    def current_spell_s(self, now: float, clients=None) -> np.ndarray:
        """How long each client (all, or ``clients``) has been believed online as of ``now``, in seconds
        (0 where believed UN_AVL): float64."""
        idx = slice(None) if clients is None else clients
        return np.where(self.tier[idx] != Tier.UN_AVL, now - self.tier_since_s[idx], 0.0)

    def online_fraction(self, now: float, clients=None) -> np.ndarray:
        """Each client's (all, or ``clients``) share of the time since the history's start that it was
        believed online, as of ``now``, each second weighted ``exp(-age / ONLINE_TAU_S)``: float64 in
        [0, 1]; at the history's start, its current state."""
        idx = slice(None) if clients is None else clients
        on = (self.tier[idx] != Tier.UN_AVL).astype(np.float64)
        decay = np.exp(-(now - self.tier_since_s[idx]) / ONLINE_TAU_S)
        observed = -math.expm1(-(now - self.history_start_s) / ONLINE_TAU_S)  # the weights' total
        if observed <= 0.0:
            return on
        return np.clip((on + (self.online_weight[idx] - on) * decay) / observed, 0.0, 1.0)

    # -- reads: maintained, O(changes) per event instead of passes over all N rows. They return
    # read-only views of the maintained sets, current until the next write to the map: a caller
    # that keeps one past that copies it. ---------------------------------------------------------
    def trainable(self, current_round: int, once_per_round: bool) -> np.ndarray:
        """Clients a training selector may pick now (believed AVL_TRAIN and idle): (N,) bool, read-only."""
        index = self._index()
        if once_per_round:  # TierTrack: a client that left and returned is not picked twice a round
            return index.once_mask(self, current_round)
        return index.readonly(index.train_ok)

    def evaluable(self) -> np.ndarray:
        """Clients an eval selector may use (believed AVL_TRAIN or AVL_EVAL, idle): (N,) bool, read-only."""
        index = self._index()
        return index.readonly(index.eval_ok)

    def num_trainable(self, current_round: int, once_per_round: bool) -> int:
        index = self._index()
        if once_per_round:
            index.once_mask(self, current_round)
            return index.n_once
        return index.n_train

    def num_evaluable(self) -> int:
        return self._index().n_eval

    def block_counts(self, mask: np.ndarray) -> tuple[np.ndarray, int] | None:
        """``(counts, rows)``: how many rows of each block of ``rows`` clients are set in ``mask``, when ``mask`` is
        one this map maintains (``trainable`` / ``evaluable``'s result; kept current by its writes,
        read-only), else ``None``: a selector finds the ``r``-th eligible client by a search over
        these counts and one block's rows, not a pass over all N."""
        kept = self._index().kept(mask)
        return None if kept is None else (_Index.readonly(kept[1]), BLOCK_ROWS)

    def explored_block_counts(self, mask: np.ndarray) -> tuple[int, np.ndarray, int] | None:
        """``(count, counts, rows)`` of the explored clients set in ``mask``: how many, and how many in each
        block of ``rows`` clients, when ``mask`` is one this map maintains (as :meth:`block_counts`), else
        ``None``. Kept current by the map's writes, so a selector that only needs how many eligible clients
        are explored, and where the unexplored ones are, reads them without a pass over the explored ids."""
        kept = self._index().kept(mask)
        return None if kept is None else (kept[3], _Index.readonly(kept[2]), BLOCK_ROWS)

    def explored_ids(self) -> "SortedSequence":
        """Clients with a measured utility (``utility_round >= 0``), ascending: a live, read-only
        :class:`SortedSequence` (``np.asarray`` of it for the whole array, a copy)."""
        return self._index().explored.ids()

    def explored_mask(self) -> np.ndarray:
        """(N,) bool, read-only: ``utility_round >= 0``."""
        return _Index.readonly(self._index().explored.mask)

    def trained_ids(self) -> "SortedSequence":
        """Clients that sent a training reply (``times_trained > 0``), ascending (a :class:`SortedSequence`)."""
        return self._index().trained.ids()

    def explored_durations(self) -> "SortedSequence":
        """The explored clients' observed durations where known, ascending (read-only): the population
        Oort's ``T_pref`` is an order statistic of."""
        return self._index().durations.values()

    def staleness_order(self) -> "SortedSequence":
        """The trained clients as keys ``utility_round * N + id``, ascending (read-only): stalest
        utility first, ties by id; ``key % N`` is the client, ``key // N`` its utility round."""
        return self._index().staleness.values()

    def _index(self) -> "_Index":
        index = self.__dict__.get("_derived")
        if index is None:  # first use, or a view rebuilt from a snapshot
            index = self.__dict__["_derived"] = _Index(self)
        return index

    def check_index(self, current_round: int) -> None:
        """Raises if a maintained set differs from its recomputation from the arrays (tests)."""
        fresh = _Index(self)
        index = self._index()
        for name in ("train_ok", "eval_ok"):
            if not np.array_equal(getattr(fresh, name), getattr(index, name)):
                raise AssertionError(f"ClientMap: maintained {name} differs from the arrays")
        if (index.n_train, index.n_eval) != (fresh.n_train, fresh.n_eval):
            raise AssertionError("ClientMap: maintained counts differ from the arrays")
        for name in ("train_blocks", "eval_blocks", "train_x", "eval_x"):
            if not np.array_equal(getattr(fresh, name), getattr(index, name)):
                raise AssertionError(f"ClientMap: maintained {name} differ from the arrays")
        if (index.n_train_x, index.n_eval_x) != (fresh.n_train_x, fresh.n_eval_x):
            raise AssertionError("ClientMap: maintained explored counts differ from the arrays")
        once = self.trainable(current_round, True)
        if not np.array_equal(once, fresh.train_ok & (self.last_selected_round != current_round)) or \
                index.n_once != int(np.count_nonzero(once)) or \
                not np.array_equal(index.once_blocks, block_counts(np.asarray(once))):
            raise AssertionError("ClientMap: maintained once-per-round set differs from the arrays")
        once_x = np.asarray(once) & (self.utility_round >= 0)
        if index.n_once_x != int(np.count_nonzero(once_x)) or not np.array_equal(index.once_x, block_counts(once_x)):
            raise AssertionError("ClientMap: maintained once-per-round explored counts differ from the arrays")
        for name in ("explored", "trained"):
            if not np.array_equal(getattr(index, name).ids(), getattr(fresh, name).ids()):
                raise AssertionError(f"ClientMap: maintained {name} ids differ from the arrays")
        for name in ("durations", "staleness"):
            if not np.array_equal(getattr(index, name).values(), getattr(fresh, name).values()):
                raise AssertionError(f"ClientMap: maintained {name} order differs from the arrays")


_GUARDED = ("tier", "busy", "utility_round", "last_selected_round", "times_trained", "duration_s",
            "tier_since_s", "last_online_s", "departures", "online_weight")


def _empty_history(n: int, start_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An availability history that starts at ``start_s``: every client in its state since then, no spell
    ended, no departure, no online time yet."""
    return (np.full(n, float(start_s), np.float64), np.full(n, np.nan, np.float32), np.zeros(n, np.int32),
            np.zeros(n, np.float32))


def read_only_alias(a: np.ndarray) -> np.ndarray:
    """``a``'s memory as an array whose writeable flag cannot be set again (``flags.writeable = True``
    raises ValueError): its base is a read-only buffer, not an array. Zero-copy, O(1): a write to ``a``
    shows through it. (``a.view()`` with the flag cleared could be made writeable again wherever ``a``
    is, or owns its data.)"""
    flat = np.frombuffer(memoryview(a).toreadonly(), a.dtype)
    return flat if a.ndim == 1 else flat.reshape(a.shape)  # 1-D (every column, mask): the buffer's own array


def _write(arr: np.ndarray, idx, value) -> None:
    arr.flags.writeable = True
    try:
        arr[idx] = value
    finally:
        arr.flags.writeable = False


class _SortedIds:
    """A growing set of client ids: an (N,) mask and the ids in ascending order."""

    def __init__(self, mask: np.ndarray):
        self.mask = mask
        self._ids = _SortedValues(np.flatnonzero(mask))

    def add(self, client: int) -> bool:
        """Adds ``client``; True if it was not in the set."""
        if self.mask[client]:
            return False
        self.mask[client] = True
        self._ids.add(client)
        return True

    def ids(self) -> "SortedSequence":
        return self._ids.values()


class _SortedValues:
    """A multiset of numbers kept sorted in chunks of at most ``2 * load`` values: an insert or a removal
    is a binary search over the chunks' last values, one in the chunk, and a copy of that chunk, so it
    costs O(log n + load), not O(n). (One buffer and an in-place shift cost a memmove of the values after
    the slot: ~50 us at 3 x 10^5 values, ~0.6 ms at 3 x 10^6, several an event as clients are explored.)
    Positional reads go through the chunks' sizes (:class:`SortedSequence`)."""

    def __init__(self, values: np.ndarray, load: int = 1024):
        values = np.sort(values)
        self.load = int(load)
        self.dtype = values.dtype
        self._chunks: list[np.ndarray] = [values[i:i + self.load].copy() for i in range(0, values.size, self.load)]
        self._maxes: list = [c[-1].item() for c in self._chunks]  # each chunk's last value, for bisect
        self._sizes = np.array([c.size for c in self._chunks], np.int64)
        self._n = int(values.size)

    def __len__(self) -> int:
        return self._n

    def add(self, value) -> None:
        value = self.dtype.type(value)
        if not self._chunks:
            self._chunks, self._maxes, self._sizes = [np.array([value], self.dtype)], [value.item()], np.ones(1, np.int64)
            self._n = 1
            return
        i = min(bisect.bisect_right(self._maxes, value.item()), len(self._chunks) - 1)
        chunk = self._chunks[i]
        j = int(chunk.searchsorted(value, side="right"))
        grown = np.empty(chunk.size + 1, chunk.dtype)  # np.insert, without its generality's overhead
        grown[:j], grown[j], grown[j + 1:] = chunk[:j], value, chunk[j:]
        chunk = self._chunks[i] = grown
        self._maxes[i] = chunk[-1].item()
        self._sizes[i] += 1
        self._n += 1
        self._split_if_large(i)

    def _split_if_large(self, i: int) -> None:
        chunk = self._chunks[i]
        if chunk.size > 2 * self.load:  # in two halves
            half = chunk.size // 2
            self._chunks[i:i + 1] = [chunk[:half].copy(), chunk[half:].copy()]
            self._maxes[i:i + 1] = [chunk[half - 1].item(), chunk[-1].item()]
            self._sizes = np.insert(self._sizes, i, half)
            self._sizes[i + 1] = chunk.size - half

    def remove(self, value) -> None:
        value = self.dtype.type(value)
        i = bisect.bisect_left(self._maxes, value.item())
        if i < len(self._chunks):
            chunk = self._chunks[i]
            j = int(chunk.searchsorted(value, side="left"))
            if j < chunk.size and chunk[j] == value:
                self._n -= 1
                if chunk.size == 1:
                    del self._chunks[i], self._maxes[i]
                    self._sizes = np.delete(self._sizes, i)
                    return
                shrunk = np.empty(chunk.size - 1, chunk.dtype)
                shrunk[:j], shrunk[j:] = chunk[:j], chunk[j + 1:]
                chunk = self._chunks[i] = shrunk
                self._maxes[i] = chunk[-1].item()
                self._sizes[i] -= 1
                if chunk.size < self.load // 4 and i + 1 < len(self._chunks):  # merge a small chunk into the next
                    merged = np.concatenate([chunk, self._chunks[i + 1]])
                    self._chunks[i:i + 2], self._maxes[i:i + 2] = [merged], [merged[-1].item()]
                    self._sizes = np.delete(self._sizes, i)
                    self._sizes[i] = merged.size
                    self._split_if_large(i)
                return
        raise KeyError(f"{value!r} is not in the set")

    def values(self) -> "SortedSequence":
        """Read-only, and live: the next write to the set shows through it (as with the view's masks)."""
        return SortedSequence(self)


class SortedSequence:
    """A read-only, live view of a :class:`_SortedValues`, with the reads the selectors make of a sorted
    array: ``len``, ``seq[i]``, ``seq[a:b]`` (an array), ``searchsorted``, and ``np.asarray(seq)`` for the
    whole array (O(n): a copy). Positional reads cost O(chunks) for the chunks' offsets, not O(n)."""

    def __init__(self, values: _SortedValues):
        self._v = values

    @property
    def dtype(self) -> np.dtype:
        return self._v.dtype

    def __len__(self) -> int:
        return self._v._n

    def __array__(self, dtype=None, copy=None):
        v = self._v
        out = np.concatenate(v._chunks) if v._chunks else np.zeros(0, v.dtype)
        return out if dtype is None else out.astype(dtype)

    def _offsets(self) -> np.ndarray:
        return np.cumsum(self._v._sizes)

    def __getitem__(self, key):
        n = self._v._n
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                return np.asarray(self)[key]
            if stop <= start:
                return np.zeros(0, self._v.dtype)
            ends = self._offsets()
            first, last = int(np.searchsorted(ends, start, side="right")), int(np.searchsorted(ends, stop - 1, side="right"))
            parts = self._v._chunks[first:last + 1]
            base = int(ends[first - 1]) if first else 0
            return np.concatenate(parts)[start - base:stop - base]
        i = int(key)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {key} is out of range for {n} values")
        ends = self._offsets()
        c = int(np.searchsorted(ends, i, side="right"))
        return self._v._chunks[c][i - (int(ends[c - 1]) if c else 0)]

    def searchsorted(self, value, side: str = "left") -> int:
        """``np.searchsorted`` of the whole sorted array, for one value."""
        v = self._v
        x = v.dtype.type(value).item()
        c = (bisect.bisect_left if side == "left" else bisect.bisect_right)(v._maxes, x)
        if c == len(v._chunks):
            return v._n
        before = int(v._sizes[:c].sum())
        return before + int(np.searchsorted(v._chunks[c], value, side=side))


class ReadOnlyView:
    """The server's view as a policy gets it (``ctx.view``): every read of :class:`ClientMap`, no way to
    change it. Its columns are read-only aliases of the map's arrays (zero-copy, current with the
    server's writes; ``flags.writeable = True`` raises ValueError: :func:`read_only_alias`); its reads
    (``current_spell_s``, ``block_counts``, ``explored_ids``, ...) are the map's; setting or deleting an
    attribute raises AttributeError naming it, and the map's writes (``set_tier``, ``set_busy``,
    ``start_history``, ...) are not reachable through it. A policy keeps what it needs between calls in
    its own state (docs/file-formats.md, "Plugins"). A guard against a policy that writes by mistake, not
    a sandbox: Python code that digs through private attributes can still reach the map."""

    __slots__ = ("_server_map",)

    # the columns a policy reads (the map's dataclass fields that hold arrays), as read-only aliases
    COLUMNS = ("tier", "busy", "num_samples", "utility", "utility_round", "last_selected_round", "times_trained",
               "duration_s", "registered_duration_s", "tier_since_s", "last_online_s", "departures",
               "online_weight")
    # the map's reads, passed through (each returns a new array, a read-only alias, a count or a
    # read-only SortedSequence)
    READS = ("current_spell_s", "online_fraction", "evaluable", "num_evaluable", "block_counts",
             "explored_block_counts", "explored_ids", "explored_mask", "trained_ids", "explored_durations",
             "staleness_order")
    # the map's writes: named in the refusal, never handed out
    WRITES = ("set_tier", "set_busy", "mark_selected", "record_utility", "record_training", "start_history",
              "check_index", "create", "read_only")

    def __init__(self, view: ClientMap):
        object.__setattr__(self, "_server_map", view)

    @property
    def num_clients(self) -> int:
        return self._server_map.num_clients

    @property
    def history_start_s(self) -> float:
        return self._server_map.history_start_s

    def trainable(self, current_round: int, once_per_round: bool) -> np.ndarray:
        """:meth:`ClientMap.trainable`; the once-per-round mask of a round other than the server's
        current one is computed afresh (a pass over N), never moved in the map's maintained state."""
        index = self._server_map._index()
        if once_per_round and index.once_round is not None and index.once_round != current_round:
            m = self._server_map
            return read_only_alias(index.train_ok & (m.last_selected_round != current_round))
        return self._server_map.trainable(current_round, once_per_round)

    def num_trainable(self, current_round: int, once_per_round: bool) -> int:
        if once_per_round and self._server_map._index().once_round not in (None, current_round):
            return int(np.count_nonzero(self.trainable(current_round, once_per_round)))
        return self._server_map.num_trainable(current_round, once_per_round)

    def __getattr__(self, name: str):
        m = object.__getattribute__(self, "_server_map")
        if name in ReadOnlyView.COLUMNS:
            return m._column_alias(name)
        if name in ReadOnlyView.READS:
            return getattr(m, name)
        if name in ReadOnlyView.WRITES:
            raise AttributeError(f"ctx.view.{name}: it changes the server's view, which is read-only to policies; "
                                 "a policy keeps its own state in the value its init() returns")
        raise AttributeError(f"ctx.view has no attribute {name!r} (the server's view: "
                             f"{', '.join(ReadOnlyView.COLUMNS + ReadOnlyView.READS)}, num_clients, trainable, "
                             "num_trainable, history_start_s)")

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"ctx.view.{name} cannot be set: the server's view is read-only to policies (the "
                             "server keeps it in step with its bookkeeping); a policy keeps its own state in the "
                             "value its init() returns and select() passes back")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ctx.view.{name} cannot be deleted: the server's view is read-only to policies")

    def __dir__(self):
        return sorted(set(ReadOnlyView.COLUMNS + ReadOnlyView.READS)
                      | {"num_clients", "history_start_s", "trainable", "num_trainable"})


BLOCK_ROWS = 1 << 12  # clients per block of the maintained masks' block counts
HISTORY_ROWS = 1 << 16  # clients per part of a many-client update of the availability history


def block_counts(mask: np.ndarray) -> np.ndarray:
    """int64 counts of set rows in each block of ``BLOCK_ROWS`` consecutive rows of ``mask``."""
    full = mask.size - mask.size % BLOCK_ROWS
    counts = mask[:full].reshape(-1, BLOCK_ROWS).sum(axis=1, dtype=np.int64)
    if full < mask.size:
        counts = np.append(counts, np.int64(np.count_nonzero(mask[full:])))
    return counts


def _move_counts(counts: np.ndarray, rows: np.ndarray, before: np.ndarray, after: np.ndarray) -> None:
    """Keeps ``counts`` (``block_counts`` of a mask) current when ``mask[rows]`` goes from ``before`` to ``after``."""
    moved = before != after
    if not moved.any():
        return
    r = rows[moved]
    delta = np.where(after[moved], 1, -1)
    if r.size <= 64:
        np.add.at(counts, r // BLOCK_ROWS, delta)
    else:
        counts += np.bincount(r // BLOCK_ROWS, weights=delta, minlength=counts.size).astype(np.int64)


class _Index:
    """What the selectors ask of the view at every event, kept current by ClientMap's writes:
    the trainable / evaluable masks and counts, the once-per-round mask of the current round,
    the explored and trained clients, the explored clients' known durations in order, and the
    trained clients in staleness order; for each of the three masks, how many of its clients are
    explored, in all and per block (``*_x``, ``n_*_x``). Derived state: rebuilt from the arrays when
    missing."""

    def __init__(self, view: ClientMap):
        self.explored = _SortedIds(view.utility_round >= 0)
        explored = self.explored.mask
        self.train_ok = (view.tier == Tier.AVL_TRAIN) & ~view.busy
        self.eval_ok = (view.tier >= Tier.AVL_EVAL) & ~view.busy  # AVL_EVAL (1) or AVL_TRAIN (2)
        self.n_train = int(np.count_nonzero(self.train_ok))
        self.n_eval = int(np.count_nonzero(self.eval_ok))
        self.train_blocks, self.eval_blocks = block_counts(self.train_ok), block_counts(self.eval_ok)
        self.train_x, self.eval_x = block_counts(self.train_ok & explored), block_counts(self.eval_ok & explored)
        self.n_train_x, self.n_eval_x = int(self.train_x.sum()), int(self.eval_x.sum())
        self.once_round: int | None = None  # the round once_ok is for
        self.once_ok: np.ndarray | None = None
        self.once_blocks: np.ndarray | None = None
        self.once_x: np.ndarray | None = None
        self.n_once = self.n_once_x = 0
        # every client whose last_selected_round >= once_round is listed here (and perhaps others):
        # the only rows a new round's once mask can differ in from the last round's
        self.once_marked: list[int] = []
        self.trained = _SortedIds(view.times_trained > 0)
        observed = view.duration_s[self.explored.mask]
        self.durations = _SortedValues(observed[np.isfinite(observed)])  # T_pref's population, sorted
        trained = np.asarray(self.trained.ids())
        self.staleness = _SortedValues(view.utility_round[trained].astype(np.int64) * view.num_clients + trained)

    @staticmethod
    def readonly(a: np.ndarray) -> np.ndarray:
        return read_only_alias(a)

    def kept(self, mask: np.ndarray) -> tuple | None:
        """``(rows, blocks, explored blocks, explored count)`` of the maintained mask ``mask`` is a
        read-only alias of (:func:`read_only_alias`), else None."""
        base = getattr(getattr(mask, "base", None), "obj", None)  # the buffer's exporter: the mask itself
        if base is None:
            return None
        if base is self.train_ok:
            return self.train_ok, self.train_blocks, self.train_x, self.n_train_x
        if base is self.eval_ok:
            return self.eval_ok, self.eval_blocks, self.eval_x, self.n_eval_x
        if self.once_ok is not None and base is self.once_ok:
            return self.once_ok, self.once_blocks, self.once_x, self.n_once_x
        return None

    def became_explored(self, i: int) -> None:
        """Client ``i`` was just added to the explored set: the explored counts of the masks it is in."""
        b = i // BLOCK_ROWS
        if self.train_ok[i]:
            self.train_x[b] += 1
            self.n_train_x += 1
        if self.eval_ok[i]:
            self.eval_x[b] += 1
            self.n_eval_x += 1
        if self.once_ok is not None and self.once_ok[i]:
            self.once_x[b] += 1
            self.n_once_x += 1

    def update(self, view: ClientMap, clients) -> None:
        if isinstance(clients, slice):
            if clients == slice(None):  # every client (a full refresh): whole-array passes, no ids
                self._update_all(view)
                return
            clients = np.arange(len(view.tier))[clients]
        if isinstance(clients, (int, np.integer)):  # one client (a dispatch, a reply): scalar steps
            self._update_one(view, int(clients))
            return
        c = np.atleast_1d(np.asarray(clients))
        if c.dtype == bool:
            c = np.flatnonzero(c)
        if c.size > 1 and not (c[1:] > c[:-1]).all():  # ascending ids need no dedup (O(n), not a sort)
            c = np.unique(c)
        train = (view.tier[c] == Tier.AVL_TRAIN) & ~view.busy[c]
        ev = (view.tier[c] >= Tier.AVL_EVAL) & ~view.busy[c]
        was_train, was_eval = self.train_ok[c], self.eval_ok[c]
        x = self.explored.mask[c]
        self.n_train += int(np.count_nonzero(train)) - int(np.count_nonzero(was_train))
        self.n_eval += int(np.count_nonzero(ev)) - int(np.count_nonzero(was_eval))
        self.n_train_x += int(np.count_nonzero(train & x)) - int(np.count_nonzero(was_train & x))
        self.n_eval_x += int(np.count_nonzero(ev & x)) - int(np.count_nonzero(was_eval & x))
        self.train_ok[c], self.eval_ok[c] = train, ev
        _move_counts(self.train_blocks, c, was_train, train)
        _move_counts(self.eval_blocks, c, was_eval, ev)
        _move_counts(self.train_x, c, was_train & x, train & x)
        _move_counts(self.eval_x, c, was_eval & x, ev & x)
        if self.once_ok is not None:
            once = train & (view.last_selected_round[c] != self.once_round)
            was_once = self.once_ok[c]
            self.n_once += int(np.count_nonzero(once)) - int(np.count_nonzero(was_once))
            self.n_once_x += int(np.count_nonzero(once & x)) - int(np.count_nonzero(was_once & x))
            self.once_ok[c] = once
            _move_counts(self.once_blocks, c, was_once, once)
            _move_counts(self.once_x, c, was_once & x, once & x)

    def _update_all(self, view: ClientMap) -> None:
        """``update`` for every client: the masks rewritten in place (the read-only views handed out
        stay views of them), the counts and block counts recomputed."""
        idle = ~view.busy
        np.logical_and(view.tier == Tier.AVL_TRAIN, idle, out=self.train_ok)
        np.logical_and(view.tier >= Tier.AVL_EVAL, idle, out=self.eval_ok)
        self.n_train = int(np.count_nonzero(self.train_ok))
        self.n_eval = int(np.count_nonzero(self.eval_ok))
        self.train_blocks[:] = block_counts(self.train_ok)
        self.eval_blocks[:] = block_counts(self.eval_ok)
        explored = self.explored.mask
        self.train_x[:] = block_counts(self.train_ok & explored)
        self.eval_x[:] = block_counts(self.eval_ok & explored)
        self.n_train_x, self.n_eval_x = int(self.train_x.sum()), int(self.eval_x.sum())
        if self.once_ok is not None:  # picked this round: listed in once_marked, so no pass over the rounds
            np.copyto(self.once_ok, self.train_ok)
            m = np.asarray(self.once_marked, np.int64)
            m = m[view.last_selected_round[m] == self.once_round]
            self.once_ok[m] = False
            self.n_once = int(np.count_nonzero(self.once_ok))
            self.once_blocks[:] = block_counts(self.once_ok)
            self.once_x[:] = block_counts(self.once_ok & explored)
            self.n_once_x = int(self.once_x.sum())

    def _update_one(self, view: ClientMap, i: int) -> None:
        """``update`` for one client, in Python scalars (the same counts and masks)."""
        idle = not view.busy[i]
        tier = int(view.tier[i])
        train, ev = idle and tier == Tier.AVL_TRAIN, idle and tier >= Tier.AVL_EVAL
        b = i // BLOCK_ROWS
        x = bool(self.explored.mask[i])
        if train != bool(self.train_ok[i]):
            self.train_ok[i] = train
            d = 1 if train else -1
            self.n_train += d
            self.train_blocks[b] += d
            if x:
                self.n_train_x += d
                self.train_x[b] += d
        if ev != bool(self.eval_ok[i]):
            self.eval_ok[i] = ev
            d = 1 if ev else -1
            self.n_eval += d
            self.eval_blocks[b] += d
            if x:
                self.n_eval_x += d
                self.eval_x[b] += d
        if self.once_ok is not None:
            once = train and int(view.last_selected_round[i]) != self.once_round
            if once != bool(self.once_ok[i]):
                self.once_ok[i] = once
                d = 1 if once else -1
                self.n_once += d
                self.once_blocks[b] += d
                if x:
                    self.n_once_x += d
                    self.once_x[b] += d

    def marked(self, client: int) -> None:
        """``client``'s last_selected_round was written (a training pick)."""
        if self.once_ok is not None:
            self.once_marked.append(int(client))

    def once_mask(self, view: ClientMap, current_round: int) -> np.ndarray:
        if self.once_round != current_round:
            if self.once_ok is None or current_round < self.once_round:  # first use: one pass over N
                self.once_ok = self.train_ok & (view.last_selected_round != current_round)
                self.n_once = int(np.count_nonzero(self.once_ok))
                self.once_blocks = block_counts(self.once_ok)
                self.once_x = block_counts(self.once_ok & self.explored.mask)
                self.n_once_x = int(self.once_x.sum())
                self.once_marked = np.flatnonzero(view.last_selected_round >= current_round).tolist()
            else:  # a later round: only the clients picked since the last round's mask can change
                m = np.unique(np.asarray(self.once_marked, np.int64))
                lsr = view.last_selected_round[m]
                once = self.train_ok[m] & (lsr != current_round)
                was = self.once_ok[m]
                x = self.explored.mask[m]
                self.n_once += int(np.count_nonzero(once)) - int(np.count_nonzero(was))
                self.n_once_x += int(np.count_nonzero(once & x)) - int(np.count_nonzero(was & x))
                self.once_ok[m] = once
                _move_counts(self.once_blocks, m, was, once)
                _move_counts(self.once_x, m, was & x, once & x)
                self.once_marked = m[lsr >= current_round].tolist()
            self.once_round = current_round
        return self.readonly(self.once_ok)
