"""Loading and saving availability traces (docs/architecture.md; docs/file-formats.md).

Sources:

* the paper's own traces, ``load_reference_trace`` (the shared file
  ``traces/felix_reference_300clients.npz``: ``path``, else the data home, else the copy shipped in
  ``felix_jax/traces/reference/``);
* FedScale's ``client_behave_trace`` (pickle, read with a restricted unpickler, or
  the same structure as JSON), ``load_fedscale_trace``;
* users' own traces in a plain interval format, CSV or NPZ (below).

Interval format (CSV): optional ``#`` comment lines, a header ``client,time_s,state``
and one row per state change::

    # felix-jax availability trace v1
    # duration_s=86400.0
    # beyond_end=hold
    client,time_s,state
    17,0.0,AVL_TRAIN
    17,3600.0,UN_AVL

``client`` is a whole-number id >= 0, not necessarily 0..N-1 (the clients are the
sorted distinct ids, kept as ``trace.client_ids``; a negative id is refused naming its
line); ``time_s`` seconds from the start; ``state`` a tier name or code (0 UN_AVL,
1 AVL_EVAL, 2 AVL_TRAIN). Rows may come in any order; same-client same-time rows apply
in file order (the last wins). A client without a row at t=0 starts ``UN_AVL``.
``duration_s`` defaults to the last row time and ``beyond_end`` to ``hold``. The NPZ
form holds the same columns as arrays ``client`` (int64), ``time_s`` (float64),
``state`` (int8), plus ``duration_s``, ``beyond_end`` and, optionally, ``clients``
(the client list) and ``client_duration_s`` (per-client periods, aligned with the
client list); it loads with ``allow_pickle=False``. FedScale keys are client ids
under the same rule. A scenario with fewer clients than a user's trace file uses the
file's first ones and names the others on stderr (``felix_jax.experiment.registry``);
one with more reuses it cyclically.

Every loader raises :class:`~.data_paths.DataFileError` (a ``ValueError``) naming
the file when it is truncated, corrupt or lacks what the format needs, and
``FileNotFoundError`` when it is not there.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .availability import AvailabilityTrace, BeyondEnd, Tier
from .data_paths import DataFileError, open_npz, reading, resolve_data_file
from .safe_pickle import restricted_pickle_load

REFERENCE_TRACE_FILE = "traces/felix_reference_300clients.npz"
REFERENCE_TRACE_NAMES: tuple[str, ...] = (
    "syn_0",
    "syn_20",
    "syn_50",
    "mobiperf_2st",
    "mobiperf_3st_50",
    "mobiperf_3st_75",
)
_CSV_COLUMNS = ("client", "time_s", "state")


def _trace_from_id_rows(
    ids,
    time_s,
    state,
    *,
    all_ids=None,
    duration_s: float | None = None,
    beyond_end: BeyondEnd = "hold",
    client_duration_s=None,
    path,
) -> AvailabilityTrace:
    """Rows keyed by external client ids -> trace over indices (position in all_ids)."""
    ids = np.asarray(ids, dtype=np.int64)
    all_ids = np.unique(ids) if all_ids is None else np.asarray(all_ids, dtype=np.int64)
    if all_ids.size == 0:
        raise DataFileError(path, "the trace holds no clients")
    if np.unique(all_ids).size != all_ids.size:
        uniq, counts = np.unique(all_ids, return_counts=True)
        raise DataFileError(path, f"client id {int(uniq[counts > 1][0])} appears more than once in the client list")
    order = np.argsort(all_ids, kind="stable")
    pos = np.searchsorted(all_ids[order], ids)
    pos = np.minimum(pos, max(all_ids.size - 1, 0))
    if ids.size and np.any(all_ids[order][pos] != ids):
        raise ValueError("rows name client ids that are not in the client list")
    index = order[pos]
    client_ids = None if np.array_equal(all_ids, np.arange(all_ids.size)) else all_ids
    return AvailabilityTrace.from_rows(
        index,
        time_s,
        state,
        num_clients=all_ids.size,
        duration_s=duration_s,
        beyond_end=beyond_end,
        client_duration_s=client_duration_s,
        client_ids=client_ids,
    )


def _with_clients(trace: AvailabilityTrace, path) -> AvailabilityTrace:
    """``trace``, unless it has no clients: an empty file must not reach a run (nothing to schedule)."""
    if trace.num_clients == 0:
        raise DataFileError(path, "the trace holds no clients")
    return trace


# ------------------------------------------------------------ reference data
def load_reference_trace(
    name: str, path: str | os.PathLike | None = None, *, beyond_end: BeyondEnd = "hold"
) -> AvailabilityTrace:
    """One of the paper's six traces (docs/file-formats.md), 300 clients.

    ``name`` is one of ``REFERENCE_TRACE_NAMES``: ``syn_0`` (the paper's 100%),
    ``syn_20`` (90%), ``syn_50`` (50%), ``mobiperf_2st``, ``mobiperf_3st_50``,
    ``mobiperf_3st_75`` (MobiPerf, two or three tiers). Client ids 1..300 become
    indices 0..299 (``trace.client_ids`` keeps the ids). ``duration_s`` is the last
    row time (86,400 s for the synthetic traces, 536,263 s for MobiPerf; 0 for
    ``syn_0``, which is constant). ``path``: the npz file or a data folder; default
    the data home (``$FELIX_JAX_DATA``, else the user cache's ``data/``), else the copy shipped with
    felix-jax.
    """
    if name not in REFERENCE_TRACE_NAMES:
        from ..suggest import known_names

        raise ValueError(f"unknown reference trace {name!r}{known_names(name, REFERENCE_TRACE_NAMES, 'reference traces')}")
    file = resolve_data_file(REFERENCE_TRACE_FILE, path)
    expected = f"the reference trace archive (npz arrays {name}_client, {name}_time_s, {name}_state, client)"
    with reading(file, expected), open_npz(file) as z:
        trace = _trace_from_id_rows(
            z[f"{name}_client"],
            z[f"{name}_time_s"],
            z[f"{name}_state"],
            all_ids=z["client"],
            beyond_end=beyond_end,
            path=file,
        )
    return _with_clients(trace, file)


class ReferenceClients(NamedTuple):
    """Per-client settings of the paper's CIFAR-10 runs (the paper's reference settings), index order."""

    client_ids: np.ndarray  # int64 (300,) ids 1..300
    training_delay_s: np.ndarray  # float64 (300,) extra seconds per training task
    num_samples: np.ndarray  # int64 (300,) CIFAR-10 samples (Dirichlet 0.1 split)


def load_reference_clients(path: str | os.PathLike | None = None) -> ReferenceClients:
    """``training_delay_s`` and ``num_samples`` of the reference file's 300 clients."""
    file = resolve_data_file(REFERENCE_TRACE_FILE, path)
    expected = "the reference trace archive (npz arrays client, training_delay_s, num_samples)"
    with reading(file, expected), open_npz(file) as z:
        return ReferenceClients(
            client_ids=z["client"].astype(np.int64),
            training_delay_s=z["training_delay_s"].astype(np.float64),
            num_samples=z["num_samples"].astype(np.int64),
        )


# ------------------------------------------------------------------ FedScale
def load_fedscale_trace(path: str | os.PathLike) -> AvailabilityTrace:
    """FedScale ``client_behave_trace`` (pickle or JSON) -> periodic trace.

    Format (docs/file-formats.md): ``{client_id: {"duration", "active": [t...],
    "inactive": [t...], "finish_time", "model"}}``. FedScale's rule (the paper's reference settings):
    a client is online at ``t`` iff ``active[k] <= t mod finish_time <= inactive[k]``
    for some k. Online maps to ``AVL_TRAIN``, offline to ``UN_AVL``; the trace has
    ``beyond_end="repeat"`` with each client's ``finish_time`` as its period
    (``client_duration_s``). The closed interval end is kept exactly: the client
    goes offline at the next float after ``inactive[k]``. Overlapping intervals are
    merged; ``duration`` and ``model`` are ignored. Pickles are read with
    ``restricted_pickle_load`` (no globals: never runs code); a ``.json`` file with
    the same structure (string keys) is also accepted.
    """
    path = Path(path)
    expected = f"a FedScale client_behave_trace ({'JSON' if path.suffix.lower() == '.json' else 'pickle'})"
    with reading(path, expected):
        if path.suffix.lower() == ".json":
            with open(path) as f:
                data = json.load(f)
        else:
            data = restricted_pickle_load(path)
    if not isinstance(data, dict):
        raise DataFileError(path, f"expected a dict of client_id -> trace, got {type(data).__name__}")
    ids = np.array([_client_id(path, k, f"client key {k!r}") for k in data], dtype=np.int64)
    starts, ends, periods, lengths = [], [], [], []
    for key, rec in data.items():  # parsing: one pass over the file's records
        if not isinstance(rec, dict) or not {"active", "inactive", "finish_time"} <= rec.keys():
            raise DataFileError(path, f"client {key!r} lacks active/inactive/finish_time")
        a, i = rec["active"], rec["inactive"]
        if not isinstance(a, (list, tuple)) or not isinstance(i, (list, tuple)):
            raise DataFileError(path, f"client {key!r}: active and inactive must be lists of times")
        if len(a) != len(i):
            raise DataFileError(path, f"client {key!r} has {len(a)} active but {len(i)} inactive times")
        starts.append(a)
        ends.append(i)
        try:
            periods.append(float(rec["finish_time"]))
        except (TypeError, ValueError):
            raise DataFileError(path, f"client {key!r}: finish_time {rec['finish_time']!r} is not a number") from None
        lengths.append(len(a))
    n = ids.size
    period = np.asarray(periods, dtype=np.float64)
    if np.any(~np.isfinite(period)) or np.any(period <= 0):
        raise DataFileError(path, "finish_time must be positive for every client")
    cid = np.repeat(np.arange(n, dtype=np.int64), lengths)
    try:
        a = np.asarray([x for s in starts for x in s], dtype=np.float64)
        i = np.asarray([x for s in ends for x in s], dtype=np.float64)
        flat = a.ndim == 1 and i.ndim == 1
    except (TypeError, ValueError):  # a nested list, a string that is not a number...
        flat = False
    if not flat:
        _refuse_non_numeric_times(path, list(data), starts, ends)
    if np.isnan(a).any() or np.isnan(i).any():  # NaN compares false: the interval would vanish silently
        raise DataFileError(path, "active/inactive times must be numbers, found NaN")
    ok = a <= i  # an interval with active > inactive is never online
    cid, a, i = cid[ok], np.maximum(a[ok], 0.0), i[ok]
    # Interval union by event counting: +1 at start, -1 just after the closed end.
    ev_c = np.concatenate([cid, cid])
    ev_t = np.concatenate([a, np.nextafter(i, np.inf)])
    ev_d = np.concatenate([np.ones(a.size, np.int64), -np.ones(a.size, np.int64)])
    order = np.lexsort((ev_t, ev_c))
    ev_c, ev_t, ev_d = ev_c[order], ev_t[order], ev_d[order]
    running = np.cumsum(ev_d)
    first = np.ones(ev_c.size, dtype=bool)
    first[1:] = ev_c[1:] != ev_c[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(ev_c.size), 0))
    base = running[group_start] - ev_d[group_start]
    online = (running - base) > 0
    reachable = ev_t < period[ev_c]
    rows_c = np.concatenate([np.arange(n, dtype=np.int64), ev_c[reachable]])
    rows_t = np.concatenate([np.zeros(n), ev_t[reachable]])
    rows_s = np.concatenate(
        [
            np.full(n, int(Tier.UN_AVL), dtype=np.int64),
            np.where(online[reachable], int(Tier.AVL_TRAIN), int(Tier.UN_AVL)),
        ]
    )
    by_id = np.argsort(ids, kind="stable")  # clients in sorted-id order
    trace = _trace_from_id_rows(
        ids[rows_c],
        rows_t,
        rows_s,
        all_ids=ids[by_id],
        duration_s=float(period.max(initial=0.0)),
        beyond_end="repeat",
        client_duration_s=period[by_id],
        path=path,
    )
    return _with_clients(trace, path)


