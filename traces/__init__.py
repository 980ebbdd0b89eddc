"""Availability traces and device profiles (host-side numpy; docs/architecture.md).

Installed as ``felix_jax.traces``. See ``availability`` (the trace type and its
semantics), ``generators``, ``loaders`` and ``device_profile``.
"""

from .availability import BEYOND_END_POLICIES, AvailabilityTrace, Tier
from .data_paths import DATA_ENV_VAR, DataFileError, resolve_data_file
from .device_profile import (
    load_device_profile,
    DeviceProfile,
    fedscale_task_time_s,
    flash_profile,
    paper_halfnormal,
    reference_profile,
)
from .generators import always_available, diurnal, slot_bernoulli
from .loaders import (
    REFERENCE_TRACE_NAMES,
    ReferenceClients,
    load_fedscale_trace,
    load_interval_csv,
    load_interval_npz,
    load_reference_clients,
    load_reference_trace,
    save_interval_csv,
    save_interval_npz,
)
from .safe_pickle import PlainDataUnpickler, restricted_pickle_load

__all__ = [
    "AvailabilityTrace",
    "BEYOND_END_POLICIES",
    "DATA_ENV_VAR",
    "DataFileError",
    "DeviceProfile",
    "PlainDataUnpickler",
    "REFERENCE_TRACE_NAMES",
    "ReferenceClients",
    "Tier",
    "always_available",
    "diurnal",
    "fedscale_task_time_s",
    "flash_profile",
    "load_device_profile",
    "load_fedscale_trace",
    "load_interval_csv",
    "load_interval_npz",
    "load_reference_clients",
    "load_reference_trace",
    "paper_halfnormal",
    "reference_profile",
    "resolve_data_file",
    "restricted_pickle_load",
    "save_interval_csv",
    "save_interval_npz",
    "slot_bernoulli",
]
