"""Resumable runs: snapshot a :class:`~.simulator.FleetSimulator` and restore it (docs/architecture.md "Nothing lost").

A snapshot is taken between two events (a consistent point: no handler is half
done) and holds everything a run depends on: the model, the server optimizer
state, the executor's live model versions, stored deltas, pending (not yet
computed) tasks and computed results, the event queue with its sequence
counter, the tasks, the server view, the mode's buffers, the selectors' states,
the update guard's memory, the host RNG state, accounting, checkpoints and
counters. Device keys need no state: a task's key is ``fold_in(key, task_id)``.
A run restored from a snapshot and run on produces the very same checkpoints,
accounting and final parameters as the uninterrupted run (same backend).

On disk, a snapshot root holds ``LATEST`` (the name of the current snapshot) and
one folder per snapshot::

    snap-000008-000000123/       version 8, 123 events processed
      host.json                  host state (strict JSON) and the scenario fingerprint
      host.npz                   the host state's numpy arrays (no pickle)
      device/                    the device arrays (orbax-checkpoint)

Writing is atomic: a snapshot is written to a temporary folder, renamed into
place, and only then does ``LATEST`` (replaced atomically) point to it; older
snapshots are removed last. A process killed at any moment leaves ``LATEST``
naming a complete snapshot.

The host state is encoded by :func:`encode` / :func:`decode` (tagged JSON):
records (NamedTuples and dataclasses) are rebuilt only from an allow-list of
known types, never by importing names read from the file.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import hashlib
import json
import logging
import math
import os
import re
import shutil
import threading
import time
import warnings
import zipfile
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import jax
import numpy as np

if TYPE_CHECKING:
    from .simulator import FleetSimulator

FORMAT = 5  # 2: a serial server's queue (fleet/reading.py); 3: the event log streamed to events.csv;
# 4: the queue's timers beside its heap, the paged delta store and the engine's call totals (formats 2-3 load);
# 5: the view's availability history (formats 2-4 load: their history starts empty at the restore's time)
READS = (2, 3, 4, 5)  # a format-2 snapshot holds its event log's rows in its accounting (written out on resume)
LATEST = "LATEST"
_HOST_JSON, _HOST_NPZ, _DEVICE = "host.json", "host.npz", "device"
_CHECKSUMS = "CHECKSUMS.json"  # sha256 of every other file of a snapshot, written last


class SnapshotError(ValueError):
    """A snapshot that cannot be restored here (missing, corrupt, or from another scenario)."""


class SnapshotWriteError(SnapshotError):
    """A snapshot that could not be written (a full disk, a quota...); ``kept``: the name of the
    previous snapshot, which stays and resumes the run (None: there is none)."""

    def __init__(self, message: str, kept: str | None = None):
        super().__init__(message)
        self.kept = kept

    def __reduce__(self):
        return type(self), (str(self), self.kept)


@dataclasses.dataclass(frozen=True)
class SnapshotPolicy:
    """When a running simulator writes a snapshot to ``path`` (a folder, created if needed).

    At every multiple of ``every_aggregations`` model versions and/or every
    ``every_minutes`` of host wall-clock time, checked after each event. ``keep`` snapshots are kept
    (the newest: two by default, so that a snapshot damaged on disk still leaves an older good one
    to resume from). ``on_saved`` is called with each new snapshot's folder.

    >>> SnapshotPolicy("run/snapshot", every_aggregations=50).keep
    2
    """

    path: str | Path
    every_aggregations: int | None = None
    every_minutes: float | None = None
    keep: int = 2
    on_saved: Callable[[Path], None] | None = None

    def __post_init__(self):
        if self.every_aggregations is None and self.every_minutes is None:
            raise ValueError("snapshot policy: give every_aggregations and/or every_minutes")
        n = self.every_aggregations
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"snapshot policy: every_aggregations must be an integer >= 1, got {n!r}")
        m = self.every_minutes
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0
                              or not math.isfinite(m)):
            raise ValueError(f"snapshot policy: every_minutes must be a number > 0, got {m!r}")
        if isinstance(self.keep, bool) or not isinstance(self.keep, int) or self.keep < 1:
            raise ValueError(f"snapshot policy: keep must be an integer >= 1, got {self.keep!r}")


# --------------------------------------------------------------------- host codec
def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_record(v) -> bool:
    return (isinstance(v, tuple) and hasattr(type(v), "_fields")) or (
        dataclasses.is_dataclass(v) and not isinstance(v, type))


def _record_fields(v) -> dict:
    if isinstance(v, tuple):
        return dict(zip(v._fields, v))
    return {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}


def record_types(*templates) -> dict[str, type]:
    """Every record and enum type inside ``templates`` (walked recursively), by name."""
    found: dict[str, type] = {}

    def walk(v):
        if isinstance(v, enum.Enum):
            found[_type_name(type(v))] = type(v)
        elif _is_record(v):
            found[_type_name(type(v))] = type(v)
            for x in _record_fields(v).values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for t in templates:
        walk(t)
    return found


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


class _Encoder:
    """Host values -> strict JSON; numpy arrays and long numeric lists go to ``arrays`` (an NPZ),
    device arrays to ``device`` (orbax)."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self.device: dict[str, jax.Array] = {}

    def _array(self, a: np.ndarray) -> str:
        if a.dtype.hasobject:
            raise TypeError("snapshot: object arrays cannot be stored without pickle")
        name = f"a{len(self.arrays)}"
        self.arrays[name] = a
        return name

    def encode(self, v) -> Any:
        t = type(v)
        if v is None or t is bool or t is str:
            return v
        if t is int:
            return v
        if t is float:
            return v if math.isfinite(v) else {"$float": repr(v)}
        if isinstance(v, enum.Enum):
            return {"$enum": _type_name(t), "value": self.encode(v.value)}
        if isinstance(v, jax.Array):
            name = f"d{len(self.device)}"
            self.device[name] = v
            return {"$device": name}
        if isinstance(v, np.ndarray):
            return {"$array": self._array(v)}
        if isinstance(v, np.generic):  # exact bits and type of a numpy scalar
            return {"$scalar": v.dtype.str, "hex": v.tobytes().hex()}
        if _is_record(v):
            return {"$record": _type_name(t), "fields": {k: self.encode(x) for k, x in _record_fields(v).items()}}
        if t is tuple:
            return {"$tuple": [self.encode(x) for x in v]}
        if t is dict:
            if all(type(k) is str and not k.startswith("$") for k in v):  # a plain JSON object
                return {k: self.encode(x) for k, x in v.items()}
            return {"$dict": [[self.encode(k), self.encode(x)] for k, x in v.items()]}
        if t is list:
            return self._encode_list(v)
        if t is array and v.typecode in ("d", "q"):  # a typed column (Accounting's): decoded as a list
            return {"$floats" if v.typecode == "d" else "$ints": self._array(np.array(v, np.float64 if v.typecode == "d"
                                                                                   else np.int64))}
        raise TypeError(f"snapshot: cannot store a {_type_name(t)}")

    def _encode_list(self, v: list):
        if len(v) >= 8:  # long homogeneous lists as arrays / columns: compact and fast
            kinds = {type(x) for x in v}
            if kinds == {float}:
                return {"$floats": self._array(np.array(v, np.float64))}
            if kinds == {int} and _INT64[0] <= min(v) and max(v) <= _INT64[1]:
                return {"$ints": self._array(np.array(v, np.int64))}
            if kinds == {str} and not any(x.endswith("\0") for x in v):  # numpy strips trailing NULs
                return {"$strs": self._array(np.array(v, np.str_))}
            if len(kinds) == 1 and (kinds == {tuple} or _is_record(v[0])):
                cls = kinds.pop()
                width = {len(x) for x in v} if cls is tuple else {len(_record_fields(v[0]))}
                if len(width) == 1 and width != {0}:
                    rows = [x if cls is tuple else tuple(_record_fields(x).values()) for x in v]
                    columns = [self._encode_list(list(c)) for c in zip(*rows)]
                    return {"$table": "tuple" if cls is tuple else _type_name(cls),
                            "fields": None if cls is tuple else list(_record_fields(v[0])), "columns": columns}
        return [self.encode(x) for x in v]


