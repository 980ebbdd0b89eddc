"""A user's own data set on the first try: ``felix-jax run --set dataset=my_data.npz`` without a preset
or a config file runs the default preset on it, fitted to the data: a model that takes its inputs
(the preset's where it fits, else ``mlp``, which flattens any input) and the file's name as the run's
name; one line says what was chosen and how to choose otherwise."""

from __future__ import annotations

import zipfile
from pathlib import Path

from .registry import FLAT_INPUT_MODELS, check_model_input
from .scenario import Scenario


def npz_input_shape(path: str) -> tuple[int, ...] | None:
    """The per-sample shape of ``train_x`` in an NPZ, read from its header alone (None where it cannot be
    read: the data set's loader then reports the file's problem)."""
    from numpy.lib import format as npy

    try:
        with zipfile.ZipFile(path) as z, z.open("train_x.npy") as f:
            version = npy.read_magic(f)
            read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
            if read is None:
                return None
            shape = read(f)[0]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return tuple(int(d) for d in shape[1:]) if len(shape) >= 1 else None


def fitting_model(model: str, input_shape: tuple[int, ...]) -> str:
    """``model`` where its layers take inputs of ``input_shape``, else the first flat-input model."""
    try:
        check_model_input(model, input_shape)
        return model
    except ValueError:
        return FLAT_INPUT_MODELS[0]


def own_data_defaults(sc: Scenario, sets: dict[str, str], chosen: bool) -> tuple[Scenario, str | None]:
    """``sc`` fitted to a user's NPZ given with ``--set dataset=FILE.npz`` (``sets``), and the line that
    says so; unchanged (None) for a built-in data set, or where the user chose the scenario (``chosen``:
    a preset or a config file) — their model and name stand."""
    dataset = sets.get("dataset", "")
    if chosen or not dataset.lower().endswith(".npz"):
        return sc, None
    changes, said = {}, []
    shape = npz_input_shape(dataset)
    if "model" not in sets and shape is not None:
        model = fitting_model(sc.model, shape)
        if model != sc.model:
            changes["model"] = model
        kind = "image" if len(shape) == 3 else "flat" if len(shape) == 1 else f"{len(shape)}-D"
        said.append(f"model={model} (fits its {kind} inputs {shape}; --set model=NAME, or a plugin's model)")
    if "name" not in sets:
        changes["name"] = Path(dataset).stem
        said.append(f"name {changes['name']}")
    fitted = sc.with_overrides(changes) if changes else sc
    target = "none" if fitted.target_accuracy is None else f"{fitted.target_accuracy:g}"
    said.append(f"the {sc.name} preset's settings otherwise: target_accuracy={target}, {fitted.num_clients} clients, "
                f"partition={fitted.partition}, at most {fitted.max_aggregations} aggregations (--set KEY=V "
                "to change any)")
    return fitted, f"felix-jax run: your data set {dataset}: " + "; ".join(said)
