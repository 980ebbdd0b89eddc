"""What a scenario resolves to, and the checks across its fields: the server's :class:`FleetConfig`
and :class:`StopRule`, the resolved sections a run's ``config.json`` records (and a rerun checks),
and the refusals that need several fields and the strategy together. The scenario calls these
checks when it is built and the runner builds from the same functions, so neither module needs the
other: this one reads a scenario and imports neither."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..fleet.config import FleetConfig, StopRule
from ..fleet.knowledge import Knowledge
from ..options import OptionError, to_json
from ..traces import REFERENCE_TRACE_NAMES

if TYPE_CHECKING:
    from .scenario import Scenario


def fleet_config(sc: Scenario, strategy) -> FleetConfig:
    """How the server runs, from the scenario and its strategy (config.json's ``fleet``): the reading's
    switches resolved for the strategy; its ``interruption`` and ``oracle_departure``, where set, over
    the scenario's fields of the same names; ``interruption``, ``server_optimizer`` and ``prox_mu`` the
    scenario leaves unset (none) are the strategy's own (``Strategy.fleet_options``)."""
    reading = sc.resolve_reading().resolved(strategy.mode, strategy.knowledge)
    return FleetConfig(mode=strategy.mode, knowledge=strategy.knowledge, concurrency=sc.concurrency,
                       aggregation_goal=sc.aggregation_goal, overcommit=sc.overcommit, timeout_s=sc.timeout_s,
                       interruption=reading.interruption or strategy.fleet_option("interruption", sc.interruption),
                       sees_eval_tier=strategy.eval_selector is not None,
                       server_optimizer=strategy.fleet_option("server_optimizer", sc.server_optimizer),
                       server_momentum=sc.server_momentum, server_tau=sc.server_tau,
                       prox_mu=strategy.fleet_option("prox_mu", sc.prox_mu), timeout_frees_slot=sc.timeout_frees_slot,
                       utility_from=sc.utility_from, oracle_departure=reading.oracle_departure or sc.oracle_departure,
                       reading=reading, aggregation_buffer=sc.aggregation_buffer)


def stop_rule(sc: Scenario) -> StopRule:
    """When the run ends (config.json's ``stop``)."""
    return StopRule(target_accuracy=sc.target_accuracy, window=sc.stop_window,
                    full_window=sc.resolve_reading().stop_window_fill == "full",
                    max_virtual_s=sc.max_virtual_hours * 3600,
                    max_aggregations=sc.max_aggregations, eval_every=sc.eval_every,
                    eval_batch=sc.eval_batch, stop_at_target=sc.stop_at_target,
                    keep_hits=sc.test_hits)


# config.json's top-level sections: the scenario, what it resolves to (checked on a rerun), and facts
RESOLVED_SECTIONS = ("strategy", "policies", "update_guard", "fleet", "stop")
RECORD_SECTIONS = ("scenario", "model", "backend", "jax", "snapshot", "inputs") + RESOLVED_SECTIONS


def resolved_sections(sc: Scenario) -> dict[str, Any]:
    """What ``sc`` resolves to, as config.json records it (its RESOLVED_SECTIONS)."""
    resolved = sc.resolve_strategy()
    return json.loads(json.dumps({
        "strategy": resolved.strategy.to_json(), "policies": resolved.to_json(),
        "update_guard": to_json(sc.resolve_update_guard()), "fleet": to_json(fleet_config(sc, resolved.strategy)),
        "stop": to_json(stop_rule(sc))}, default=str))


def run_warnings(sc: Scenario) -> list[str]:
    """What a run says once, at its start (``felix-jax run``) and in ``summary.json``'s ``warnings``:
    settings that do nothing or under which a policy is not what its name says. An eval selector named
    for a strategy without one is unused. A robust rule that is the plain mean of
    ``aggregation_goal`` updates (the median of 2, a trim that drops none: :func:`~felix_jax.policies.
    aggregators.robust.plain_mean_reason`) is no more robust than the mean there, nor at an aggregation
    whose accepted updates are fewer; so is Multi-Krum or Bulyan at f=0 averaging every update
    (:func:`~felix_jax.policies.aggregators.byzantine.plain_mean_reason`)."""
    from ..policies.aggregators import byzantine
    from ..policies.aggregators.robust import plain_mean_reason

    resolved = sc.resolve_strategy()
    warnings = []
    if "name" in sc.eval_selector and resolved.strategy.eval_selector is None:
        warnings.append(f"eval_selector.name={sc.eval_selector['name']}: strategy {sc.strategy} has no eval "
                        "selector to replace; the option is unused")
    k = sc.aggregation_goal
    reason = plain_mean_reason(resolved.aggregator, k) or byzantine.plain_mean_reason(resolved.aggregator, k)
    if reason is not None:
        warnings.append(f"aggregator {resolved.strategy.aggregator} is the plain mean of the updates at "
                        f"aggregation_goal={k} (K'={k} accepted updates): {reason}; it is no more robust than the "
                        "mean there, nor at an aggregation with fewer accepted updates (docs/architecture.md, "
                        "\"Robust aggregation\")")
    return warnings


def _first_difference(recorded, resolved, where: str) -> str | None:
    if isinstance(recorded, dict) and isinstance(resolved, dict):
        for key in sorted(set(recorded) | set(resolved)):
            if key not in resolved:
                return f"{where}.{key} is not a setting this felix-jax records"
            if key not in recorded:
                continue  # a setting added since the file was written: the scenario decides it
            found = _first_difference(recorded[key], resolved[key], f"{where}.{key}")
            if found:
                return found
        return None
    if recorded != resolved:
        return f"{where} is {recorded!r} in the file but the scenario section gives {resolved!r}"
    return None


def check_recorded_config(path, data: dict, sc: Scenario) -> None:
    """A run's config.json used as a scenario file: every recorded section must agree with what its
    ``scenario`` section resolves to (a run is rerun from the scenario; an edit made elsewhere would be
    silently ignored), and no unknown section. Raises OptionError (one line) naming the first key."""
    unknown = sorted(set(data) - set(RECORD_SECTIONS))
    if unknown:
        raise OptionError(f"{path}: unknown section {unknown[0]!r} (a run's config.json holds "
                          f"{', '.join(RECORD_SECTIONS)})")
    mine = resolved_sections(sc)
    for section in RESOLVED_SECTIONS:
        if section in data:
            found = _first_difference(data[section], mine[section], section)
            if found:
                raise OptionError(f"{path}: {found}; a rerun follows the scenario section: set the option there "
                                  "(e.g. scenario.aggregator.server_lr) and leave the resolved sections as written")


def check_fleet(sc: Scenario, strategy) -> None:
    """Checks across fields and the strategy, before any data is loaded (a Scenario makes them when it
    is built, so the CLI and the Python API refuse alike)."""
    if sc.availability.startswith("ref:") and sc.availability[4:] not in REFERENCE_TRACE_NAMES:
        from ..suggest import known_names

        raise OptionError(f"availability={sc.availability!r}: unknown reference trace"
                          + known_names(sc.availability, [f"ref:{n}" for n in REFERENCE_TRACE_NAMES], "reference traces"))
    from .registry import AVAILABILITY, is_file_name

    if not sc.availability.startswith("ref:") and not is_file_name(sc.availability) \
            and sc.availability not in AVAILABILITY:  # refused now, not once the run has made its folder
        from .registry import unknown_regime

        raise OptionError(f"availability={sc.availability!r}: {unknown_regime(sc.availability)}")
    from ..policies.aggregators.byzantine import too_few_updates

    why = too_few_updates(sc.resolve_strategy().aggregator, strategy.aggregator, sc.aggregation_goal)
    if why is not None:  # Krum's n > 2f + 2, Bulyan's n >= 4f + 3: refused before any data is loaded
        raise OptionError(why)
    if strategy.mode == "sync" and sc.aggregation_goal > sc.num_clients:
        raise OptionError(f"aggregation_goal={sc.aggregation_goal}: a sync round needs that many distinct clients "
                          f"but the population has num_clients={sc.num_clients}")
    if sc.eval_batch > sc.max_aggregations:  # a batch is padded to its size: 10^9 would allocate 10^9 models
        raise OptionError(f"eval_batch={sc.eval_batch}: more test checkpoints per device call than the run's "
                          f"max_aggregations={sc.max_aggregations} (a batch waits until full and is padded to its "
                          f"size in memory); use at most {sc.max_aggregations}")
    cfg = fleet_config(sc, strategy)
    if cfg.reading.small_clients == "zero_step_reference" and (sc.partition != "reference"
                                                               or sc.local_mode != "epochs"):
        raise OptionError("reading.small_clients=zero_step_reference picks the clients the paper's loader never "
                          "trained by their size in the paper: it needs partition=reference and local_mode=epochs, "
                          f"not partition={sc.partition}, local_mode={sc.local_mode}")
    if cfg.mode == "async" and sc.aggregation_goal > sc.num_clients and (
            cfg.detaches_on_departure or cfg.reading.async_exclusion == "every_async"):
        why = ("TierTrack" if cfg.knowledge is Knowledge.TIERTRACK else "oracle_departure=free_slot"
               if cfg.detaches_on_departure else "reading.async_exclusion=every_async")
        raise OptionError(f"aggregation_goal={sc.aggregation_goal}: strategy {sc.strategy} ({why}) trains each "
                          f"client at most once per aggregation, so it needs that many distinct clients but the "
                          f"population has num_clients={sc.num_clients}: it would never aggregate")
