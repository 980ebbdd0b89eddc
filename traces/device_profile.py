"""Per-client device speed and bandwidth (docs/architecture.md layers 2-3).

A task's duration is download + compute + upload (docs/architecture.md, "Fleet clock"):

* compute (training) = ``train_delay_s[c]`` (a fixed extra delay per task, the
  paper's emulation, Sec. 5 "Testbed hardware and runtime emulation")
  + ``num_samples * nominal_ms_per_sample / 1000 / compute_speed[c]``;
* an eval task is a forward pass costing ``eval_cost_fraction`` (1/20) of that
  compute (paper Sec. 3.3: "up to 20x faster"; the paper's reference settings) and uploads only a
  small loss-statistics message (``eval_upload_bytes``, 64 bytes);
* transfers take ``bytes * 8 / (1000 * kbps)`` seconds (kbps = kilobits per
  second, FedScale's unit); ``inf`` bandwidth means no communication time, the
  paper's default (its delays already include the network).

Producers: ``paper_halfnormal`` (synthetic, like the paper's delays),
``reference_profile`` (the paper's exact per-client delays), ``flash_profile``
(FLASH's AI-Benchmark scores and measured bandwidths). ``fedscale_task_time_s``
is FedScale's own time model, for comparison.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from .data_paths import DataFileError, open_npz, reading, resolve_data_file
from .loaders import load_reference_clients, negative_id, refuse_negative_ids

FLASH_SCORES_FILE = "traces/flash_benchmark2score.json"
FLASH_RAW_SCORES_FILE = "traces/flash_raw_ai_benchmark_list.json"
FLASH_SPEED_FILE = "traces/flash_speed_distri.json"
# kilobytes (FLASH's KB/s, taken as 1000 bytes) -> kilobits
_KBYTES_TO_KBITS = 8.0


def _per_client(name: str, value, n: int | None = None) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if n is not None:
        arr = np.broadcast_to(arr, (n,)).copy()
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per client), got shape {arr.shape}")
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceProfile:
    """Per-client device capabilities (struct of arrays, N clients).

    Attributes:
      train_delay_s: float64 (N,) fixed extra seconds per training task (>= 0).
      compute_speed: float64 (N,) relative speed, 1.0 = nominal (> 0).
      down_kbps: float64 (N,) download bandwidth, kilobits/s (``inf``: instant).
      up_kbps: float64 (N,) upload bandwidth, kilobits/s (``inf``: instant).
      nominal_ms_per_sample: training cost of one sample on a nominal device
        (0: compute time is just ``train_delay_s``, as in the paper).
      eval_cost_fraction: eval compute / training compute (paper: 1/20).
      eval_upload_bytes: bytes an eval reply uploads (loss statistics).
      client_ids: optional int64 (N,) the file's client ids when they are not the
        indices 0..N-1 (a profile file numbered 1..N), for messages naming them.
    """

    train_delay_s: np.ndarray
    compute_speed: np.ndarray
    down_kbps: np.ndarray
    up_kbps: np.ndarray
    nominal_ms_per_sample: float = 0.0
    eval_cost_fraction: float = 1.0 / 20.0
    eval_upload_bytes: int = 64
    client_ids: np.ndarray | None = None

    def __post_init__(self):
        n = None
        for name in ("train_delay_s", "compute_speed", "down_kbps", "up_kbps"):
            arr = _per_client(name, getattr(self, name))
            if n is None:
                n = arr.shape[0]
            elif arr.shape[0] != n:
                raise ValueError(f"ragged input: {name} has {arr.shape[0]} clients, expected {n}")
            if np.any(np.isnan(arr)):
                raise ValueError(f"{name} must not contain NaN")
            object.__setattr__(self, name, arr)
        if not np.all(np.isfinite(self.train_delay_s)) or np.any(self.train_delay_s < 0):
            raise ValueError("train_delay_s must be finite and >= 0")
        if not np.all(np.isfinite(self.compute_speed)) or np.any(self.compute_speed <= 0):
            raise ValueError("compute_speed must be finite and > 0")
        if np.any(self.down_kbps <= 0) or np.any(self.up_kbps <= 0):
            raise ValueError("bandwidths must be > 0 (use inf for no transfer time)")
        if self.nominal_ms_per_sample < 0 or not 0 <= self.eval_cost_fraction <= 1:
            raise ValueError("nominal_ms_per_sample must be >= 0, eval_cost_fraction in [0, 1]")
        if self.eval_upload_bytes < 0:
            raise ValueError("eval_upload_bytes must be >= 0")
        if self.client_ids is not None:
            ids = np.asarray(self.client_ids, dtype=np.int64)
            if ids.shape != (n,):
                raise ValueError(f"client_ids must hold one id per client ({n}), got shape {ids.shape}")
            object.__setattr__(self, "client_ids", ids)

    @classmethod
    def uniform(
        cls,
        num_clients: int,
        train_delay_s: float = 0.0,
        compute_speed: float = 1.0,
        down_kbps: float = np.inf,
        up_kbps: float = np.inf,
        **kwargs,
    ) -> "DeviceProfile":
        """Identical clients (scalars broadcast to ``num_clients``)."""
        n = num_clients
        return cls(
            train_delay_s=_per_client("train_delay_s", train_delay_s, n),
            compute_speed=_per_client("compute_speed", compute_speed, n),
            down_kbps=_per_client("down_kbps", down_kbps, n),
            up_kbps=_per_client("up_kbps", up_kbps, n),
            **kwargs,
        )

    @property
    def num_clients(self) -> int:
        return int(self.train_delay_s.shape[0])

    @property
    def external_ids(self) -> np.ndarray:
        """int64 (N,) client ids (``client_ids`` or the indices)."""
        return np.arange(self.num_clients, dtype=np.int64) if self.client_ids is None else self.client_ids

    def _c(self, clients) -> np.ndarray | slice:
        if clients is None:
            return slice(None)
        c = np.asarray(clients)
        if not np.issubdtype(c.dtype, np.integer):
            raise ValueError(f"clients must be integer indices, got dtype {c.dtype}")
        if c.size and (c.min() < 0 or c.max() >= self.num_clients):
            raise ValueError(f"client indices must lie in [0, {self.num_clients})")
        return c

    # --------------------------------------------------- duration components
    def download_s(self, clients, num_bytes) -> np.ndarray:
        """Seconds to download ``num_bytes`` (scalar or per-task array)."""
        return np.asarray(num_bytes, np.float64) * 8.0 / (1000.0 * self.down_kbps[self._c(clients)])

    def upload_s(self, clients, num_bytes) -> np.ndarray:
        """Seconds to upload ``num_bytes`` (scalar or per-task array)."""
        return np.asarray(num_bytes, np.float64) * 8.0 / (1000.0 * self.up_kbps[self._c(clients)])

    def train_compute_s(self, clients, num_samples_processed) -> np.ndarray:
        """Local training compute: fixed delay + per-sample cost / speed."""
        c = self._c(clients)
        per_sample = self.nominal_ms_per_sample / 1000.0 / self.compute_speed[c]
        return self.train_delay_s[c] + np.asarray(num_samples_processed, np.float64) * per_sample

    def eval_compute_s(self, clients, num_samples_evaluated=0) -> np.ndarray:
        """Forward-pass compute: ``eval_cost_fraction`` of the training compute."""
        return self.eval_cost_fraction * self.train_compute_s(clients, num_samples_evaluated)

    # ---------------------------------------------------------------- totals
    def train_duration_s(
        self, clients, model_bytes, num_samples_processed, upload_bytes=None
    ) -> np.ndarray:
        """Training task: download model + compute + upload update (model size
        unless ``upload_bytes`` is given, e.g. for compressed updates)."""
        up = model_bytes if upload_bytes is None else upload_bytes
        return (
            self.download_s(clients, model_bytes)
            + self.train_compute_s(clients, num_samples_processed)
            + self.upload_s(clients, up)
        )

    def eval_duration_s(self, clients, model_bytes, num_samples_evaluated=0) -> np.ndarray:
        """Eval task: download model + forward pass + upload loss statistics."""
        return (
            self.download_s(clients, model_bytes)
            + self.eval_compute_s(clients, num_samples_evaluated)
            + self.upload_s(clients, self.eval_upload_bytes)
        )

    def restrict(self, clients) -> "DeviceProfile":
        """Profile of a subset of clients, in the given order (a client taken twice loses its id, as
        in :meth:`AvailabilityTrace.restrict`: ids name distinct clients)."""
        c = self._c(clients)
        ids = None if self.client_ids is None else self.client_ids[c]
        return dataclasses.replace(
            self,
            train_delay_s=self.train_delay_s[c],
            compute_speed=self.compute_speed[c],
            down_kbps=self.down_kbps[c],
            up_kbps=self.up_kbps[c],
            client_ids=None if ids is None or np.unique(ids).size < ids.size else ids,
        )


# ------------------------------------------------------------------ producers
def paper_halfnormal(
    num_clients: int,
    seed=0,
    *,
    scale_s: float = 14.0,
    min_s: float = 2.0,
    max_s: float = 60.0,
    round_to_s: float = 1.0,
    down_kbps: float = np.inf,
    up_kbps: float = np.inf,
) -> DeviceProfile:
    """Per-task delays like the paper's (the paper's reference settings: "half-normal scaled to
    0-60 s"; the reference delays span 2-56 s, median 10, mean 12.1).

    Draws ``|Normal(0, scale_s)|``, rounds to ``round_to_s`` and redraws values
    outside ``[min_s, max_s]``. ``scale_s = 14`` was fitted to the reference file:
    it gives median 10, mean 12.1, P10 3, P90 24 (reference: 10, 12.1, 3, 23).
    Bandwidth is infinite by default (the delays already include the network).
    """
    rng = np.random.default_rng(seed)
    delay = np.empty(num_clients)
    todo = np.arange(num_clients)
    while todo.size:  # rejection rounds (each vectorized); ~7% redrawn per round
        x = np.abs(rng.normal(0.0, scale_s, size=todo.size))
        if round_to_s:
            x = np.round(x / round_to_s) * round_to_s
        ok = (x >= min_s) & (x <= max_s)
        delay[todo[ok]] = x[ok]
        todo = todo[~ok]
    return DeviceProfile(
        train_delay_s=delay,
        compute_speed=np.ones(num_clients),
        down_kbps=np.full(num_clients, down_kbps, dtype=np.float64),
        up_kbps=np.full(num_clients, up_kbps, dtype=np.float64),
    )


def reference_profile(path: str | os.PathLike | None = None) -> DeviceProfile:
    """The paper's exact per-client delays (``training_delay_s`` of the shared
    reference file, client ids 1..300 -> indices 0..299), infinite bandwidth."""
    ref = load_reference_clients(path)
    return DeviceProfile(
        train_delay_s=ref.training_delay_s,
        compute_speed=np.ones_like(ref.training_delay_s),
        down_kbps=np.full_like(ref.training_delay_s, np.inf),
        up_kbps=np.full_like(ref.training_delay_s, np.inf),
    )


def _read_json(file, expected: str, kind: type, parse):
    """``parse(json.load(file))``; any damage or wrong structure raises DataFileError naming ``file``."""
    with reading(file, expected):
        with open(file) as f:
            data = json.load(f)
        if not isinstance(data, kind):
            raise DataFileError(file, f"expected {expected}, found a JSON {type(data).__name__}")
        return parse(data)


def _flash_scores(path) -> np.ndarray:
    try:
        file = resolve_data_file(FLASH_SCORES_FILE, path)
    except FileNotFoundError:
        # The raw list's AI_Score reads like " 76206 1,6": the first token is the score.
        return _read_json(resolve_data_file(FLASH_RAW_SCORES_FILE, path),
                          'FLASH\'s AI-Benchmark list (a JSON list of {"AI_Score": "<score> ..."})', list,
                          lambda raw: np.array([float(r["AI_Score"].split()[0]) for r in raw], dtype=np.float64))
    return _read_json(file, "FLASH's benchmark scores (a JSON object phone model -> score)", dict,
                      lambda scores: np.array(list(scores.values()), dtype=np.float64))


def _positive_normal(rng, mean: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Normal(mean, sigma) draws, redrawn until positive (vectorized rounds)."""
    out = np.empty(mean.shape)
    todo = np.arange(mean.size)
    for _ in range(1000):
        if not todo.size:
            return out
        x = rng.normal(mean[todo], sigma[todo])
        ok = x > 0
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    out[todo] = mean[todo]  # pathological sigma >> mean: fall back to the mean
    return out


