"""A scenario is pure data: what to emulate (docs/architecture.md).

Strings name registry entries (data set, model, availability regime, device
profile, strategy) and are resolved once, in :mod:`felix_jax.experiment.runner`.
``Scenario.with_overrides({"key": "value"})`` parses CLI ``--set`` values by the
field's type; dotted keys reach the strategy's policy options
(``aggregator.normalize``, ``selector.variant``, ``eval_selector.min_age``: any
field of the policy's config, see ``felix-jax run --list``) and the update guard
(``update_guard.max_norm_ratio``) and the adversarial clients (``adversary.fraction``,
``adversary.kind``); ``aggregator.name=median`` (or a bare
``aggregator=median``) swaps the strategy's component for another registered one
(:func:`~felix_jax.experiment.strategies.with_components`). A scenario is
validated when it is built: a bad field or option raises one
:class:`~felix_jax.options.OptionError` line naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
from pathlib import Path

import numpy as np

from ..options import OptionError, parse_value, type_name
from ..suggest import did_you_mean, known_names

COMPONENT_FIELDS = ("selector", "eval_selector", "aggregator")  # a strategy's components: KEY.name swaps one
POLICY_FIELDS = COMPONENT_FIELDS + ("update_guard",)
OPTION_FIELDS = POLICY_FIELDS + ("stream", "reading", "adversary")  # dict fields that dotted keys reach


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str = "quickstart"
    # data and model
    dataset: str = "digits"
    num_clients: int = 30
    # dirichlet | iid | natural / speaker (one client per id in the data: speakers, writers, users) |
    # reference (the paper's per-client sizes from the
    # shared reference file, scaled to the data, with Dirichlet(alpha) label mixes)
    partition: str = "dirichlet"
    alpha: float = 0.5
    model: str = "cifar_cnn"  # cifar_cnn | speech_resnet | mlp
    num_train: int | None = None  # use only the first n training samples
    num_test: int | None = None  # evaluate on the first n test samples
    # clients' local work
    batch_size: int = 16
    learning_rate: float = 0.05
    local_mode: str = "epochs"
    local_epochs: int = 1
    local_steps: int = 5
    augment: bool = False
    eval_max_batches: int | None = 1  # eval tasks: FeLiX code probes one batch
    # fleet
    availability: str = "avail100"  # see felix_jax.experiment.registry.AVAILABILITY
    slot_s: float = 600.0  # slot length of the synthetic regimes avail90 / avail50 (paper: 600 s)
    # the trace time the run starts at: run time t reads the availability trace at trace_start_s + t
    # (every source; repeat / hold kept). The recorded traces hold everyone available over [0, 600 s)
    trace_start_s: float = 0.0
    # the trace plays this many times faster from trace_start_s on: run time t reads it at
    # trace_start_s + trace_speedup * t (e.g. 3: a 6-day trace over 48 h, as the FeLiX code's speech runs)
    trace_speedup: float = 1.0
    # how the trace is held: "table" (every client's change rows), "function" (computed where asked:
    # slot regimes from their random stream, recorded traces reused cyclically from the recorded
    # clients), or "auto" (a function where the table would pass 2^24 rows). The answers are the same.
    trace_form: str = "auto"
    device_profile: str = "paper_halfnormal"
    strategy: str = "fedbuff"
    plugins: str = ""  # comma-separated .py files or modules that register policies (felix_jax.plugins)
    # options of the strategy's policies, over the strategy's defaults (fields of their configs)
    selector: dict = dataclasses.field(default_factory=dict)
    eval_selector: dict = dataclasses.field(default_factory=dict)
    aggregator: dict = dataclasses.field(default_factory=dict)
    # the server's check of every client update (felix_jax.fleet.update_guard.UpdateGuardConfig fields)
    update_guard: dict = dataclasses.field(default_factory=dict)
    # adversarial clients (felix_jax.cohort.adversary.AdversaryConfig fields: fraction, kind, seed); {}: none
    adversary: dict = dataclasses.field(default_factory=dict)
    concurrency: int = 10
    aggregation_goal: int = 5
    overcommit: float = 1.3
    # sgd | momentum (FedAvgM) | adagrad (FedAdagrad) | adam (FedAdam) | yogi (FedYogi), optax transformations
    # (eta: aggregator.server_lr); none: the strategy's own (fedavgm, fedadagrad), else sgd
    server_optimizer: str | None = None
    server_momentum: float = 0.9  # FedAvgM's beta; beta_1 of FedAdagrad / FedAdam / FedYogi
    server_tau: float = 1e-3  # the adaptivity tau of FedAdagrad / FedAdam / FedYogi
    timeout_s: float = 90.0  # the server's timer per task; inf disables it
    timeout_frees_slot: bool = False  # async: a timed-out task frees its slot (FeLiX code: the slot stays taken)
    # oracle knowledge, a client leaving mid-task: keep_slot (the task holds its slot until its reply or
    # timeout; the paper's oracle "lacks the mechanism to reactively resample") | free_slot (the server,
    # knowing the trace, frees the slot at the departure and refills it, as TierTrack does)
    oracle_departure: str = "keep_slot"
    # task lifecycle when the client leaves the tier: resume (paper: checkpoint and resume) | restart | abandon |
    # run_to_end (FeLiX code: a trainer waits for AVL_TRAIN before starting, then is never pre-empted) |
    # partial (FedProx: the client sends the update of the steps it finished); none: the strategy's own
    # (partial for fedprox, fedprox-async), else resume
    interruption: str | None = None
    # FedProx's proximal weight: clients train on F_k(w) + prox_mu/2 ||w - w_start||^2; none: the strategy's
    # own (0.01 for fedprox, fedprox-async), else 0
    prox_mu: float | None = None
    utility_from: str = "first_batch"  # statistical utility from the first batch (code) | all_steps
    # which reading of the paper runs (felix_jax/fleet/reading.py, docs/readings.md): paper (its text) |
    # paper_code (the authors' code as it ran for the paper); reading.KEY=V flips one switch on top of it
    semantics: str = "paper"
    reading: dict = dataclasses.field(default_factory=dict)
    # stopping and metrics
    target_accuracy: float | None = 0.8
    # the target is reached when the mean of the last stop_window test accuracies (the initial model's
    # included) and the last one reach it; with fewer so far, the mean of those there are
    # (reading.stop_window_fill=full waits for stop_window of them, as the authors' stop script does)
    stop_window: int = 20
    max_virtual_hours: float = 24.0
    max_aggregations: int = 400
    eval_every: int = 1
    # test checkpoints evaluated per device call; results are the same at any value (the stop rule is
    # applied in order, a target found late rolls the record back; bit for bit on CPU, tested; on a GPU
    # benchmarks/eval_batching.py checks it)
    eval_batch: int = 1
    # False: a run goes on after reaching the target (time-to-target is still the first time it is
    # reached): for drifting streams, where accuracy falls and recovers after each shift
    stop_at_target: bool = True
    # keep which test samples every checkpoint classifies right (the run's test_hits.npz, packed bits): the
    # accuracy on any subset of the test set (e.g. its first 250) can then be read from the same run
    test_hits: bool = False
    # client data streams (felix_jax/data/streams.py: arrivals, drift, delayed labels); {}: static data
    stream: dict = dataclasses.field(default_factory=dict)
    seed: int = 0
    plan: str | None = None  # cohort execution plan; None picks per backend
    devices: int | None = None  # devices the cohort is sharded over; None: all that jax sees, 1: one device
    # the run's peak memory (GB; cohort/budget.py): on a CPU the process's resident memory (the runtime, the
    # population's tables, the figures, and the engine: data set, model versions, updates computed and not
    # yet aggregated, one device call), on an accelerator the engine's device memory; None: half of the
    # machine's memory on a CPU, three quarters of an accelerator's; inf (or any size beyond 4 EiB): unbounded,
    # nothing measured. Speed only: results are the same at any budget that holds the run's working set
    memory_budget_gb: float | None = None
    # training results the lazy executor holds ahead of their replies at most: a flush computes the tasks
    # whose replies come first, up to that many (None: as many as the budget allows). Speed and memory
    # only; computing further ahead holds memory and computes tasks that time out or are abandoned
    # (BENCHMARKS.md, "Memory bounded by a budget")
    flush_max_tasks: int | None = 1024
    # auto: an aggregator whose weights are per update (FedBuff, FedAsync, TierFuse, FedAvg) folds each update
    # into a running sum as it arrives, and holds no buffer of K updates (fleet/running_sum.py); always: every
    # aggregator gathers its buffer at the aggregation (to check the two against each other). The same
    # results up to the order of a float32 sum
    aggregation_buffer: str = "auto"

    def __post_init__(self):
        _check_types(self)  # the Python API's values as strictly as --set's: 2.5 clients, a number for a name
        for field in PATH_FIELDS:  # file names by absolute path too
            value = getattr(self, field)
            if _names_file(field, value):
                object.__setattr__(self, field, _absolute(field, value))
        if self.plugins:  # plugin files by absolute path, so config.json reruns from any folder
            object.__setattr__(self, "plugins", ",".join(
                _absolute("plugins", p.strip()) if p.strip().endswith(".py") else p.strip()
                for p in self.plugins.split(",") if p.strip()))
        for name, rule, allowed in _CHECKS:
            value = getattr(self, name)
            if value is not None and not rule(value):
                raise OptionError(f"{name}={value!r}: must be {allowed}")
        strategy = self.resolve_strategy().strategy  # every policy option is checked now, not hours into a run
        from .registry import MODELS

        if self.model not in MODELS:
            raise OptionError(f"model={self.model!r}: unknown model{known_names(self.model, MODELS, 'models')}")
        self.resolve_update_guard()
        self.resolve_adversary()
        if self.resolve_stream().live_eval and self.stream and self.test_hits:
            raise OptionError("test_hits=true keeps the fixed test set's per-sample correctness, but this stream "
                              "weights the test to the live class mix: set stream.live_eval=false, or leave "
                              "test_hits off")
        self.resolve_reading()
        self._check_names()
        from .resolution import check_fleet

        check_fleet(self, strategy)  # across fields: a fleet that could never aggregate

    def _check_names(self) -> None:
        """Names that are resolved only when a run is built (data set, execution plan): checked now,
        so a bad one is refused before a results folder is touched."""
        from ..cohort.plan import ExecutionPlan
        from ..data.loaders import LOADERS

        if self.plan is not None:
            try:
                ExecutionPlan.parse(self.plan)
            except ValueError as e:
                raise OptionError(f"plan={self.plan!r}: {e}; expected vmap, map or chunked:N (N a power of two)") \
                    from None
        name = self.dataset
        if not (name in LOADERS or name.startswith("tfds:") or name.lower().endswith(".npz")):
            raise OptionError(f"dataset={name!r}: unknown data set"
                              + known_names(name, sorted(LOADERS), "data sets", ", a .npz of arrays, or tfds:NAME"))

    def resolve_stream(self):
        """The :class:`~felix_jax.data.streams.StreamConfig` for this scenario (static data: all defaults)."""
        from ..data.streams import StreamConfig, StreamError
        from ..options import OptionSpec

        try:
            return OptionSpec(StreamConfig).build("stream", self.stream)
        except StreamError as e:
            raise OptionError(str(e)) from None

    def resolve_update_guard(self):
        """The :class:`~felix_jax.fleet.update_guard.UpdateGuardConfig` for this scenario."""
        from ..fleet.update_guard import UpdateGuardConfig
        from ..options import OptionSpec

        return OptionSpec(UpdateGuardConfig).build("update_guard", self.update_guard)

    def resolve_adversary(self):
        """The :class:`~felix_jax.cohort.adversary.AdversaryConfig` of this scenario's adversarial clients,
        or None without any (``adversary`` empty: the cohort runs no adversary code at all)."""
        if not self.adversary:
            return None
        from ..cohort.adversary import AdversaryConfig
        from ..options import OptionSpec

        return OptionSpec(AdversaryConfig).build("adversary", self.adversary)

    def resolve_reading(self):
        """The :class:`~felix_jax.fleet.reading.Reading` this scenario names (``semantics``, then its
        ``reading`` switches), before it is resolved for the strategy (``Reading.resolved``)."""
        from ..fleet.reading import READING_VARIANTS, Reading
        from ..options import OptionSpec

        if "semantics" in self.reading:
            raise OptionError("reading.semantics: set the scenario field semantics instead")
        return OptionSpec(Reading, READING_VARIANTS).build("reading", {"variant": self.semantics, **self.reading})

    def resolve_strategy(self):
        """The strategy with its policies' configs for this scenario (``ResolvedStrategy``): the
        strategy's defaults, then the reading's Oort switches (for Oort selectors run as the FeLiX
        code's variant) and q-FedAvg's ``lipschitz = 1 / learning_rate``, then the scenario's own options."""
        from ..plugins import load_plugins
        from .strategies import component_names, get_strategy, resolve_strategy, with_components

        load_plugins(self.plugins)
        try:
            # the strategy with the components the scenario names swapped in (aggregator.name=median)
            st = with_components(get_strategy(self.strategy),
                                 component_names(self.selector, self.eval_selector, self.aggregator))
            selector = dict(self.selector)
            if st.selector == "oort" and "variant" not in st.selector_options and "variant" not in selector:
                selector = {**self.resolve_reading().selector_options(st.mode), **selector}
            aggregator = dict(self.aggregator)
            if st.aggregator == "qfedavg" and aggregator.get("lipschitz") in (None, "none", "null"):
                aggregator["lipschitz"] = 1.0 / self.learning_rate  # q-FFL's L = 1/eta (aggregators/qfedavg.py)
            return resolve_strategy(self.strategy, selector, self.eval_selector, aggregator)
        except KeyError as e:
            raise OptionError(f"strategy={self.strategy!r}: {e.args[0]}") from None

    def with_overrides(self, overrides: dict[str, typing.Any]) -> "Scenario":
        """A copy with ``overrides`` applied: field names, or ``selector.KEY`` / ``aggregator.KEY`` / ..."""
        hints = typing.get_type_hints(Scenario)
        fields = {f.name for f in dataclasses.fields(self)}
        parsed: dict[str, typing.Any] = {}
        # a bare component name (aggregator=median) first: the component from its own defaults, the
        # options given with it (aggregator.trim=0.1) on top, whatever their order
        named = {k: v for k, v in overrides.items() if k in COMPONENT_FIELDS and isinstance(v, str)}
        for key, value in named.items():
            parsed[key] = {"name": value}
        for key, value in overrides.items():
            if key in named:
                continue
            head, dot, option = key.partition(".")
            if dot and head in OPTION_FIELDS and option:
                merged = parsed.setdefault(head, dict(getattr(self, head)))
                merged[option] = value
                continue
            if key not in fields:
                raise OptionError(unknown_field_message(key, fields))
            if key in OPTION_FIELDS:
                if not isinstance(value, dict):
                    raise OptionError(f"{key}={value!r}: expected an object of options, e.g. {{\"variant\": ...}}"
                                      + (f", or a {key} name" if key in COMPONENT_FIELDS else ""))
                parsed[key] = dict(value)
            else:
                parsed[key] = parse_value(key, value, hints[key])
        return dataclasses.replace(self, **parsed)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_file(path: str | Path) -> "Scenario":
        """A scenario from a JSON file of fields (or a run's ``config.json``)."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise OptionError(f"cannot read scenario file {path}: {e.strerror or e}") from None
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise OptionError(f"scenario file {path} is not a text JSON file (byte {e.start} is not UTF-8 text: "
                              "a binary file?)") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise OptionError(f"scenario file {path} is not valid JSON: {e}") from None
        except RecursionError:
            raise OptionError(f"scenario file {path}: JSON nested too deeply to be a scenario (a scenario file is "
                              "an object of fields)") from None
        record = None
        if isinstance(data, dict) and isinstance(data.get("scenario"), dict):  # a run's config.json
            record, data = data, data["scenario"]
        if not isinstance(data, dict):
            raise OptionError(f"scenario file {path}: expected a JSON object of scenario fields, "
                              f"got {type(data).__name__}")
        sc = Scenario().with_overrides(_resolve_paths(data, path.parent))
        if record is not None:
            from .resolution import check_recorded_config

            check_recorded_config(path, record, sc)
        return sc


def unknown_field_message(key: str, fields) -> str:
    """One line for a key that is no scenario field: the nearest fields (``timeout`` -> ``timeout_s``),
    or, for a dotted key whose head is off (``selecter.k``), the option fields it may have meant."""
    head, dot, option = key.partition(".")
    if dot and head not in OPTION_FIELDS:
        guess = did_you_mean(head, OPTION_FIELDS)
        return (f"{key}: {head} is no field with options (they are {', '.join(OPTION_FIELDS)})"
                + (f"; did you mean {guess + '.' + option!r}?" if guess else ""))
    dotted = f" (and {', '.join(f + '.OPTION' for f in OPTION_FIELDS)})"
    return f"{key}: unknown scenario field{known_names(key, sorted(fields), 'scenario fields')}" + (
        dotted if len(fields) <= 10 else "")


# One line of meaning per scenario field (``felix-jax run --list`` prints them with type and default;
# a test keeps this table equal to the dataclass's fields).
FIELD_HELP: dict[str, str] = {
    "name": "label of the scenario (results folder names, figure titles)",
    "dataset": "data set: digits (embedded), cifar10, speech_commands, a .npz of arrays, or tfds:NAME",
    "num_clients": "clients in the population",
    "partition": "how the training data is split over clients: dirichlet, iid, natural/speaker, reference, pool",
    "alpha": "Dirichlet concentration of the clients' label mixes (smaller: more skewed)",
    "model": "model name (run --list: models), or a plugin's",
    "num_train": "use only this many training samples (a seeded sample; none: all)",
    "num_test": "evaluate on this many test samples (none: all)",
    "batch_size": "local minibatch size",
    "learning_rate": "local SGD step size",
    "local_mode": "a training task runs local_epochs over the client's data (epochs) or local_steps steps",
    "local_epochs": "epochs per training task (local_mode=epochs)",
    "local_steps": "steps per training task (local_mode=steps)",
    "augment": "random crop + horizontal flip in local training (images)",
    "eval_max_batches": "batches an eval task forwards (the FeLiX code probes one; none: all)",
    "availability": "availability regime: avail100, avail90, avail50, mobiperf, ref:NAME, or a trace file",
    "slot_s": "slot length in seconds of the synthetic regimes avail90 / avail50 (paper: 600)",
    "trace_start_s": "run time 0 reads the availability trace at this time (every source; repeat/hold kept)",
    "trace_speedup": "the availability trace plays this many times faster: run time t reads it at "
                     "trace_start_s + trace_speedup * t",
    "trace_form": "how the trace is held: auto, table (every change row) or function (computed where asked); "
                  "the same answers",
    "device_profile": "per-client delays and speeds: paper_halfnormal, reference, flash, or a profile file",
    "strategy": "strategy name (run --list: strategies): mode, knowledge, selector(s), aggregator",
    "plugins": "comma-separated .py files or modules that register policies, strategies or models",
    "selector": "options of the strategy's train selector (selector.KEY=V; run --list: policy options); "
                "selector.name=NAME (or selector=NAME) swaps in another selector",
    "eval_selector": "options of the strategy's eval selector (eval_selector.KEY=V); eval_selector.name=NAME swaps it",
    "aggregator": "options of the strategy's aggregator (aggregator.KEY=V); aggregator.name=NAME (or "
                  "aggregator=NAME) swaps in another aggregator",
    "update_guard": "options of the server's check of client updates (update_guard.KEY=V)",
    "adversary": "adversarial clients: adversary.fraction (of the population, drawn once from the seed), "
                 "adversary.kind (sign_flip, scale:X, gaussian:SIGMA, label_flip), adversary.seed; {}: none",
    "concurrency": "async: training tasks kept in flight (c)",
    "aggregation_goal": "updates per aggregation (K)",
    "overcommit": "sync: a round selects int(overcommit * K) clients",
    "server_optimizer": "server step: sgd (w + eta * aggregate), momentum (FedAvgM), adagrad (FedAdagrad), adam "
                        "(FedAdam) or yogi (FedYogi); none: the strategy's own, else sgd",
    "server_momentum": "FedAvgM's server momentum beta (v <- beta v + Delta); beta_1 of adagrad, adam and yogi",
    "server_tau": "the adaptivity tau of adagrad, adam and yogi (w + eta m / (sqrt(v) + tau))",
    "timeout_s": "the server's timer per task in seconds (inf: none)",
    "timeout_frees_slot": "async: a timed-out task frees its slot (FeLiX code: the slot stays taken)",
    "oracle_departure": "oracle knowledge, a client leaving mid-task: keep_slot (until reply/timeout) or free_slot",
    "interruption": "a task whose client leaves its tier: resume, restart, abandon, run_to_end, or partial (the "
                    "update of the steps it finished); none: the strategy's own, else resume",
    "prox_mu": "FedProx's proximal weight mu (clients train on F_k + mu/2 ||w - w_start||^2); none: the "
               "strategy's own, else 0",
    "utility_from": "statistical utility from the first batch (FeLiX code) or all local steps",
    "semantics": "reading of the paper: paper (its text) or paper_code (the authors' code as it ran; docs/readings.md)",
    "reading": "switches of the reading, over semantics (reading.KEY=V; run --list: reading switches)",
    "target_accuracy": "time-to-target: mean of the last stop_window test accuracies and the last one reach it "
                       "(none: no target)",
    "stop_window": "test accuracies the stop rule averages (fewer early on: those so far; "
                   "reading.stop_window_fill=full waits for all)",
    "max_virtual_hours": "stop after this much virtual time",
    "max_aggregations": "stop after this many aggregations",
    "eval_every": "evaluate the test set every n aggregations",
    "eval_batch": "test checkpoints evaluated per device call (same results at any value)",
    "stop_at_target": "stop when the target is reached (false: go on, e.g. for drifting streams)",
    "test_hits": "keep every checkpoint's per-sample test correctness (test_hits.npz): any subset's accuracy "
                 "can be read from the run",
    "stream": "client data streams: arrivals, drift, delayed labels (stream.KEY=V; {}: static data)",
    "seed": "seed of the partition, trace, profile, model init and every draw",
    "plan": "cohort execution plan: vmap, map or chunked:N (none: chosen per backend)",
    "devices": "devices the cohort is sharded over (none: every device jax sees)",
    "memory_budget_gb": "the run's peak memory, GB: on a CPU the process's resident memory (runtime, clients' "
                        "tables, figures, and the engine's data, versions, updates not yet aggregated, one device "
                        "call), on an accelerator the engine's (none: 1/2 of the machine's memory, 3/4 of an "
                        "accelerator's; inf: unbounded; same results at any budget that fits)",
    "flush_max_tasks": "training results computed ahead of their replies at most, those due first (none: as "
                       "the memory budget allows; same results at any value)",
    "aggregation_buffer": "auto: an aggregator with per-update weights folds each update into a running sum as it "
                          "arrives (no K-update buffer); always: every aggregator gathers its buffer (for checking; "
                          "the same results up to float summation order)",
}

PATH_FIELDS = ("dataset", "availability", "device_profile")  # may name a file


@functools.lru_cache(maxsize=1)
def _field_types() -> tuple[tuple[str, typing.Any, type, bool], ...]:
    """(field, hint, base type, optional) of every Scenario field."""
    hints = typing.get_type_hints(Scenario)
    out = []
    for f in dataclasses.fields(Scenario):
        args = typing.get_args(hints[f.name])
        base = next((a for a in args if a is not type(None)), hints[f.name])
        out.append((f.name, hints[f.name], base, type(None) in args))
    return tuple(out)


def _check_types(sc: Scenario) -> None:
    """Every field of ``sc`` has its annotated type: an int is an int (not a bool, not a float), a
    float any real number but a bool, a string a string, a bool a bool, an option field a dict; a
    numpy scalar counts as its Python value (and is stored as one). Raises OptionError naming the
    field: values from ``--set`` and files are parsed by type (``with_overrides``), but the
    Python API passes them as they are."""
    for name, hint, base, optional in _field_types():
        value = getattr(sc, name)
        if value is None and optional:
            continue
        if isinstance(value, np.generic):  # np.int64(3) -> 3, so config.json records a number
            value = value.item()
            object.__setattr__(sc, name, value)
        ok = {bool: lambda v: isinstance(v, bool),
              int: lambda v: isinstance(v, int) and not isinstance(v, bool),
              float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              str: lambda v: isinstance(v, str),
              dict: lambda v: isinstance(v, dict)}[base](value)
        if not ok:
            raise OptionError(f"{name}={value!r}: expected {type_name(hint)}, got {type(value).__name__}")


def _names_file(field: str, value) -> bool:
    if not isinstance(value, str) or value.startswith(("ref:", "tfds:")):
        return False
    if field == "dataset":
        return value.lower().endswith(".npz")
    from .registry import is_file_name

    return is_file_name(value)


def _absolute(field: str, value: str, base: Path | None = None) -> str:
    """``value`` as an absolute path (relative to ``base``, else the working folder); a path that
    cannot be resolved (a symbolic link loop) is an OptionError naming the field."""
    path = Path(value).expanduser()
    try:
        return str(((base / path) if base is not None and not path.is_absolute() else path).resolve())
    except (OSError, RuntimeError) as e:  # Python raises RuntimeError("Symlink loop from ...") for a loop
        raise OptionError(f"{field}={value!r}: cannot resolve the path ({e}): a symbolic link loop?") from None


def _resolve_paths(data: dict, base: Path) -> dict:
    """A scenario file's relative file names (data, trace and profile files, plugin ``.py`` files),
    taken relative to the file's own folder."""
    out = dict(data)
    for field in PATH_FIELDS:
        value = out.get(field)
        if _names_file(field, value) and not Path(value).expanduser().is_absolute():
            out[field] = _absolute(field, value, base)
    if isinstance(out.get("plugins"), str):  # a module name stays a module name
        out["plugins"] = ",".join(
            _absolute("plugins", p, base) if p.endswith(".py") and not Path(p).expanduser().is_absolute() else p
            for p in (p.strip() for p in out["plugins"].split(",")) if p)
    return out


def _positive(v) -> bool:
    return v > 0 and not math.isnan(v)


# (field, rule, what is allowed): checked when a scenario is built.
_CHECKS: tuple[tuple[str, typing.Callable[[typing.Any], bool], str], ...] = (
    ("num_clients", lambda v: v >= 1, ">= 1"),
    ("alpha", lambda v: _positive(v) and math.isfinite(v), "a finite number > 0"),
    ("num_train", lambda v: v >= 1, ">= 1 (or none for all)"),
    ("num_test", lambda v: v >= 1, ">= 1 (or none for all)"),
    ("batch_size", lambda v: v >= 1, ">= 1"),
    ("learning_rate", lambda v: _positive(v) and math.isfinite(v), "a finite number > 0"),
    ("local_mode", lambda v: v in ("epochs", "steps"), "'epochs' or 'steps'"),
    ("local_epochs", lambda v: v >= 1, ">= 1"),
    ("local_steps", lambda v: v >= 1, ">= 1"),
    ("eval_max_batches", lambda v: v >= 1, ">= 1 (or none for all)"),
    ("slot_s", lambda v: _positive(v) and math.isfinite(v), "a finite number of seconds > 0"),
    ("trace_start_s", lambda v: v >= 0 and math.isfinite(v), "a finite number of seconds >= 0"),
    ("trace_speedup", lambda v: _positive(v) and math.isfinite(v), "a finite number > 0"),
    ("trace_form", lambda v: v in ("auto", "table", "function"), "auto, table or function"),
    ("concurrency", lambda v: v >= 1, ">= 1"),
    ("aggregation_goal", lambda v: v >= 1, ">= 1"),
    ("overcommit", lambda v: v >= 1 and math.isfinite(v), "a finite number >= 1"),
    ("server_optimizer", lambda v: v in ("sgd", "momentum", "adagrad", "adam", "yogi"),
     "sgd, momentum, adagrad, adam or yogi (or none: the strategy's own)"),
    ("server_momentum", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("server_tau", lambda v: _positive(v) and math.isfinite(v), "a finite number > 0"),
    ("prox_mu", lambda v: v >= 0 and math.isfinite(v), "a finite number >= 0 (or none: the strategy's own)"),
    ("timeout_s", lambda v: v > 0, "> 0 seconds (inf disables the timer)"),
    ("interruption", lambda v: v in ("resume", "restart", "abandon", "run_to_end", "run_to_end_hold", "partial"),
     "resume, restart, abandon, run_to_end, run_to_end_hold or partial (or none: the strategy's own)"),
    ("semantics", lambda v: v in ("paper", "paper_code"), "paper or paper_code"),
    ("utility_from", lambda v: v in ("first_batch", "all_steps"), "first_batch or all_steps"),
    ("oracle_departure", lambda v: v in ("keep_slot", "free_slot"), "keep_slot or free_slot"),
    ("target_accuracy", lambda v: 0 < v <= 1, "in (0, 1] (or none)"),
    ("max_virtual_hours", lambda v: v > 0, "> 0 (inf: no limit)"),
    ("max_aggregations", lambda v: v >= 1, ">= 1"),
    ("eval_every", lambda v: v >= 1, ">= 1"),
    ("stop_window", lambda v: v >= 1, ">= 1"),
    ("eval_batch", lambda v: v >= 1, ">= 1"),
    ("seed", lambda v: 0 <= v < 2 ** 32, "an integer in [0, 2^32)"),
    ("devices", lambda v: v >= 1, ">= 1 (or none for every device jax sees)"),
    ("memory_budget_gb", _positive,
     "a number of GB > 0 (inf, or any size beyond the machine's memory: unbounded; none: half of this "
     "machine's memory, three quarters of an accelerator's)"),
    ("flush_max_tasks", lambda v: v >= 1, ">= 1 (or none: as many as the memory budget allows)"),
    ("aggregation_buffer", lambda v: v in ("auto", "always"), "auto or always"),
    ("partition", lambda v: v in ("dirichlet", "iid", "natural", "speaker", "reference", "pool"),
     "dirichlet, iid, natural (= speaker: one client per id in the data), reference, or pool (clients draw "
     "from the whole data set: any population size)"),
)