class _Decoder:
    def __init__(self, arrays, device: dict, types: dict[str, type]):
        self.arrays, self.device, self.types = arrays, device, types

    def _type(self, name: str) -> type:
        try:
            return self.types[name]
        except KeyError:
            raise SnapshotError(f"snapshot holds a {name}, which this simulator does not use") from None

    def decode(self, v) -> Any:
        if isinstance(v, list):
            return [self.decode(x) for x in v]
        if not isinstance(v, dict):
            return v
        if not any(k.startswith("$") for k in v):
            return {k: self.decode(x) for k, x in v.items()}
        if "$float" in v:
            return float(v["$float"])
        if "$enum" in v:
            return self._type(v["$enum"])(self.decode(v["value"]))
        if "$device" in v:
            return self.device[v["$device"]]
        if "$array" in v:
            return np.array(self.arrays[v["$array"]])
        if "$scalar" in v:
            return np.frombuffer(bytes.fromhex(v["hex"]), np.dtype(v["$scalar"]))[0]
        if "$record" in v:
            return self._type(v["$record"])(**{k: self.decode(x) for k, x in v["fields"].items()})
        if "$tuple" in v:
            return tuple(self.decode(x) for x in v["$tuple"])
        if "$dict" in v:
            return {self.decode(k): self.decode(x) for k, x in v["$dict"]}
        for tag in ("$floats", "$ints", "$strs"):
            if tag in v:
                return self.arrays[v[tag]].tolist()
        if "$table" in v:
            columns = [self.decode(c) for c in v["columns"]]
            if v["$table"] == "tuple":
                return [tuple(row) for row in zip(*columns)]
            cls = self._type(v["$table"])
            return [cls(**dict(zip(v["fields"], row))) for row in zip(*columns)]
        raise SnapshotError(f"snapshot: unknown entry {sorted(v)[:3]}")


