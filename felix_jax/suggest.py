"""Near matches for a name that is not known: "did you mean", and long lists cut to the nearest few.

Every "unknown ..." message (strategies, presets, regimes, models, scenario fields, policy options)
ends with :func:`known_names`: the closest known name when one is close (``difflib``), then the
known names, all of them when there are few, else the nearest few and where to find the rest
(``felix-jax run --list``). The message stays one line.
"""

from __future__ import annotations

import difflib
from typing import Iterable

LISTING = "felix-jax run --list"
MAX_LISTED = 10  # a list of at most this many names is shown whole
NEAREST = 5  # else the nearest this many
CUTOFF = 0.6  # difflib's ratio from which a name counts as a near match


def _score(name: str, candidate: str) -> float:
    """How close ``candidate`` is to ``name``: difflib's ratio on lower case, plus 1 when one holds the
    other whole and is at least half as long (``timeout`` and ``timeout_s``, ``semantic`` and
    ``semantics``; not ``a`` in ``normalise``)."""
    a, b = name.lower(), candidate.lower()
    ratio = difflib.SequenceMatcher(None, a, b).ratio()
    short, long_ = sorted((a, b), key=len)
    holds = len(short) >= 3 and 2 * len(short) >= len(long_) and short in long_
    return ratio + (1.0 if holds else 0.0)


def nearest(name: str, known: Iterable[str], n: int = NEAREST) -> list[str]:
    """The ``n`` known names closest to ``name``, closest first (ties in the known names' order)."""
    names = list(dict.fromkeys(known))
    order = sorted(range(len(names)), key=lambda i: (-_score(name, names[i]), i))
    return [names[i] for i in order[:n]]


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The one known name close enough to ``name`` to suggest (None: none is)."""
    best = nearest(name, known, 1)
    return best[0] if best and _score(name, best[0]) >= CUTOFF and best[0] != name else None


def known_names(name: str, known: Iterable[str], what: str = "names", extra: str = "",
                listing: str | None = LISTING) -> str:
    """``"; did you mean 'X'? known: a, b, c"`` for a message about the unknown ``name``: the near match
    if there is one, then every known name when there are at most :data:`MAX_LISTED`, else the nearest
    :data:`NEAREST` and ``listing`` (the command that shows all of them, ``what`` naming them).
    ``extra`` follows the names (``", ref:NAME, or a trace file"``)."""
    names = list(dict.fromkeys(known))
    guess = did_you_mean(name, names)
    head = f"; did you mean {guess!r}?" if guess else ""
    if len(names) <= MAX_LISTED:
        return f"{head} known: {', '.join(names)}{extra}" if head else f"; known: {', '.join(names)}{extra}"
    rest = f" ({listing} shows all {len(names)} {what})" if listing else f" (and {len(names) - NEAREST} more)"
    return f"{head or ';'} nearest known: {', '.join(nearest(name, names))}{extra}{rest}"
