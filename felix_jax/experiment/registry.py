"""Registries: names at the CLI edge -> objects (resolved once per run).

Availability regimes: ``avail100`` (always available), ``avail90`` / ``avail50``
(the paper's slot process: slots of 600 s, each available with probability
0.9 / 0.5, every client available at t=0; generated for the scenario's clients
and seed, with independent slots over the run's whole horizon, at least the
paper's 144 and at most a week, which then repeats), ``mobiperf`` (the shared real trace ``mobiperf_3st_50``: AVL_TRAIN while
charging, AVL_EVAL when not charging but battery >= 50%; held after its 6.2 days),
``ref:NAME`` for any shared reference trace (``syn_0``, ``syn_20``, ``syn_50``,
``mobiperf_2st``, ``mobiperf_3st_50``, ``mobiperf_3st_75``) as recorded, and a
path to a user's trace file (``my_trace.csv``: see :func:`make_trace`).
Reference traces have 300 clients; a scenario with more reuses them cyclically.
"""

from __future__ import annotations

import math
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from ..models import cifar_cnn, mlp, speech_cnn, speech_resnet
from ..models.base import Model
from ..options import OptionError
from ..plugin_calls import DROPOUT_ADVICE, check_signature, guarded, is_missing_rng, is_plugin, location
from ..suggest import known_names
from ..traces import (REFERENCE_TRACE_NAMES, AvailabilityTrace, DeviceProfile, always_available, flash_profile,
                      load_device_profile,
                      load_fedscale_trace, load_interval_csv, load_interval_npz, load_reference_trace,
                      paper_halfnormal, reference_profile, slot_bernoulli)
from ..traces.on_demand import CyclicTrace, SlotTrace


TRACE_FORMS = ("auto", "table", "function")
# form="auto": a trace held as a function where its table would pass this many change rows (~150 MB)
TABLE_ROWS_LIMIT = 1 << 24


# host bytes a trace's change row takes while its table is built (float64 time, int8 state, and the
# int64 row index and copies of a restrict / a generator's draws): an upper estimate of the build's peak
TABLE_ROW_BUILD_BYTES = 26
# a trace held as a function: the slot stream's 16 bytes a client, a boundary's changed ids (8 bytes
# each, about half the clients) and whole-slot columns (at most on_demand's column budget)
FUNCTION_CLIENT_BYTES = 24


def _as_function(form: str, rows: float) -> bool:
    """Whether a trace of ``rows`` change rows is held as a function under ``trace_form=form``."""
    return form == "function" or (form == "auto" and rows > TABLE_ROWS_LIMIT)


def _cycle(trace: AvailabilityTrace, n: int, what: str = "the trace", form: str = "table", *,
           user_file: bool = False):
    """``trace`` for ``n`` clients: its first ``n`` (in client order: by ascending id), or all of them
    reused cyclically. ``user_file``: a user's trace file, whose clients left out are named on stderr
    (a reference trace's first ``n`` of 300 are the documented choice of smaller scenarios)."""
    reuse_notice(what, trace.num_clients, n)
    if user_file:
        drop_notice(what, trace.external_ids, n)
    if form == "function" or (n > trace.num_clients and _as_function(form, n * trace.num_rows / trace.num_clients)):
        return CyclicTrace(trace, n)  # the same answers as the copy below, without copying a row
    if n > trace.num_clients:  # a copy of every client's rows: refused before it is made if it cannot fit
        from ..memory import check_fits

        rows = n * trace.num_rows / trace.num_clients
        check_fits(rows * TABLE_ROW_BUILD_BYTES, f"num_clients={n}",
                   f"{what} copied for every client as a table (trace_form={form}: ~{rows:,.0f} change rows; "
                   "trace_form=function reuses it without copying)")
    return trace.restrict(np.arange(n) % trace.num_clients)


def trace_bytes_estimate(name: str, num_clients: int, slot_s: float = 600.0, horizon_s: float = 86400.0,
                         form: str = "table") -> float:
    """An upper estimate of the host bytes the regime's trace takes for ``num_clients`` (its build's
    peak), known without building it: the slot regimes and ``avail100`` by formula; 0 for a trace read
    from a file (a reference trace, a user's file), whose copy is checked when the file is read."""
    if name == "avail100":
        return 0.0 if _as_function(form, num_clients) else 2.0 * num_clients * TABLE_ROW_BUILD_BYTES
    p = _SLOT_P.get(name)
    if p is None:
        return 0.0
    _, rows = _slot_rows(num_clients, p, slot_s, horizon_s)
    if _as_function(form, rows):
        from ..traces.on_demand import _COLUMN_BYTES

        # whole-slot columns: the cache keeps max(2, budget // N) of N bytes each
        return num_clients * FUNCTION_CLIENT_BYTES + max(2 * num_clients, _COLUMN_BYTES)
    return rows * TABLE_ROW_BUILD_BYTES


