"""A scenario is pure data: what to emulate (DESIGN.md layer 1).

Strings name registry entries (data set, model, availability regime, device
profile, strategy) and are resolved once, in :mod:`felix_jax.experiment.build`.
``Scenario.with_overrides({"key": "value"})`` parses CLI ``--set`` values by the
field's type.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str = "quickstart"
    # data and model
    dataset: str = "digits"
    num_clients: int = 30
    partition: str = "dirichlet"  # dirichlet | iid | speaker (partition by the data set's keys)
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
    eval_min_age: int = 35  # TierSelect: refresh utilities at least this many rounds old (code: 35)
    eval_budget_factor: float = 1.5  # TierSelect: at most int(factor * K) eval tasks per round
    # fleet
    availability: str = "avail100"  # see felix_jax.experiment.registry.AVAILABILITY
    slot_s: float = 600.0  # slot length of the synthetic regimes avail90 / avail50 (paper: 600 s)
    device_profile: str = "paper_halfnormal"
    strategy: str = "fedbuff"
    concurrency: int = 10
    aggregation_goal: int = 5
    overcommit: float = 1.3
    server_lr: float | None = None  # None: the strategy's default
    server_optimizer: str = "sgd"  # sgd | adam (FedAdam) | yogi (FedYogi), optax transformations
    timeout_s: float = 90.0
    interruption: str = "resume"
    # stopping and metrics
    target_accuracy: float | None = 0.8
    max_virtual_hours: float = 24.0
    max_aggregations: int = 400
    eval_every: int = 1
    seed: int = 0
    plan: str | None = None  # cohort execution plan; None picks per backend

    def __post_init__(self):
        if self.num_clients < 1:
            raise ValueError("num_clients must be >= 1")
        if self.alpha <= 0:
            raise ValueError("alpha must be > 0")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError("target_accuracy must lie in (0, 1]")
        if self.max_virtual_hours <= 0:
            raise ValueError("max_virtual_hours must be > 0")

    def with_overrides(self, overrides: dict[str, typing.Any]) -> "Scenario":
        hints = typing.get_type_hints(Scenario)
        fields = {f.name for f in dataclasses.fields(self)}
        parsed = {}
        for key, value in overrides.items():
            if key not in fields:
                raise KeyError(f"unknown scenario field {key!r}; fields: {', '.join(sorted(fields))}")
            parsed[key] = _parse(value, hints[key]) if isinstance(value, str) else value
        return dataclasses.replace(self, **parsed)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_file(path: str | Path) -> "Scenario":
        data = json.loads(Path(path).read_text())
        data = data.get("scenario", data)
        return Scenario().with_overrides(data)


def _parse(text: str, hint) -> typing.Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    base = args[0] if args else hint
    if optional and text.strip().lower() in ("none", "null", ""):
        return None
    if base is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {text!r}")
    if base in (int, float):
        return base(text)
    return text
