"""The files a run reads, fingerprinted: config.json's ``inputs`` section and the checks made with it.

A run records, for every file it reads (its data set, availability trace, device profile, plugin
sources and scenario file), the file's size, modification time and a BLAKE2 digest of its content
(:func:`fingerprint_inputs`). :func:`changed_inputs` compares a record with the files as they are now:
a file whose size and modification time are unchanged is taken as unchanged without being read; one
whose size or time differs is read, and counts as changed only if its content differs (a ``touch`` or a
copy changes nothing). ``compare`` reruns a cell whose inputs changed, ``run --resume`` refuses one,
and ``run --config`` warns.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from ..options import OptionError
from .scenario import Scenario

INPUTS_SECTION = "inputs"


class InputsChanged(OptionError):
    """A results folder's recorded input files changed since its run (one line naming the first)."""


def input_files(sc: Scenario, scenario_file: str | os.PathLike | None = None) -> dict[str, str]:
    """``{absolute path: role}`` of every file a run of ``sc`` reads (roles: dataset, trace, device_profile,
    plugin, scenario). A named data set or reference file is named where it is found (the data home, else
    the copy shipped in the package); one not found is left out (a run without it fails before it records
    anything)."""
    from ..data import catalog
    from .registry import is_file_name

    files: dict[str, str] = {}

    def add(path, role: str) -> None:
        p = Path(path).expanduser()
        if p.is_file():
            files.setdefault(str(p.resolve()), role)

    def named(name: str, role: str) -> None:
        if name == "flash":
            for p in _flash_files():
                add(p, role)
            return
        found = catalog.locate(name)
        if found is not None:
            add(found, role)

    if sc.dataset.lower().endswith(".npz"):
        add(sc.dataset, "dataset")
    elif sc.dataset == "cifar10_binary":
        from ..data.cifar10 import BINARY_RELPATH
        from ..traces.data_paths import data_home

        add(data_home()[0] / BINARY_RELPATH, "dataset")
    elif sc.dataset in catalog.DATASET_FIELD:
        named(catalog.DATASET_FIELD[sc.dataset], "dataset")
    if sc.partition in ("reference", "pool"):
        named("reference_traces", "dataset")
    if is_file_name(sc.availability):
        add(sc.availability, "trace")
    elif sc.availability.startswith("ref:") or sc.availability == "mobiperf":
        named("reference_traces", "trace")
    if is_file_name(sc.device_profile):
        add(sc.device_profile, "device_profile")
    elif sc.device_profile == "reference":
        named("reference_traces", "device_profile")
    elif sc.device_profile == "flash":
        named("flash", "device_profile")
    for item in filter(None, (p.strip() for p in sc.plugins.split(","))):
        if item.endswith(".py"):
            add(item, "plugin")
        else:  # an importable module: its source file
            try:
                spec = importlib.util.find_spec(item)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.origin and spec.origin not in ("built-in", "frozen"):
                add(spec.origin, "plugin")
    if scenario_file is not None:
        add(scenario_file, "scenario")
    return files


def _flash_files() -> list[Path]:
    from ..traces.data_paths import resolve_data_file

    out = []
    for name in ("flash_benchmark2score.json", "flash_raw_ai_benchmark_list.json", "flash_speed_distri.json"):
        try:
            out.append(resolve_data_file(f"traces/{name}"))
        except FileNotFoundError:
            pass
    return out


def data_needed(sc: Scenario) -> list[str]:
    """The named data sets (felix_jax.data.catalog) a run of ``sc`` reads, in a fixed order."""
    from ..data import catalog

    need = []
    if sc.dataset in catalog.DATASET_FIELD:
        need.append(catalog.DATASET_FIELD[sc.dataset])
    if (sc.partition in ("reference", "pool") or sc.availability == "mobiperf" or sc.availability.startswith("ref:")
            or sc.device_profile == "reference"):
        need.append("reference_traces")
    if sc.device_profile == "flash":
        need.append("flash")
    return need