_NOTED: set[tuple[str, int, int]] = set()


def _note_once(what: str, own: int, wanted: int, line: str) -> None:
    """``line`` on stderr, once per process for each source and population (a sweep builds the same
    scenario's trace for every cell: one line says it)."""
    if (what, own, wanted) in _NOTED:
        return
    _NOTED.add((what, own, wanted))
    print(f"felix-jax: {line}", file=sys.stderr, flush=True)


def reuse_notice(what: str, own: int, wanted: int) -> None:
    """One line on stderr (:func:`_note_once`) when a trace or device profile with fewer clients than
    the scenario is reused cyclically (client i follows i mod own)."""
    if wanted > own:
        _note_once(what, own, wanted, f"{what} holds {own} client{'s' if own != 1 else ''}, the scenario {wanted} "
                                      f"(clients {wanted} > {own} in the file): reused cyclically, client i follows "
                                      f"the file's client i mod {own}")


def drop_notice(what: str, ids: np.ndarray, wanted: int) -> None:
    """One line on stderr (:func:`_note_once`) when a file holds more clients than the scenario: the
    first ``wanted`` are used and the others, named by id, left out (a stray id in a file, e.g.
    100000 among 0..999, would otherwise be dropped, or push a real client out, silently)."""
    ids = np.asarray(ids)
    if wanted < ids.size:
        dropped = ids.size - wanted
        _note_once(what, int(ids.size), wanted,
                   f"{what} holds {ids.size} clients, the scenario {wanted}: it uses the file's first {wanted} "
                   f"and drops {dropped} client{'s' if dropped != 1 else ''} ({id_list(ids[wanted:])})")


def id_list(ids: np.ndarray, limit: int = 8) -> str:
    """``"id 7"``, ``"ids 1000-1004, 100000"``: sorted, consecutive ids as ranges, at most ``limit``
    items (the first ones, then how many more up to the last id: one line for any number of ids)."""
    ids = np.sort(np.asarray(ids, dtype=np.int64))
    if ids.size == 1:
        return f"id {ids[0]}"
    first = np.flatnonzero(np.r_[True, np.diff(ids) != 1])  # where each run of consecutive ids starts
    last = np.r_[first[1:] - 1, ids.size - 1]
    runs = [f"{ids[a]}" if a == b else f"{ids[a]}-{ids[b]}" for a, b in zip(first[:limit], last[:limit])]
    if first.size <= limit:
        return "ids " + ", ".join(runs)
    listed = last[limit - 2] + 1  # the ids in the first limit - 1 runs
    return f"ids {', '.join(runs[:limit - 1])} and {ids.size - listed} more up to {ids[-1]}"


MAX_GENERATED_SLOTS = 144 * 7  # slot traces longer than a week of 600 s slots repeat with that period


def _slot_rows(n: int, p: float, slot_s: float, horizon_s: float) -> tuple[int, float]:
    """A slot regime's slots, and the change rows its table would hold (expected: the first row, the
    changes, the end): independent slots over the whole run, at least the paper's 144, at most a week."""
    needed = math.ceil(horizon_s / slot_s) if math.isfinite(horizon_s) else MAX_GENERATED_SLOTS
    slots = int(min(max(144, needed), MAX_GENERATED_SLOTS))
    return slots, n * (2 + (slots - 1) * 2 * p * (1 - p))


def _slots(p: float) -> Callable[..., AvailabilityTrace]:
    def make(n: int, seed: int, slot_s: float = 600.0, horizon_s: float = 86400.0, form: str = "table"):
        # Independent slots over the whole run (at least the paper's 144): only the very
        # first slot is forced available, not the first slot of every repeated day.
        slots, rows = _slot_rows(n, p, slot_s, horizon_s)
        if _as_function(form, rows):
            return SlotTrace(n, p, num_slots=slots, slot_s=slot_s, seed=seed, beyond_end="repeat")
        return slot_bernoulli(n, p, num_slots=slots, slot_s=slot_s, seed=seed, beyond_end="repeat")

    return make