def _refuse_non_numeric_times(path: Path, keys: list, starts: list, ends: list) -> None:
    """Raises a DataFileError naming the first client and field whose times are not plain numbers."""
    for key, a, i in zip(keys, starts, ends):
        for field, values in (("active", a), ("inactive", i)):
            for j, x in enumerate(values):
                try:
                    ok = not isinstance(x, (list, tuple, dict, set)) and np.ndim(x) == 0
                    float(x)
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    raise DataFileError(path, f"client {key!r}: {field}[{j}] is {x!r}, not a number ({field} "
                                              "must be a flat list of times in seconds)")
    raise DataFileError(path, "active/inactive times must be flat lists of numbers")


# ------------------------------------------------------------ interval files
def _parse_states(values) -> np.ndarray:
    return np.array([int(Tier.parse(v)) for v in values], dtype=np.int64)


def save_interval_csv(trace: AvailabilityTrace, path: str | os.PathLike) -> None:
    """Write ``trace`` in the documented CSV interval format (state names)."""
    if trace.client_duration_s is not None:
        raise ValueError("per-client periods (client_duration_s) need the NPZ format")
    ids = trace.external_ids[trace.row_clients]
    names = np.array([t.name for t in Tier])[trace.states]
    with open(path, "w", newline="") as f:
        f.write("# felix-jax availability trace v1\n")
        f.write(f"# duration_s={trace.duration_s!r}\n")
        f.write(f"# beyond_end={trace.beyond_end}\n")
        writer = csv.writer(f)
        writer.writerow(_CSV_COLUMNS)
        writer.writerows(zip(ids.tolist(), map(repr, trace.times.tolist()), names.tolist()))


