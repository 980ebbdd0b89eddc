"""How a run and a comparison are named by default: the reading shows in the folder name and the
banner, so a run of the authors' code as it ran (``--set semantics=paper_code``) never takes the
plain run's folder."""

from __future__ import annotations

import re
from pathlib import Path

from .scenario import Scenario

DEFAULT_SEMANTICS = "paper"


def _safe(text: str) -> str:
    """``text`` as one folder-name part (no path separators, colons or spaces)."""
    return re.sub(r"[^\w.=+-]", "_", text).replace("=", "-")


def reading_tag(sc: Scenario) -> str:
    """The reading as a folder-name part: ``""`` for the default (the paper's text, no switch set),
    else ``paper_code``, with each ``reading.KEY=V`` switch after it (``paper+serial_server-true``)."""
    if sc.semantics == DEFAULT_SEMANTICS and not sc.reading:
        return ""
    return "+".join([sc.semantics, *(_safe(f"{k}={v}") for k, v in sorted(sc.reading.items()))])


def reading_label(sc: Scenario) -> str:
    """The reading as the run's banner shows it: ``paper``, ``paper_code``, ``paper_code + reading.KEY=V``."""
    return " + ".join([sc.semantics, *(f"reading.{k}={v}" for k, v in sorted(sc.reading.items()))])


def default_run_dir(sc: Scenario) -> Path:
    """``results/<name>-<strategy>-<availability>[-<reading>]-seed<k>``: a trace file by its name, not
    its path; the reading only where it is not the default."""
    regime = Path(sc.availability).name.replace(":", "_")
    tag = reading_tag(sc)
    return Path("results") / f"{sc.name}-{sc.strategy}-{regime}-{tag + '-' if tag else ''}seed{sc.seed}"


def default_compare_dir(base: Scenario) -> Path:
    """``results/compare-<scenario>[-<reading>]``."""
    tag = reading_tag(base)
    return Path("results") / f"compare-{base.name}{'-' + tag if tag else ''}"