def _always(n: int, seed: int, slot_s: float = 600.0, horizon_s: float = 86400.0, form: str = "table"):
    if _as_function(form, n):  # about a row a client
        return CyclicTrace(always_available(1, 86400.0), n)
    return always_available(n, 86400.0)


_SLOT_P = {"avail90": 0.9, "avail50": 0.5}  # the slot regimes' availability per slot

AVAILABILITY: dict[str, Callable[..., AvailabilityTrace]] = {
    "avail100": _always,
    "avail90": _slots(_SLOT_P["avail90"]),
    "avail50": _slots(_SLOT_P["avail50"]),
    "mobiperf": lambda n, seed, slot_s=600.0, horizon_s=86400.0, form="table": _cycle(
        load_reference_trace("mobiperf_3st_50"), n, "the mobiperf trace (ref:mobiperf_3st_50)", form),
}


TRACE_FILE_LOADERS: dict[str, Callable[[str], AvailabilityTrace]] = {
    ".csv": load_interval_csv,
    ".npz": load_interval_npz,
    ".json": load_fedscale_trace,
    ".pkl": load_fedscale_trace,
    ".pickle": load_fedscale_trace,
}


def is_file_name(name: str) -> bool:
    """A regime or profile name that names a file (by extension or a path separator)."""
    return "/" in name or os.sep in name or Path(name).suffix.lower() in TRACE_FILE_LOADERS


def make_trace(name: str, num_clients: int, seed: int, slot_s: float = 600.0,
               horizon_s: float = 86400.0, start_s: float = 0.0, speedup: float = 1.0, form: str = "table"):
    """The regime's trace; ``slot_s`` sets the slot length of the synthetic regimes (paper: 600 s)
    and ``horizon_s`` how long a run may last (synthetic slots are drawn independently up to it).
    ``start_s`` maps the run's time 0 to that time of the trace (:meth:`AvailabilityTrace.shifted`:
    the trace's repeat / hold semantics are kept), for every source; synthetic slots are then drawn
    up to ``start_s + horizon_s``. ``speedup`` plays the trace that many times faster from there
    (:meth:`AvailabilityTrace.time_scaled`): run time ``t`` reads the trace at
    ``start_s + speedup * t``; ``horizon_s`` stays in run seconds.

    A file name loads a user's trace by extension: ``.csv`` / ``.npz`` (the interval
    formats of :mod:`felix_jax.traces.loaders`), ``.json`` / ``.pkl`` (FedScale's client
    behaviour format, read without unpickling code). A trace with fewer clients than
    the scenario is reused cyclically, like the reference traces; a trace file with more gives
    its first ``num_clients`` and names the others on stderr (:func:`drop_notice`).

    ``form`` (:data:`TRACE_FORMS`): ``"table"`` holds every client's change rows; ``"function"``
    answers from what defines the trace (:mod:`felix_jax.traces.on_demand`: the slot regimes' random
    stream, a reused trace's recorded clients; a trace file at its own size stays a table);
    ``"auto"`` picks the function where the table would pass :data:`TABLE_ROWS_LIMIT` rows. Every
    form gives the same answers.
    """
    if not (math.isfinite(speedup) and speedup > 0):
        raise ValueError(f"speedup must be a finite number > 0, got {speedup!r}")
    if form not in TRACE_FORMS:
        raise ValueError(f"trace form must be one of {TRACE_FORMS}, got {form!r}")
    return _load_trace(name, num_clients, seed, slot_s, horizon_s * speedup + start_s, form).shifted(start_s) \
        .time_scaled(speedup)


def _load_trace(name: str, num_clients: int, seed: int, slot_s: float, horizon_s: float, form: str):
    if name.startswith("ref:"):
        return _cycle(load_reference_trace(name[4:]), num_clients, f"reference trace {name}", form)
    if is_file_name(name):
        suffix = Path(name).suffix.lower()
        if suffix not in TRACE_FILE_LOADERS:
            raise KeyError(f"availability file {name!r}: unknown extension {suffix!r}; "
                           f"known: {', '.join(TRACE_FILE_LOADERS)}")
        trace = TRACE_FILE_LOADERS[suffix](name)
        if trace.num_clients == 0:
            raise KeyError(f"availability file {name!r} holds no clients")
        return _cycle(trace, num_clients, f"availability file {Path(name).name}", form, user_file=True)
    try:
        make = AVAILABILITY[name]
    except KeyError:
        raise KeyError(unknown_regime(name)) from None
    return make(num_clients, seed, slot_s, horizon_s, form)