def missing_data(sc: Scenario) -> str | None:
    """One line naming the first data set a run of ``sc`` needs that is not here, the file looked for and
    the command that gets it; None when every one is here. Said before any work (no results folder)."""
    from ..data import catalog
    from ..data.download import size_text
    from ..traces.data_paths import DATA_ENV_VAR, data_home, one_level_off_hint

    home, source = data_home()
    for name in data_needed(sc):
        if catalog.locate(name) is not None:
            continue
        ds = catalog.get(name)
        hint = next(filter(None, (one_level_off_hint(home, f) for f in ds.files)), None) if home.is_dir() else None
        if hint:  # a data folder one level too high or too deep
            return f"{sc.name} needs {name}: {hint}"
        where = (f"{DATA_ENV_VAR}={home}" + ("" if home.is_dir() else ", no such folder") if source == DATA_ENV_VAR
                 else f"the data home {home}")
        looked = " or ".join(str(home / f) for f in ds.files)
        if ds.shipped:  # a broken install: the package data is gone
            return (f"{sc.name} needs {ds.title}, which ships with felix-jax, but {looked} is missing "
                    "(reinstall felix-jax)")
        size = size_text(ds.archive.size)
        return (f"{sc.name} needs {name} ({ds.title}), not found in {where} (looked for {looked}): get it with "
                f"`{catalog.fetch_command(name)}` ({size} download)")
    return None


@functools.lru_cache(maxsize=256)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """The content digest of ``path`` as it was at (size, mtime_ns): a compare's cells share their files."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fingerprint(path: str) -> dict[str, Any]:
    """``{"size", "mtime_ns", "blake2b"}`` of one file."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "blake2b": _digest(path, st.st_size, st.st_mtime_ns)}


def fingerprint_inputs(sc: Scenario, scenario_file: str | os.PathLike | None = None) -> dict[str, dict]:
    """config.json's ``inputs`` section: ``{path: {"role", "size", "mtime_ns", "blake2b"}}``."""
    return {path: {"role": role, **fingerprint(path)} for path, role in sorted(input_files(sc, scenario_file).items())}


def changed_inputs(recorded: Any, roles: tuple[str, ...] = ("dataset", "trace", "device_profile", "plugin")) \
        -> list[str]:
    """The recorded input files (of ``roles``) that are missing or whose content changed since the record,
    each as ``"<role> <path> (<how>)"``; ``[]`` for a record without an inputs section (an older run)."""
    if not isinstance(recorded, dict):
        return []
    out = []
    for path, rec in recorded.items():
        if not isinstance(rec, dict) or rec.get("role") not in roles:
            continue
        try:
            st = os.stat(path)
        except OSError:
            out.append(f"{rec['role']} {path} (missing)")
            continue
        if st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns"):
            continue
        try:
            digest = _digest(path, st.st_size, st.st_mtime_ns)
        except OSError:
            out.append(f"{rec['role']} {path} (unreadable)")
            continue
        if digest != rec.get("blake2b"):
            out.append(f"{rec['role']} {path} (content changed)")
    return out


def changed_in_folder(run_dir: Path) -> list[str]:
    """:func:`changed_inputs` of a results folder's config.json (``[]`` if it has none or no inputs). A run
    that a plugin's error stopped is resumed once the plugin is fixed: its plugin files may change."""
    import json

    try:
        config = json.loads((Path(run_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return []
    try:
        stopped = json.loads((Path(run_dir) / "summary.json").read_text()).get("stop_reason")
    except (OSError, ValueError, AttributeError):
        stopped = None
    roles = ("dataset", "trace", "device_profile") + (() if stopped == "plugin_error" else ("plugin",))
    return changed_inputs(config.get(INPUTS_SECTION) if isinstance(config, dict) else None, roles)


def warn_changed_inputs(config_file: str | os.PathLike, warn=None) -> list[str]:
    """``run --config`` of a run's config.json: one line on stderr per recorded input file that changed
    since that run (the rerun reads the files as they are now, so its results may differ)."""
    import json
    import sys

    try:
        config = json.loads(Path(config_file).read_text())
    except (OSError, ValueError):
        return []
    changed = changed_inputs(config.get(INPUTS_SECTION) if isinstance(config, dict) else None)
    for item in changed:
        print(f"warning: {config_file}: {item} since the run it records; this run reads it as it is now",
              file=sys.stderr if warn is None else warn)
    return changed