def load_interval_csv(
    path: str | os.PathLike,
    *,
    duration_s: float | None = None,
    beyond_end: BeyondEnd | None = None,
) -> AvailabilityTrace:
    """Read the CSV interval format; arguments override the file's ``#`` metadata."""
    with reading(path, f"an interval CSV trace (header {','.join(_CSV_COLUMNS)}, one row per state change)"):
        return _with_clients(_read_interval_csv(path, duration_s, beyond_end), path)


def _read_interval_csv(path, duration_s: float | None, beyond_end: BeyondEnd | None) -> AvailabilityTrace:
    meta: dict[str, str] = {}
    with open(path, newline="", encoding="utf-8-sig") as f:  # a spreadsheet's byte-order mark is not a column
        lines, numbers = [], []  # the rows and their line numbers in the file (1-based), for errors
        for number, line in enumerate(f, start=1):
            if line.startswith("#"):
                body = line[1:].strip()
                if "=" in body:
                    k, v = body.split("=", 1)
                    meta[k.strip()] = v.strip()
            elif line.strip():
                lines.append(line)
                numbers.append(number)
    rows = [next(csv.reader([line]), []) for line in lines]  # one row per line: errors name the line
    if not rows:
        raise DataFileError(path, f"no header line {','.join(_CSV_COLUMNS)}")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in _CSV_COLUMNS if c not in header]
    if missing:
        raise DataFileError(path, f"line {numbers[0]}: header {header} lacks columns {missing}"
                                  + _delimiter_hint(lines[0]))
    cols = [header.index(c) for c in _CSV_COLUMNS]
    body, numbers = rows[1:], numbers[1:]
    for number, r in zip(numbers, body):
        if len(r) != len(header):
            raise DataFileError(path, f"line {number}: {len(r)} field{'s' if len(r) != 1 else ''}, but the header "
                                      f"line {','.join(header)} has {len(header)} (a ragged row)")
    ids = np.array([_client_id(path, r[cols[0]], f"line {n}") for n, r in zip(numbers, body)], dtype=np.int64)
    times = np.array([_time(path, r[cols[1]], n) for n, r in zip(numbers, body)], dtype=np.float64)
    states = np.array([_state(path, r[cols[2]], n) for n, r in zip(numbers, body)], dtype=np.int64)
    if duration_s is None and "duration_s" in meta:
        duration_s = float(meta["duration_s"])
    if beyond_end is None:
        beyond_end = meta.get("beyond_end", "hold")  # type: ignore[assignment]
    return _trace_from_id_rows(ids, times, states, duration_s=duration_s, beyond_end=beyond_end, path=path)