def encode(value) -> tuple[Any, dict[str, np.ndarray], dict[str, jax.Array]]:
    """``value`` as strict JSON plus its numpy arrays (for an NPZ) and device arrays (for orbax)."""
    enc = _Encoder()
    return enc.encode(value), enc.arrays, enc.device


def decode(tree, arrays, device: dict, types: dict[str, type]):
    """Inverse of :func:`encode`; records and enums are rebuilt only from ``types`` (see :func:`record_types`)."""
    return _Decoder(arrays, device, types).decode(tree)


# ------------------------------------------------------------------ fingerprint
def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(np.ascontiguousarray(p).tobytes() if isinstance(p, np.ndarray) else repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def fingerprint(sim: "FleetSimulator") -> dict[str, str]:
    """What makes two simulators the same run, one digest per part (a snapshot restores only into its own)."""
    tr, pr, eng = sim.trace, sim.profile, sim.engine
    return {
        "fleet config": _digest(sim.cfg),
        "stop rule": _digest(sim.stop),
        "update guard": _digest(sim.update_guard),
        "policies": _digest(sim.selector.name, sim.eval_selector.name if sim.eval_selector else None,
                            sim.eval_budget, sim.aggregator.name, sim.aggregator.normalize, sim.mode.name),
        "model": _digest(sim.model.name, sim.model.num_params, sim.model.bytes_on_wire),
        "local training": _digest(eng.train_cfg, eng.eval_cfg),
        "seed": _digest(sim.seed, np.asarray(jax.random.key_data(eng.base_key))),
        "data": _digest(np.asarray(eng.counts), tuple(sim.test.y.shape)),
        "trace": _digest(*tr.digest_parts()),
        "device profile": _digest(pr.train_delay_s, pr.compute_speed, pr.down_kbps, pr.up_kbps,
                                  pr.nominal_ms_per_sample, pr.eval_cost_fraction, pr.eval_upload_bytes),
    }


# ------------------------------------------------------------------ state
def _state(sim: "FleetSimulator") -> dict:
    return {
        "clock": {"now": sim.now, "version": sim.version, "next_task_id": sim._next_task_id,
                  "evals_this_round": sim._evals_this_round, "last_notify_t": sim._last_notify_t,
                  "events": sim._events, "time_to_target": sim._time_to_target,
                  "test_eval_calls": sim._test_eval_calls},
        "server": {"queue": list(sim._server_queue), "serving": sim._serving, "free_at": sim._server_free_at},
        "params": sim.params,
        "server_opt_state": sim.server_opt_state,
        "rng": sim.rng.bit_generator.state,
        "queue": sim.queue.state_dict(),
        "tasks": sim.tasks,
        "view": sim.view,
        "mode": sim.mode.state_dict(),
        "selector": sim._sel_state,
        "eval_selector": sim._eval_sel_state,
        "guard": {"norms": sim._guard_norms, "empty_buffers": sim._guard_empty_buffers},
        # the aggregation in progress folded in as its updates arrived (running_sum.py); None: gathered at the end
        "running_sum": None if sim._running is None else sim._running.state_dict(),
        "executor": sim.executor.state_dict(),
        "accounting": sim.acct,
        # the streamed events.csv: its length and last line, and the rows held for later (event_stream.py)
        "event_log": None if sim.event_stream is None else sim.event_stream.state_dict(sim.now),
        "utility_by_eval": sim._utility_by_eval,
        "client_free_at": sim._client_free_at,
        "checkpoints": sim.checkpoints,
        "aggregation_times": sim.aggregation_times,
        "accuracies": sim._accuracies,
        "test_hits": sim.test_hits,
        "cohort_calls": sim.engine.records.state_dict(),
    }


def _known_types(sim: "FleetSimulator") -> dict[str, type]:
    from ..cohort import LossStats
    from ..cohort.call_log import CallRecord
    from .accounting import Accounting
    from .clientmap import ClientMap
    from .events import Event, EventKind
    from .executor import EvalOutcome, TrainOutcome, _Pending
    from .lifecycle import Timeline
    from .records import Checkpoint, Update
    from .running_sum import Arrived
    from .tasks import Task

    fixed = [Accounting, Arrived, CallRecord, Checkpoint, ClientMap, EvalOutcome, Event, EventKind, LossStats, Task,
             Timeline, TrainOutcome, Update, _Pending]
    types = {_type_name(t): t for t in fixed}
    # snapshots written before the records had a module of their own name them by the simulator's
    types.update({f"felix_jax.fleet.simulator.{t.__qualname__}": t for t in (Checkpoint, Update)})
    types["felix_jax.cohort.engine.CallRecord"] = CallRecord  # before the call log had a module of its own
    # selector and optimizer states: whatever types this simulator's own fresh states are made of
    types.update(record_types(sim.server_opt_state, sim._sel_state, sim._eval_sel_state))
    return types


def _apply(sim: "FleetSimulator", s: dict, fmt: int = FORMAT) -> None:
    def same_tree(name, saved, current):
        a, b = jax.tree_util.tree_structure(saved), jax.tree_util.tree_structure(current)
        if a != b:
            raise SnapshotError(f"snapshot's {name} has structure {a}, this simulator's {b}")

    same_tree("model", s["params"], sim.params)
    same_tree("server optimizer state", s["server_opt_state"], sim.server_opt_state)
    if s["rng"].get("bit_generator") != sim.rng.bit_generator.state.get("bit_generator"):
        raise SnapshotError(f"snapshot's RNG is {s['rng'].get('bit_generator')}, this simulator's "
                            f"{sim.rng.bit_generator.state.get('bit_generator')}")
    c = s["clock"]
    sim.now, sim.version, sim._next_task_id = c["now"], c["version"], c["next_task_id"]
    sim._evals_this_round, sim._last_notify_t = c["evals_this_round"], c["last_notify_t"]
    sim._events, sim._time_to_target = c["events"], c["time_to_target"]
    sim._test_eval_calls = c["test_eval_calls"]  # the whole run's, not only the resumed part
    server = s["server"]
    sim._server_queue = [int(t) for t in server["queue"]]
    sim._serving, sim._server_free_at = bool(server["serving"]), float(server["free_at"])
    sim.params, sim.server_opt_state = s["params"], s["server_opt_state"]
    sim.rng.bit_generator.state = s["rng"]
    sim.queue.load_state_dict(s["queue"])
    sim.tasks = s["tasks"]
    sim.view = s["view"]
    if fmt < 5:  # written before the view kept availability history: it starts now, empty
        sim.view.start_history(sim.now)
    sim.mode.load_state_dict(s["mode"])
    sim._sel_state, sim._eval_sel_state = s["selector"], s["eval_selector"]
    sim._guard_norms, sim._guard_empty_buffers = s["guard"]["norms"], s["guard"]["empty_buffers"]
    sim.executor.load_state_dict(s["executor"])
    if sim._running is not None and s.get("running_sum") is not None:
        sim._running.load_state_dict(s["running_sum"])
    sim.acct = s["accounting"]
    sim._restored_event_log = s.get("event_log")  # resumed by stream_events (None: rows in acct.events)
    sim._utility_by_eval = np.asarray(s["utility_by_eval"], bool).copy()
    if "client_free_at" in s:  # a snapshot written before queued sync tasks existed has none (all zeros)
        sim._client_free_at = np.asarray(s["client_free_at"], np.float64).copy()
    sim.checkpoints, sim.aggregation_times, sim._accuracies = s["checkpoints"], s["aggregation_times"], s["accuracies"]
    sim.engine.records.load_state_dict(s["cohort_calls"])  # an older snapshot's list of records too
    # a snapshot written before test_hits existed holds none (its run kept none)
    sim.test_hits = [np.asarray(h, np.uint8) for h in s.get("test_hits", [])]


# ------------------------------------------------------------------ disk
def _device_checkpointer():
    import orbax.checkpoint as ocp

    return ocp, ocp.Checkpointer(ocp.StandardCheckpointHandler())


def _write_json(path: Path, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, allow_nan=False, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())


def _publish(root: Path, tmp: Path, name: str) -> Path:
    """Moves a complete snapshot into place and points ``LATEST`` at it (both renames are atomic)."""
    final = root / name
    os.rename(tmp, final)
    pointer = root / f".{LATEST}.tmp"
    with open(pointer, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(pointer, root / LATEST)
    _fsync_dir(root)
    return final


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _checksums(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (but the checksum file), by path relative to it."""
    return {p.relative_to(folder).as_posix(): _sha256(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != _CHECKSUMS}


def verify_snapshot(snap: Path) -> None:
    """Raises :class:`SnapshotError` naming the first file of snapshot folder ``snap`` that is
    missing, unexpected or whose bytes differ from the checksums written with it."""
    try:
        expected = json.loads((snap / _CHECKSUMS).read_text())
    except FileNotFoundError:
        raise SnapshotError(f"snapshot {snap} has no {_CHECKSUMS} (incomplete, or written by an older "
                            "felix-jax): it cannot be verified") from None
    except (OSError, ValueError) as e:
        raise SnapshotError(f"snapshot {snap / _CHECKSUMS} is unreadable: {e}") from None
    found = {p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file() and p.name != _CHECKSUMS}
    for rel in sorted(set(expected) | found):
        if rel not in found:
            raise SnapshotError(f"snapshot {snap}: file {rel} is missing")
        if rel not in expected:
            raise SnapshotError(f"snapshot {snap}: file {rel} was not part of the snapshot as written")
        if _sha256(snap / rel) != expected[rel]:
            raise SnapshotError(f"snapshot {snap}: file {rel} is corrupted (its checksum differs from the one "
                                "written with it)")


def save_snapshot(sim: "FleetSimulator", path: str | Path, keep: int = 2) -> Path:
    """Writes ``sim``'s state under the snapshot root ``path``; returns the new snapshot's folder.

    Call it between events only (the simulator does, under its :class:`SnapshotPolicy`).
    """
    root = Path(path).resolve()
    root.mkdir(parents=True, exist_ok=True)
    name = f"snap-{sim.version:06d}-{sim._events:09d}"
    if (root / name).exists():  # the same point again (a resumed run re-ran it): a fresh name, never overwrite
        name += f"-{sum(1 for _ in root.glob(name + '*'))}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        tree, arrays, device = encode(_state(sim))
        manifest = {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in device.items()}
        _write_json(tmp / _HOST_JSON, {"format": FORMAT, "fingerprint": fingerprint(sim), "version": sim.version,
                                       "time_s": sim.now, "device": manifest, "state": tree})
        with open(tmp / _HOST_NPZ, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        if device:
            _save_device(tmp / _DEVICE, device)
        _write_json(tmp / _CHECKSUMS, _checksums(tmp))  # last: a snapshot without it is incomplete
        final = _publish(root, tmp, name)
    except OSError as e:  # a full disk, a quota, a folder gone read-only: the previous snapshot stays
        raise _write_failed(root, tmp, name, e) from None
    _prune(root, keep)
    return final


def _write_failed(root: Path, tmp: Path, name: str, e: OSError) -> SnapshotWriteError:
    """Removes what a failed snapshot write left (the temporary folder, a published folder that ``LATEST``
    does not name, the pointer's temporary file) and says why in one line, naming the snapshot kept."""
    latest = (root / LATEST).read_text().strip() if (root / LATEST).is_file() else None
    shutil.rmtree(tmp, ignore_errors=True)
    if latest != name:
        shutil.rmtree(root / name, ignore_errors=True)
    (root / f".{LATEST}.tmp").unlink(missing_ok=True)
    file = e.filename or tmp
    if e.errno == errno.ENOSPC:
        why = f"the disk is full (the file system at {_mount_point(root)}, writing {file})"
    else:
        why = f"{e.strerror or e} ({file})"
    kept = f"the previous snapshot {latest} is kept" if latest else "no earlier snapshot to keep"
    return SnapshotWriteError(f"cannot write snapshot {name} under {root}: {why}; {kept}", latest)


def _mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (what a user frees space on)."""
    p = Path(path).resolve()
    while not os.path.ismount(p) and p.parent != p:
        p = p.parent
    return p


# ------------------------------------------------------------------ orbax's writes
class _HeldBackThreadErrors(logging.Filter):
    """Drops orbax's log records of its background threads' exceptions (a stack each, printed as they
    happen): the save that they belong to raises that error itself, once, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and "orbax" in Path(record.pathname).parts)


def _save_device(path: Path, device: dict) -> None:
    """The device arrays to ``path`` with orbax-checkpoint, whose writes run in background threads.

    A disk without room for them is refused before orbax starts (:func:`_check_room`): once one of
    its concurrent writes has failed, the others still finish later and report into a closed event
    loop, at any time up to the process's exit. A write that fails all the same (the disk filled
    meanwhile) is raised here as an OSError naming the file, with the threads' own stack logs held
    back, once the threads the save started have ended."""
    _check_room(path, sum(int(a.nbytes) for a in device.values()))
    ocp, ckpt = _device_checkpointer()
    before = set(threading.enumerate())
    held = _HeldBackThreadErrors()
    logger = logging.getLogger("absl")  # orbax logs through absl's logger
    logger.addFilter(held)
    try:
        with ckpt:
            ckpt.save(Path(path).absolute(), args=ocp.args.StandardSave(device))  # orbax takes absolute paths only
    except OSError:
        _join_threads_since(before)
        raise
    except Exception as e:  # orbax raises a ValueError with tensorstore's message (the OS error code in it)
        _join_threads_since(before)
        raise _as_os_error(e, path) from e
    finally:
        logger.removeFilter(held)


ROOM_MARGIN_BYTES = 1 << 20  # orbax's metadata beside the arrays' bytes, and some slack
OCDBT_FILE_BYTES = 2 << 30  # tensorstore's OCDBT data files grow to 2 GiB (its target_data_file_size)


def _check_room(path: Path, need: int) -> None:
    """An OSError naming ``path`` when ``need`` bytes (the arrays') cannot be written there: fewer free
    bytes on its disk than that and :data:`ROOM_MARGIN_BYTES` (ENOSPC), or a limit on a file's size
    (``ulimit -f``) under the data file they make (EFBIG)."""
    free = shutil.disk_usage(path.parent).free
    if free < need + ROOM_MARGIN_BYTES:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{path}: the arrays take {need:,} bytes, "
                      f"{free:,} are free")
    limit = _file_size_limit()
    if limit is not None and min(need, OCDBT_FILE_BYTES) > limit:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), f"{path}: the arrays take {need:,} bytes, over this "
                      f"process's limit of {limit:,} bytes a file (ulimit -f)")