def unknown_regime(name: str) -> str:
    """The one line for an availability name that is no regime, reference trace or trace file."""
    regimes = [*AVAILABILITY, *(f"ref:{n}" for n in REFERENCE_TRACE_NAMES)]
    return (f"unknown availability regime {name!r}"
            + known_names(name, regimes, "regimes", f", or a trace file ({', '.join(TRACE_FILE_LOADERS)})"))


DEVICE_PROFILES: dict[str, Callable[[int, int], DeviceProfile]] = {
    "paper_halfnormal": lambda n, seed: paper_halfnormal(n, seed),
    "reference": lambda n, seed: _reference_profile(n),
    "flash": lambda n, seed: flash_profile(n, seed),
}


def _reference_profile(n: int) -> DeviceProfile:
    profile = reference_profile()
    reuse_notice("the reference device profile", profile.num_clients, n)
    return profile.restrict(np.arange(n) % profile.num_clients)


def make_profile(name: str, num_clients: int, seed: int) -> DeviceProfile:
    """A named profile, or a user's profile file (``.csv`` / ``.npz``, see
    :func:`~felix_jax.traces.load_device_profile`), reused cyclically if it has fewer clients; with more, its
    first ``num_clients`` are used and the others named on stderr."""
    if "/" in name or os.sep in name or Path(name).suffix.lower() in (".csv", ".npz"):
        profile, what = load_device_profile(name), f"device profile {Path(name).name}"
        reuse_notice(what, profile.num_clients, num_clients)
        drop_notice(what, profile.external_ids, num_clients)
        return profile.restrict(np.arange(num_clients) % profile.num_clients)
    try:
        return DEVICE_PROFILES[name](num_clients, seed)
    except KeyError:
        raise KeyError(f"unknown device profile {name!r}"
                       + known_names(name, DEVICE_PROFILES, "device profiles", ", or a profile file (.csv, .npz)")) \
            from None


MODELS: dict[str, Callable[[tuple, int], Model]] = {
    "cifar_cnn": lambda shape, classes: cifar_cnn(num_classes=classes, input_shape=shape),
    # 44,842 params (12x fewer than the paper's 537,610)
    "cifar_cnn_narrow": lambda shape, classes: cifar_cnn(num_classes=classes, input_shape=shape,
                                                         conv=(16, 32, 64), dense=(64, 64)),
    # 11,546 params: the learner of cifar10-longhorizon
    "cifar_cnn_tiny": lambda shape, classes: cifar_cnn(num_classes=classes, input_shape=shape,
                                                       conv=(8, 16, 32), dense=(32, 32)),
    "speech_resnet": lambda shape, classes: speech_resnet(shape, classes),
    "speech_resnet_small": lambda shape, classes: speech_resnet(shape, classes, widths=(16, 32, 64, 128),
                                                                blocks=(1, 1, 1, 1)),
    # 18,604 params (12-class, 98x40 log-mel): the learner of speech-longhorizon
    "speech_cnn": lambda shape, classes: speech_cnn(shape, classes),
    "mlp": lambda shape, classes: mlp(shape, classes, hidden=(64,)),
}


# the input ranks (per sample) the built-in convolutional models take; the others flatten any input
MODEL_INPUT_RANKS: dict[str, tuple[tuple[int, ...], str]] = {
    **{m: ((3,), "image inputs (H, W, C)") for m in ("cifar_cnn", "cifar_cnn_narrow", "cifar_cnn_tiny")},
    **{m: ((2, 3), "2-D inputs (time, mels) or (H, W, C)") for m in ("speech_resnet", "speech_resnet_small", "speech_cnn")},
}
FLAT_INPUT_MODELS = ("mlp",)  # built-in models that take inputs of any shape (flattened), e.g. (features,)