def _delimiter_hint(header_line: str) -> str:
    """``"; the line looks ';'-separated ..."`` when the header holds another common delimiter and no
    comma (a spreadsheet's export in a locale that writes decimal commas), else ``""``."""
    if "," in header_line:
        return ""
    for delimiter, name in ((";", "';'"), ("\t", "tab"), ("|", "'|'")):
        if delimiter in header_line:
            return (f"; the line looks {name}-separated: felix-jax reads comma-separated values "
                    f"({','.join(_CSV_COLUMNS)}; export the file with commas)")
    return ""


def _time(path, text: str, line: int) -> float:
    """A row's ``time_s``: a finite number of seconds >= 0, else a DataFileError naming the line."""
    try:
        value = float(text)
    except ValueError:
        raise DataFileError(path, f"line {line}: time_s {text.strip()!r} is not a number of seconds") from None
    if not np.isfinite(value):
        raise DataFileError(path, f"line {line}: time_s {text.strip()!r} is not finite")
    if value < 0:
        raise DataFileError(path, f"line {line}: negative time {value!r} (times must be >= 0 seconds)")
    return value


def _state(path, text: str, line: int) -> int:
    """A row's ``state``: a tier name or code, else a DataFileError naming the line."""
    try:
        return int(Tier.parse(text))
    except ValueError as e:
        raise DataFileError(path, f"line {line}: {e}") from None


_INT64 = np.iinfo(np.int64)