def _file_size_limit() -> int | None:
    """This process's limit on the size of a file it writes (RLIMIT_FSIZE), None if none."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _join_threads_since(before: set, timeout_s: float = 60.0) -> None:
    """Waits (up to ``timeout_s`` in all) for the threads started since ``before`` to end."""
    deadline = time.monotonic() + timeout_s
    for t in threading.enumerate():
        if t not in before and t is not threading.current_thread():
            t.join(max(deadline - time.monotonic(), 0.0))


def _as_os_error(e: Exception, path: Path) -> OSError:
    """orbax's (tensorstore's) error for a failed write as the OSError it reports: its
    ``os_error_code`` and the file named in ``Failed writing: "..."``."""
    text = str(e)
    code = re.search(r"os_error_code='?(\d+)", text)
    where = re.search(r'Failed writing: "([^"]+)"', text)
    number = int(code.group(1)) if code else (errno.ENOSPC if "No space left" in text else None)
    first = (text.strip().splitlines() or [type(e).__name__])[0]
    return OSError(number if number is not None else errno.EIO, os.strerror(number) if number else first,
                   where.group(1) if where else str(path))


def _prune(root: Path, keep: int) -> None:
    """Removes snapshots older than the newest ``keep`` and leftovers of interrupted writes."""
    latest = (root / LATEST).read_text().strip()
    snaps = sorted((p for p in root.glob("snap-*") if p.is_dir()), key=lambda p: p.stat().st_mtime_ns)
    old = [p for p in snaps if p.name != latest][: max(len(snaps) - keep, 0)]
    for p in old + [p for p in root.glob(".tmp-snap-*") if p.is_dir()]:
        shutil.rmtree(p, ignore_errors=True)


def snapshot_dir(path: str | Path) -> Path:
    """The snapshot folder ``path`` names: a snapshot root (its ``LATEST``) or one snapshot folder."""
    p = Path(path)
    if (p / _HOST_JSON).is_file():
        return p
    pointer = p / LATEST
    if not pointer.is_file():
        raise SnapshotError(f"no snapshot in {p} (no {LATEST} file and no {_HOST_JSON})")
    snap = p / pointer.read_text().strip()
    if not (snap / _HOST_JSON).is_file():
        raise SnapshotError(f"snapshot {snap} named by {pointer} is missing or incomplete")
    return snap


def load_snapshot(sim: "FleetSimulator", path: str | Path) -> Path:
    """Restores ``sim`` (freshly built from the same scenario) from a snapshot; returns its folder.

    Raises :class:`SnapshotError` (a ValueError, one line) if the snapshot is
    missing or corrupt, or was written by a simulator of another scenario.
    """
    p = Path(path)
    if (p / _HOST_JSON).is_file():  # one snapshot folder, named by the caller: it or nothing
        verify_snapshot(p)
        return _load_verified(sim, p)
    snap = snapshot_dir(p)
    candidates = [snap] + sorted((q for q in p.glob("snap-*") if q.is_dir() and q != snap),
                                 key=lambda q: q.name, reverse=True)  # names sort by (version, events)
    failures = []
    for q in candidates:
        try:
            verify_snapshot(q)
        except SnapshotError as e:
            failures.append(str(e))
            continue
        if failures:
            warnings.warn(f"{failures[0]}; resuming from the older snapshot {q.name}", stacklevel=2)
        return _load_verified(sim, q)
    raise SnapshotError(failures[0] + ("" if len(failures) == 1 else
                                       f" (and {len(failures) - 1} older snapshot(s) failed too)"))


def _load_verified(sim: "FleetSimulator", snap: Path) -> Path:
    try:
        head = json.loads((snap / _HOST_JSON).read_text())
    except (OSError, ValueError) as e:
        raise SnapshotError(f"snapshot {snap / _HOST_JSON} is unreadable: {e}") from None
    if head.get("format") not in READS:
        raise SnapshotError(f"snapshot {snap} has format {head.get('format')!r}; this felix-jax reads "
                            f"{' and '.join(map(str, READS))}")
    mine = fingerprint(sim)
    differs = [k for k in mine if head["fingerprint"].get(k) != mine[k]]
    if differs:
        raise SnapshotError(f"snapshot {snap} was written by another scenario (its {', '.join(differs)} "
                            f"differ{'s' if len(differs) == 1 else ''}); restore it into a simulator built from "
                            f"the scenario that wrote it")
    device = {}
    if head["device"]:
        ocp, ckpt = _device_checkpointer()
        placement = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        abstract = {k: jax.ShapeDtypeStruct(tuple(m["shape"]), jax.numpy.dtype(m["dtype"]), sharding=placement)
                    for k, m in head["device"].items()}
        try:
            with ckpt:
                # orbax takes absolute paths only (a relative --resume folder is the user's right)
                device = ckpt.restore((snap / _DEVICE).absolute(), args=ocp.args.StandardRestore(abstract))
        except Exception as e:  # orbax raises many kinds; one line names the folder
            raise SnapshotError(f"snapshot {snap / _DEVICE} is unreadable: {type(e).__name__}: {e}") from None
    try:
        with np.load(snap / _HOST_NPZ, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise SnapshotError(f"snapshot {snap / _HOST_NPZ} is unreadable: {e}") from None
    _apply(sim, decode(head["state"], arrays, device, _known_types(sim)), head["format"])
    return snap