def flash_profile(
    num_clients: int,
    seed=0,
    path: str | os.PathLike | None = None,
    *,
    nominal_ms_per_sample: float = 10_000.0 / 114.0,
    train_delay_s: float = 0.0,
) -> DeviceProfile:
    """Heterogeneous devices from the FLASH study's data (docs/file-formats.md).

    * compute: each client gets a phone model drawn uniformly from FLASH's
      AI-Benchmark list (``flash_benchmark2score.json``, 307 models); its speed is
      its AI score over the median score, so the median phone has speed 1.0 (the
      scores span 212..76,206, i.e. speeds of about 0.05..16);
    * bandwidth: each client gets one of FLASH's 19 measured users
      (``flash_speed_distri.json``: per-user mean and sigma of down/up KB/s) and a
      Normal(mean, sigma) draw, redrawn until positive; KB/s become kbps (x8).

    ``nominal_ms_per_sample`` (default ~88 ms) makes the median phone train the
    paper's median CIFAR-10 client (114 samples, the paper's reference settings) in about 10 s, the
    paper's median delay; set it for another model. ``path``: a data folder (or
    the data home, else the copies shipped with felix-jax).
    """
    rng = np.random.default_rng(seed)
    scores = _flash_scores(path)
    speed = scores[rng.integers(0, scores.size, size=num_clients)] / np.median(scores)
    table = _read_json(
        resolve_data_file(FLASH_SPEED_FILE, path),
        "FLASH's bandwidth table (a JSON object user -> down_u, down_sigma, up_u, up_sigma)", dict,
        lambda users: np.array([[u["down_u"], u["down_sigma"], u["up_u"], u["up_sigma"]] for u in users.values()],
                               dtype=np.float64),
    )
    pick = table[rng.integers(0, len(table), size=num_clients)]
    down = _positive_normal(rng, pick[:, 0], pick[:, 1]) * _KBYTES_TO_KBITS
    up = _positive_normal(rng, pick[:, 2], pick[:, 3]) * _KBYTES_TO_KBITS
    return DeviceProfile(
        train_delay_s=np.full(num_clients, float(train_delay_s)),
        compute_speed=speed,
        down_kbps=down,
        up_kbps=up,
        nominal_ms_per_sample=float(nominal_ms_per_sample),
    )