def _client_id(path, text, where) -> int:
    """A client id from a trace file: a whole number >= 0 that fits int64 (the id arrays' type)."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise DataFileError(path, f"{where}: client id {text!r} is not a whole number") from None
    if not _INT64.min <= value <= _INT64.max:
        raise DataFileError(path, f"{where}: client id {value} is beyond the 64-bit integer range "
                                  f"[{_INT64.min}, {_INT64.max}]")
    if value < 0:
        raise negative_id(path, where, value)
    return value


def negative_id(path, where: str, value) -> DataFileError:
    """The error for a negative client id at ``where`` (a line, an array entry, a key). A stray -5
    would sort first and shift every real client by one, so it is refused rather than kept."""
    return DataFileError(path, f"{where}: client id {value} is negative (client ids are whole numbers >= 0)")


def refuse_negative_ids(path, name: str, ids: np.ndarray) -> np.ndarray:
    """``ids`` (an NPZ's integer id array ``name``), unless one is negative: then a DataFileError naming
    the first such entry, ``array name[i]``, and its id."""
    flat = np.ravel(ids)
    negative = np.flatnonzero(flat < 0)
    if negative.size:
        raise negative_id(path, f"array {name}[{negative[0]}]", int(flat[negative[0]]))
    return ids


def save_interval_npz(trace: AvailabilityTrace, path: str | os.PathLike) -> None:
    """Write ``trace`` as NPZ arrays (client ids, time_s, state, metadata)."""
    arrays = dict(
        client=trace.external_ids[trace.row_clients],
        time_s=trace.times,
        state=trace.states,
        duration_s=np.float64(trace.duration_s),
        beyond_end=np.str_(trace.beyond_end),
        clients=trace.external_ids,
    )
    if trace.client_duration_s is not None:
        arrays["client_duration_s"] = trace.client_duration_s
    np.savez(path, **arrays)


def load_interval_npz(
    path: str | os.PathLike,
    prefix: str = "",
    *,
    duration_s: float | None = None,
    beyond_end: BeyondEnd | None = None,
) -> AvailabilityTrace:
    """Read the NPZ interval format (``allow_pickle=False``).

    ``prefix`` selects prefixed columns, e.g. ``prefix="syn_20_"`` reads the
    reference file's ``syn_20_client/_time_s/_state``. The client list is the
    array ``clients`` (or ``client`` when it is not a row column, as in the
    reference file) if present, else the distinct row ids.
    """
    need = [f"{prefix}{c}" for c in _CSV_COLUMNS]
    with reading(path, f"an interval NPZ trace (arrays {', '.join(need)})"):
        return _with_clients(_read_interval_npz(path, need, prefix, duration_s, beyond_end), path)


def _integer_array(path, name: str, values: np.ndarray, what: str) -> np.ndarray:
    """``values`` of an NPZ array that must hold integers: a float or boolean array is refused
    naming the file and the array (it would be cast silently: 1.5 -> 1, True -> 1)."""
    if values.dtype.kind not in "iu":
        raise DataFileError(path, f"array {name} holds {values.dtype} values: {what} must be an integer array")
    if values.dtype.kind == "u" and values.size and values.max() > _INT64.max:  # would wrap to a negative id
        raise DataFileError(path, f"array {name} holds {values.max()}, beyond the 64-bit integer range")
    return values


def _read_interval_npz(path, need: list[str], prefix: str, duration_s: float | None,
                       beyond_end: BeyondEnd | None) -> AvailabilityTrace:
    with open_npz(path) as z:
        keys = set(z.files)
        if not set(need) <= keys:
            raise DataFileError(path, f"missing arrays {sorted(set(need) - keys)}")
        ids, times, states = (z[k] for k in need)
        ids = refuse_negative_ids(path, need[0], _integer_array(path, need[0], ids, "client ids"))
        if states.dtype.kind in "US":
            states = _parse_states(states.tolist())
        else:
            states = _integer_array(path, need[2], states, "states (0 UN_AVL, 1 AVL_EVAL, 2 AVL_TRAIN, or names)")
        list_name = "clients" if "clients" in keys else ("client" if prefix and "client" in keys else None)
        all_ids = None
        if list_name is not None:
            all_ids = refuse_negative_ids(path, list_name, _integer_array(path, list_name, z[list_name], "client ids"))
        if duration_s is None and "duration_s" in keys:
            duration_s = float(z["duration_s"])
        if beyond_end is None:
            beyond_end = str(z["beyond_end"]) if "beyond_end" in keys else "hold"
        client_duration_s = z["client_duration_s"] if "client_duration_s" in keys else None
    return _trace_from_id_rows(
        ids,
        times,
        states,
        all_ids=all_ids,
        duration_s=duration_s,
        beyond_end=beyond_end,
        client_duration_s=client_duration_s,
        path=path,
    )