def check_model_input(name: str, input_shape: tuple) -> None:
    """Refuses (OptionError, one line) a built-in model whose layers cannot take inputs of this shape."""
    shape = tuple(int(d) for d in input_shape)
    ranks, needs = MODEL_INPUT_RANKS.get(name, (None, ""))
    if ranks is not None and len(shape) not in ranks:
        raise OptionError(f"model={name} needs {needs}, but the data set's inputs have shape {shape} per "
                          f"sample; for flat inputs use model={' or '.join(FLAT_INPUT_MODELS)}")
    if name.startswith("cifar_cnn") and ranks is not None and min(shape[:2]) < 22:
        # three VALID 3x3 convs, each followed by a 2x2 pool, leave nothing of a smaller image
        raise OptionError(f"model={name} needs images of at least 22x22, but the data set's inputs have shape "
                          f"{shape}; for smaller inputs use model={' or '.join(FLAT_INPUT_MODELS)}")
    if name == "speech_cnn" and min(shape[:2]) < 16:
        # the input pool and three 2x2 pools leave nothing of a smaller (time, mels) map
        raise OptionError(f"model={name} needs inputs of at least 16x16 (time, mels), but the data set's inputs "
                          f"have shape {shape}")


@lru_cache(maxsize=64)
def _built_in_model(name: str, factory, input_shape: tuple, num_classes: int) -> Model:
    """A built-in model, made once per (name, input shape, classes) in a process: its functions are then
    the same objects in every run, so the jitted programs keyed on them (the cohort engine's, the test
    evaluation's) are traced and compiled once, not once per run. (A plugin's factory is called anew
    each time: a user's module may change between runs.)"""
    return factory(input_shape, num_classes)


def make_model(name: str, input_shape: tuple, num_classes: int) -> Model:
    try:
        factory = MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}{known_names(name, MODELS, 'models')}") from None
    check_model_input(name, input_shape)
    plugin = is_plugin(factory)
    if plugin:  # a user's model: what its factory raises is reported naming it (plugin_calls.py)
        what = f"model {name!r} factory {getattr(factory, '__name__', 'make')}()"
        check_signature(what, factory, (tuple(input_shape), num_classes), "make(input_shape, num_classes) -> Model")
        factory = guarded(what, factory)
    model = _built_in_model(name, factory, tuple(int(d) for d in input_shape), int(num_classes)) if not plugin \
        else factory(tuple(input_shape), num_classes)
    if not isinstance(model, Model):
        raise OptionError(not_a_model(name, model))
    check_model_output(name, model, tuple(input_shape), num_classes, plugin=plugin)
    return model


def not_a_model(name: str, made) -> str:
    """The one line for a model factory that returned something other than a :class:`Model`."""
    import flax.linen as nn

    if isinstance(made, nn.Module):
        return (f"model={name}: its factory returned the flax module {type(made).__name__}, not a Model: wrap it "
                f"with felix_jax.models.make_model(\"{name}\", module, input_shape, num_classes) (and "
                "train_flag=\"train\" for a module with dropout)")
    return (f"model={name}: its factory returned {type(made).__name__}, not a Model (felix_jax.models.make_model "
            "wraps a flax module into one)")


def check_model_output(name: str, model: Model, input_shape: tuple, num_classes: int, plugin: bool = False) -> None:
    """Refuses (OptionError, one line naming the model) a model that does not give one logit per class
    of the data set for each input (a plugin's output layer of the wrong width would otherwise train
    on labels it cannot express, or leave classes without a logit). Shapes only: nothing is computed.
    ``plugin``: a user's model, whose failing line (file:line) the message names."""
    import jax

    batch = jax.ShapeDtypeStruct((2, *input_shape), np.float32)
    try:
        params = jax.eval_shape(model.init, jax.random.key(0))
        logits = jax.eval_shape(model.apply, params, batch)
    except Exception as e:  # noqa: BLE001 - a user's model: whatever it raises is reported in one line
        first = (str(e).strip().splitlines() or [""])[0]
        at = f" at {location(e)}" if plugin else ""
        advice = f"; {DROPOUT_ADVICE}" if is_missing_rng(e) else ""
        raise OptionError(f"model={name} cannot run on inputs of shape {tuple(input_shape)} per sample "
                          f"({type(e).__name__}{at}: {first}){advice}") from None
    shape = tuple(getattr(logits, "shape", ()))
    if shape != (2, num_classes):
        raise OptionError(f"model={name} gives logits of shape {shape} for a batch of 2, but the data set has "
                          f"{num_classes} classes: its output layer must give (batch, {num_classes})")