def fedscale_task_time_s(
    ms_per_sample,
    bandwidth_kbps,
    *,
    batch_size: int,
    local_steps: int,
    model_bytes: float,
    augmentation_factor: float = 3.0,
) -> tuple[np.ndarray, np.ndarray]:
    """FedScale's time model (the paper's reference settings): returns ``(compute_s, comm_s)``.

    compute = ``augmentation_factor * batch_size * local_steps * ms_per_sample /
    1000`` (3x: forward + backward); comm = model bits down + up over the client's
    bandwidth: ``2 * model_bytes * 8 / 1000 / bandwidth_kbps``. Vectorized over
    clients (``ms_per_sample``, ``bandwidth_kbps`` arrays).
    """
    ms = np.asarray(ms_per_sample, np.float64)
    kbps = np.asarray(bandwidth_kbps, np.float64)
    compute = augmentation_factor * batch_size * local_steps * ms / 1000.0
    comm = 2.0 * float(model_bytes) * 8.0 / 1000.0 / kbps
    return compute, comm


PROFILE_COLUMNS = ("train_delay_s", "compute_speed", "down_kbps", "up_kbps")


# what each profile column must hold, checked value by value so that an error names the file's line
_PROFILE_RULES = {
    "train_delay_s": (lambda v: np.isfinite(v) and v >= 0, "a finite number of seconds >= 0"),
    "compute_speed": (lambda v: np.isfinite(v) and v > 0, "a finite number > 0"),
    "down_kbps": (lambda v: v > 0, "a number > 0 (inf for no transfer time)"),
    "up_kbps": (lambda v: v > 0, "a number > 0 (inf for no transfer time)"),
}


