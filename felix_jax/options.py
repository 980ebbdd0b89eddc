"""Policy options: dotted scenario keys -> frozen config dataclasses (the CLI edge).

A strategy composes a selector, an optional eval selector and an aggregator,
each configured by a frozen dataclass (``OortConfig``, ``TierFuseConfig``, ...).
A scenario reaches every field of those dataclasses by name
(``--set aggregator.normalize=true``, ``"selector": {"variant": "fedscale"}``);
this module turns such option dicts into config instances, once per run, with
one clear error per unknown key or bad value, and back into JSON for
``config.json``. Strings are parsed by the field's type hint (bool, int, float,
enums by value, ``None``/``null`` for optional fields).

A ``variant`` key picks a named constructor of the config (for example Oort's
``fedscale``), the other keys override its fields.

Every numeric field declares its valid range where its config is defined, in the
class's ``RANGES`` mapping (field name -> :class:`Range`); :meth:`OptionSpec.build`
refuses a value outside it in one line naming the option, the range and the value,
before any work is done. A plugin's config declares its ranges the same way.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import typing
from typing import Any, Callable, Mapping


class OptionError(ValueError):
    """A bad option: the message is one line naming the key, the value and what is allowed."""


def parse_value(key: str, value: Any, hint: Any) -> Any:
    """``value`` (a string from ``--set`` or a JSON value) converted to ``hint``'s type."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    optional = type(None) in args
    if origin is typing.Literal:
        if value not in args:
            raise OptionError(f"{key}={value!r}: allowed values are {', '.join(map(repr, args))}")
        return value
    base = next((a for a in args if a is not type(None)), hint) if origin in (typing.Union, _UnionType) else hint
    if value is None or (isinstance(value, str) and optional and value.strip().lower() in ("none", "null", "")):
        if optional:
            return None
        raise OptionError(f"{key}: a value is required (not None)")
    try:
        if isinstance(base, type) and issubclass(base, enum.Enum):
            names = [m.value for m in base]
            if isinstance(value, base):
                return value
            if value not in names:
                raise OptionError(f"{key}={value!r}: allowed values are {', '.join(map(str, names))}")
            return base(value)
        if base is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise OptionError(f"{key}={value!r}: expected true or false")
        if base is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        if base is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if math.isnan(out):
                raise OptionError(f"{key}={value!r}: expected a number, got NaN")
            return out
        if base is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except OptionError:
        raise
    except (TypeError, ValueError):
        raise OptionError(f"{key}={value!r}: expected {type_name(hint)}") from None
    return value


_UnionType = type(int | None)


