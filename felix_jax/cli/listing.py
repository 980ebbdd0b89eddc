"""``felix-jax run --list``: every scenario field, preset, strategy, regime and option, and the two
readings' switches side by side (host-only)."""

from __future__ import annotations

def print_readings() -> None:
    """The two readings' switches side by side, with the authors' file:line each reproduces."""
    import dataclasses

    from ..fleet.reading import SWITCH_SOURCES, Reading
    from ..options import to_json

    text, code = Reading.paper(), Reading.paper_code()
    print("readings (--set semantics=paper|paper_code; one switch on top: --set reading.KEY=V; "
          "'as_ran': each strategy's own, none: the scenario field's; docs/readings.md):")
    print(f"  {'switch':<32} {'paper':<14} {'paper_code':<18} source")
    for f in dataclasses.fields(Reading):
        if f.name == "semantics":
            continue
        a, b = to_json(getattr(text, f.name)), to_json(getattr(code, f.name))
        print(f"  {f.name:<32} {str(a):<14} {str(b):<18} {SWITCH_SOURCES.get(f.name, '')}")
    from ..policies.selectors.oort_math import OortConfig

    sync = code.selector_options("sync")
    for key, value in code.selector_options("async").items():
        source = next((v for k, v in SWITCH_SOURCES.items() if k.startswith("selector.") and key in k), "")
        shown = value if sync[key] == value else f"{value} (sync: {sync[key]})"
        print(f"  {'selector.' + key:<32} {str(to_json(getattr(OortConfig(), key))):<14} {str(shown):<18} {source}")


def print_listing(preset: str = "quickstart") -> None:
    from ..experiment import PRESETS, STRATEGIES
    from ..experiment.registry import AVAILABILITY, DEVICE_PROFILES, MODELS
    from ..policies import AGGREGATOR_OPTIONS, SELECTOR_OPTIONS

    import dataclasses
    import typing

    from ..experiment import Scenario
    from ..experiment.scenario import FIELD_HELP

    from ..experiment import get_preset

    chosen = get_preset(preset)  # what `run --preset PRESET` runs: its values where they differ
    print(f"scenario fields (--set FIELD=V or a JSON file of fields; type = default [preset {preset}'s value where "
          f"it differs; another preset's: run --preset NAME --list]: meaning):")
    hints = typing.get_type_hints(Scenario)
    for f in dataclasses.fields(Scenario):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = getattr(hints[f.name], "__name__", None) or str(hints[f.name]).replace("typing.", "")
        value = getattr(chosen, f.name)
        differs = f" [{preset}: {value!r}]" if value != default else ""
        print(f"  {f.name:<20} {kind} = {default!r}{differs}: {FIELD_HELP.get(f.name, '')}")
    print("presets:")
    for name, sc in PRESETS.items():
        print(f"  {name:<16} {sc.dataset}, {sc.model}, {sc.num_clients} clients, strategy {sc.strategy}, "
              f"availability {sc.availability}, target {sc.target_accuracy}")
    print("strategies (mode, availability knowledge: none = learned from replies and timeouts, tiertrack = "
          "every client's tier changes, oracle = the true trace; selector + aggregator):")
    width = max(len(n) for n in STRATEGIES)
    for name, st in STRATEGIES.items():
        print(f"  {name:<{width}}  {st.mode:<5}  {st.knowledge.value:<9}  {st.selector} + {st.aggregator}: "
              f"{st.description}")
    print("availability regimes:", ", ".join(AVAILABILITY), "(and ref:NAME for a shared reference trace)")
    print("device profiles:", ", ".join(DEVICE_PROFILES))
    print("models:", ", ".join(MODELS))
    print("policy options (--set selector.KEY=V, eval_selector.KEY=V, aggregator.KEY=V; a strategy's own defaults "
          "are in its description and in config.json):")
    for kind, specs in (("selector", SELECTOR_OPTIONS), ("aggregator", AGGREGATOR_OPTIONS)):
        for name, spec in specs.items():
            lines = spec.describe()
            print(f"  {kind} {name}:" + (" no options" if not lines else ""))
            for line in lines:
                print(f"      {line}")
    print_readings()
    from ..cohort.adversary import AdversaryConfig
    from ..data.streams import StreamConfig
    from ..fleet.update_guard import UpdateGuardConfig
    from ..options import OptionSpec

    for field, config, what in (("update_guard", UpdateGuardConfig, "dropping bad client updates"),
                                ("stream", StreamConfig, "client data streams: arrivals, drift, delayed labels"),
                                ("adversary", AdversaryConfig, "adversarial clients: a seeded share of the "
                                 "population sends corrupted updates")):
        print(f"{field} options (--set {field}.KEY=V; {what}):")
        for line in OptionSpec(config).describe():
            print(f"      {line}")