def _read_profile_csv(path: Path, expected: str) -> dict[str, np.ndarray]:
    """A profile CSV's columns; an error names the file's line (comment and blank lines counted): a
    ragged row, a field that is not a number or breaks its column's rule, a header in another
    delimiter."""
    with open(path, encoding="utf-8-sig", newline="") as f:  # a spreadsheet's byte-order mark is not a column
        # '#' lines (comments, anywhere) are skipped, so the first other line is the header row
        lines = [(n, line) for n, line in enumerate(f, start=1) if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise DataFileError(path, f"the file is empty (no header row, no clients); expected {expected}")
    (first, head), body = lines[0], lines[1:]
    header = [h.strip() for h in next(csv.reader([head]))]
    if len(header) == 1 and "," not in head:
        for delimiter, name in ((";", "';'"), ("\t", "tab"), ("|", "'|'")):
            if delimiter in head:
                raise DataFileError(path, f"line {first}: the header {head.strip()!r} looks {name}-separated: "
                                          f"felix-jax reads comma-separated values; expected {expected}")
    if all(_is_number(h) for h in header):
        raise DataFileError(path, f"line {first}: no header row (its first line holds numbers); expected {expected}")
    values: list[list[float]] = []
    for n, line in body:
        fields = next(csv.reader([line]))
        if len(fields) != len(header):
            raise DataFileError(path, f"line {n}: {len(fields)} field{'s' if len(fields) != 1 else ''}, but the "
                                      f"header line {','.join(header)} has {len(header)} (a ragged row)")
        row = []
        for name, text in zip(header, fields):
            try:
                value = float(text)
            except ValueError:
                raise DataFileError(path, f"line {n}: {name} {text.strip()!r} is not a number") from None
            if name == "client" and value < 0:  # named by its line here, in the trace loaders' words
                raise negative_id(path, f"line {n}", text.strip())
            rule = _PROFILE_RULES.get(name)
            if np.isnan(value) or (rule is not None and not rule[0](value)):
                raise DataFileError(path, f"line {n}: {name} {text.strip()!r} must be "
                                          f"{rule[1] if rule else 'a number'}")
            row.append(value)
        values.append(row)
    table = np.array(values, np.float64).reshape(len(values), len(header))
    return {name: table[:, j] for j, name in enumerate(header)}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_device_profile(path: str | os.PathLike) -> DeviceProfile:
    """A user's per-client device profile from a CSV (a header naming columns) or an NPZ (arrays).

    Columns / arrays: ``train_delay_s`` (required: extra seconds per training task),
    and optionally ``compute_speed`` (default 1), ``down_kbps`` and ``up_kbps``
    (default ``inf``: no transfer time); one row / entry per client, in client
    order (a ``client`` column, if present, must be 0..N-1 or 1..N and sets the
    order; a negative id is refused naming its line or entry). Anything else in the file is
    an error naming the file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    expected = f"a device profile ({suffix or 'csv/npz'} with {', '.join(PROFILE_COLUMNS)}; train_delay_s required)"
    with reading(path, expected):
        if suffix == ".npz":
            with open_npz(path) as z:  # headers checked against the archive before anything is allocated
                cols = {k: np.asarray(z[k], np.float64) for k in z.files}
        elif suffix == ".csv":
            cols = _read_profile_csv(path, expected)
        else:
            raise DataFileError(path, f"unknown extension {suffix!r}; expected .csv or .npz")
        unknown = set(cols) - set(PROFILE_COLUMNS) - {"client"}
        if unknown or "train_delay_s" not in cols:
            raise DataFileError(path, f"columns {sorted(cols)}; expected {expected}")
        n = cols["train_delay_s"].shape[0] if cols["train_delay_s"].ndim else 1
        if n == 0:
            raise DataFileError(path, "no clients: train_delay_s has no entries (a header without rows?); "
                                      "expected one row / entry per client")
        if "client" in cols:
            raw = np.atleast_1d(cols.pop("client"))
            whole = np.isfinite(raw) & (raw == np.round(raw))
            if not whole.all():
                raise DataFileError(path, f"client ids must be whole numbers, found {raw[~whole][0].item()!r}")
            ids = refuse_negative_ids(path, "client", raw.astype(np.int64))
            base = 1 if n and ids.min() == 1 else 0
            if sorted((ids - base).tolist()) != list(range(n)):
                raise DataFileError(path, f"client ids must be 0..{n - 1} or 1..{n}, each once")
            order = np.argsort(ids)
            cols = {k: v[order] for k, v in cols.items()}
            client_ids = ids[order] if base else None  # kept to name the file's clients (1..N) in messages
        else:
            client_ids = None
        try:
            return DeviceProfile(train_delay_s=cols["train_delay_s"], compute_speed=cols.get("compute_speed", np.ones(n)),
                                 down_kbps=cols.get("down_kbps", np.full(n, np.inf)),
                                 up_kbps=cols.get("up_kbps", np.full(n, np.inf)), client_ids=client_ids)
        except ValueError as e:
            raise DataFileError(path, str(e)) from None