def type_name(hint: Any) -> str:
    """A field's type hint as messages and ``--help`` name it (``int``, ``list of float``, ``'a' | 'b'``)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    base = args[0] if args else hint
    if typing.get_origin(hint) is typing.Literal:
        return " | ".join(map(repr, typing.get_args(hint)))
    if typing.get_origin(hint) in (tuple, list):  # tuple[int, ...]: a comma-separated list on the command line
        return f"list of {getattr(args[0], '__name__', args[0])}"
    if isinstance(base, type) and issubclass(base, enum.Enum):
        name = " | ".join(str(m.value) for m in base)
    else:
        name = getattr(base, "__name__", str(base))
    return f"{name} or none" if optional else name


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric option accepts: ``low``..``high``, each end open or closed.

    Infinite values are refused unless ``inf_ok`` (an option where ``inf`` means "no limit"); NaN always.
    An int option's range (:meth:`of`) ends within int64, the type its values meet in the fleet's arrays.

    >>> str(Range.fraction()), str(Range.above(0)), str(Range.at_least(1).of(int))
    ('in [0, 1]', 'a finite number > 0', 'in [1, 9223372036854775807]')
    >>> Range.above(0).contains(0.0), Range.fraction().contains(1.0)
    (False, True)
    """

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    inf_ok: bool = False
    integer: bool = False  # an int option's range: whole-number ends, within int64 (:meth:`of`)

    @classmethod
    def fraction(cls) -> "Range":
        return cls(0.0, 1.0)

    @classmethod
    def above(cls, low: float, inf_ok: bool = False) -> "Range":
        return cls(low, math.inf, low_open=True, inf_ok=inf_ok)

    @classmethod
    def at_least(cls, low: float, inf_ok: bool = False) -> "Range":
        return cls(low, math.inf, inf_ok=inf_ok)

    def of(self, hint: Any) -> "Range":
        """This range for an option of type ``hint``: an int option's ends clipped to int64 (its values
        meet numpy int64 arrays: a larger one would overflow mid-run), a float option's as declared."""
        if self.integer or _base_type(hint) is not int:
            return self
        return dataclasses.replace(self, low=max(self.low, INT64_MIN), high=min(self.high, INT64_MAX),
                                   inf_ok=False, integer=True)

    def contains(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and math.isnan(value):  # (an int larger than any float is not NaN)
            return False
        if isinstance(value, float) and math.isinf(value) and \
                not (self.inf_ok and value > 0 and self.high == math.inf):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        num = lambda x: str(int(x)) if self.integer else f"{x:g}"  # noqa: E731
        if self.high == math.inf:
            text = f"{'>' if self.low_open else '>='} {num(self.low)}"
        elif self.low == -math.inf:
            text = f"{'<' if self.high_open else '<='} {num(self.high)}"
        else:
            text = (f"in {'(' if self.low_open else '['}{num(self.low)}, "
                    f"{num(self.high)}{')' if self.high_open else ']'}")
        if self.low == -math.inf or (self.high == math.inf and not self.inf_ok):
            text = f"a finite number {text}"  # an open end refuses inf all the same: said, not implied
        return text + (" (inf: no limit)" if self.inf_ok else "")


INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1


def _base_type(hint: Any) -> Any:
    """``int`` for ``int`` and ``int | None``: the type a field's values have when given."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and typing.get_origin(hint) in (typing.Union, _UnionType) else hint


def ranges_of(config: type | None) -> Mapping[str, Range]:
    """The ``RANGES`` a config class declares (field name -> :class:`Range`); ``{}`` if none."""
    return dict(getattr(config, "RANGES", None) or {})


def check_range(key: str, value: Any, rule: Range | None) -> None:
    """Raises :class:`OptionError` ``key=value: must be <range>`` when ``value`` is outside ``rule``
    (``None`` values are left to the type hint: an optional field's "off")."""
    if rule is None or value is None:
        return
    if not rule.contains(value):
        raise OptionError(f"{key}={value!r}: must be {rule}")


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """How one policy is configured: its config class and its named variants."""

    config: type | None  # a frozen dataclass, or None for a policy without options
    variants: Mapping[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    default_variant: str | None = None

    def fields(self) -> dict[str, Any]:
        if self.config is None:
            return {}
        hints = typing.get_type_hints(self.config)
        return {f.name: hints[f.name] for f in dataclasses.fields(self.config)}

    def build(self, where: str, options: Mapping[str, Any]) -> Any:
        """The config instance for ``options``; ``where`` prefixes keys in errors (``aggregator``)."""
        options = dict(options or {})
        fields = self.fields()
        if self.config is None:
            if options:
                raise OptionError(f"{where}.{next(iter(options))}: this policy has no options")
            return None
        variant = options.pop("variant", self.default_variant)
        if variant is not None and variant not in self.variants:
            from .suggest import did_you_mean

            known = ", ".join(self.variants) or "none"
            guess = did_you_mean(str(variant), self.variants)
            raise OptionError(f"{where}.variant={variant!r}: " + (f"did you mean {guess!r}? " if guess else "")
                              + f"known variants are {known}")
        parsed = {}
        for key, value in options.items():
            if key not in fields:
                from .suggest import known_names

                names = sorted(fields) + (["variant"] if self.variants else [])
                raise OptionError(f"{where}.{key}: unknown option" + known_names(key, names, f"{where} options"))
            parsed[key] = parse_value(f"{where}.{key}", value, fields[key])
        ranges = {key: rule.of(fields.get(key)) for key, rule in ranges_of(self.config).items()}
        for key, value in parsed.items():  # the user's values, before the config's own checks
            check_range(f"{where}.{key}", value, ranges.get(key))
        make = self.variants[variant] if variant is not None else self.config
        try:
            made = make(**parsed)
        except OptionError:
            raise
        except (TypeError, ValueError) as e:
            raise OptionError(f"{where}: {e}") from None
        for key, rule in ranges.items():  # a variant's own values too
            check_range(f"{where}.{key}", getattr(made, key, None), rule)
        return made

    def describe(self) -> list[str]:
        """``name: type = default`` per field, for ``--list`` (and ``; words`` where the config's ``HELP``
        mapping, field name -> text, says what the option accepts)."""
        if self.config is None:
            return []
        default = self.config()
        fields = self.fields()
        ranges = {key: rule.of(fields.get(key)) for key, rule in ranges_of(self.config).items()}
        helps = dict(getattr(self.config, "HELP", None) or {})  # a config's words on an option, if any
        out = [f"{name}: {type_name(hint)} = {to_json(getattr(default, name))}"
               + (f" ({ranges[name]})" if name in ranges else "") + (f"; {helps[name]}" if name in helps else "")
               for name, hint in fields.items()]
        if self.variants:
            out.insert(0, f"variant: {' | '.join(self.variants)}"
                          + (f" = {self.default_variant}" if self.default_variant else ""))
        return out


def to_json(value: Any) -> Any:
    """Config values as JSON (enums by value, dataclasses as dicts, inf as the string 'inf')."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value
