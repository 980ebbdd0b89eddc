"""Shared fixtures: tiny federated data sets the tests make themselves, the offline data folder, the
cohort engine's debug checks, a model to compute by hand, forced CPU devices, an XLA compile counter
and chex's jit variants."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from felix_jax.cohort.checks import DEBUG_CHECKS_ENV
from felix_jax.data.dataset import ArrayDataset
from felix_jax.data.federated import FederatedData, HeldOutSet, held_out_to_device, to_device
from felix_jax.data.partition import partition_from_counts
from felix_jax.models.base import Model

# ---------------------------------------------------------------- the offline data folder
# The library reads its offline data only from $FELIX_JAX_DATA (or an explicit path). The
# tests also look beside the checkout: when FELIX_JAX_DATA is unset and ../shared/data exists,
# it is set here, once, at conftest import, i.e. before any test module is collected, so every
# test and every subprocess a test starts (the CLI, the benchmark scripts) sees the same folder.
# FELIX_JAX_TEST_NO_SHARED=1 turns that fallback off, to run the suite as on a fresh clone
# without data (`env -u FELIX_JAX_DATA FELIX_JAX_TEST_NO_SHARED=1 python -m pytest -q`):
# every test that needs a data file then skips, naming the file (needs_data / require_data).
DATA_ENV = "FELIX_JAX_DATA"
NO_SHARED_ENV = "FELIX_JAX_TEST_NO_SHARED"
SHARED_FALLBACK = Path(__file__).resolve().parents[2] / "shared" / "data"

if not os.environ.get(DATA_ENV) and os.environ.get(NO_SHARED_ENV, "") in ("", "0") and SHARED_FALLBACK.is_dir():
    os.environ[DATA_ENV] = str(SHARED_FALLBACK)

# The cohort engine's debug checks (felix_jax/cohort/checks.py: shapes, dtypes, finite client updates)
# are on for the whole run, subprocesses included, unless the caller chose (FELIX_JAX_DEBUG_CHECKS=0).
os.environ.setdefault(DEBUG_CHECKS_ENV, "1")

# ---------------------------------------------------------------- one XLA compilation cache per test session
# Most tests build fresh engines of the same tiny models, and a fresh jitted function compiles its
# program again though an earlier test compiled the same one. jax's persistent compilation cache,
# in a folder of this session only (empty at the start, so no result depends on an earlier
# session's files), hands each program compiled once to every later test and to the processes the
# tests start (tests/test_strategies.py and tests/test_update_guard.py: 135 s of CPU without it,
# 55 s with it). Every program still counts in CompileCount (jax's compile event covers a cache
# read too), and the retrace guards count traces. jax keeps the folder it first used; a CLI call
# in a test (`felix-jax run` enables the cache with a 0.5 s threshold) changes the threshold, which
# each test gets back at 0: every program cached.
XLA_CACHE_SETTINGS = {"jax_persistent_cache_min_compile_time_secs": 0.0,
                      "jax_persistent_cache_min_entry_size_bytes": 0}


@pytest.fixture(scope="session", autouse=True)
def session_compilation_cache(tmp_path_factory):
    # under pytest-xdist (the default: addopts' -n) every worker is a session of its own, with its own
    # base folder inside the run's: the workers of one run share one cache there, so a program one
    # worker compiled is read back by the others. An entry read while another worker is still writing
    # it fails to load, and jax then compiles the program itself (with a warning): never a wrong program.
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp("xla-cache")
    else:
        folder = tmp_path_factory.getbasetemp().parent / "xla-cache"
        folder.mkdir(exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    with pytest.MonkeyPatch.context() as env:  # for the processes the tests start
        env.setenv("JAX_COMPILATION_CACHE_DIR", str(folder))
        env.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        env.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
        yield folder


@pytest.fixture(autouse=True)
def cache_every_program(session_compilation_cache):
    for key, value in XLA_CACHE_SETTINGS.items():
        jax.config.update(key, value)


# Read once here: some tests clear FELIX_JAX_DATA for themselves (monkeypatch) and still need the real folder.
DATA_DIR: Path | None = Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None

# The data files tests may need, relative to the data folder.
REFERENCE_FILE = "traces/felix_reference_300clients.npz"  # ref:NAME, mobiperf, partition=reference/pool, ...
CIFAR10_FILE = "cifar10/cifar10_jpeg_bytes.npz"
SPEECH_FILE = "speech_commands/speech_commands_v0.02_test.npz"
FLASH_FILES = ("traces/flash_benchmark2score.json", "traces/flash_speed_distri.json")


def missing_data(*relative: str) -> list[str]:
    """Those of the data files (relative to the data folder) that the data folder lacks and felix-jax does
    not ship (the reference traces and FLASH files are package data: never missing)."""
    from felix_jax.traces.data_paths import shipped_file

    return [r for r in relative if (DATA_DIR is None or not (DATA_DIR / r).is_file()) and shipped_file(r) is None]


def _skip_reason(missing: list[str]) -> str:
    where = f"set {DATA_ENV}" if DATA_DIR is None else f"not under {DATA_ENV}={DATA_DIR}"
    return f"needs {', '.join(missing)}: {where}"


def needs_data(*relative: str) -> pytest.MarkDecorator:
    """Marks a test (or a module, as ``pytestmark``) to skip unless the data folder holds these files."""
    missing = missing_data(*relative)
    return pytest.mark.skipif(bool(missing), reason=_skip_reason(missing))


def require_data(*relative: str) -> Path:
    """The data folder, or a skip naming the files it lacks (for tests that decide at run time)."""
    __tracebackhide__ = True  # the skip is reported at the calling test's line
    missing = missing_data(*relative)
    if missing:
        pytest.skip(_skip_reason(missing))
    return DATA_DIR


def make_image_dataset(num_train=600, num_test=64, shape=(8, 8, 3), seed=0) -> ArrayDataset:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (num_train,) + shape, dtype=np.uint8)
    y = rng.integers(0, 10, num_train).astype(np.int32)
    tx = rng.integers(0, 256, (num_test,) + shape, dtype=np.uint8)
    ty = rng.integers(0, 10, num_test).astype(np.int32)
    return ArrayDataset("tiny", x, y, tx, ty, 10, input_scale=1 / 255, input_mean=(0.5,), input_std=(0.25,))


@pytest.fixture(scope="session")
def tiny():
    """600 random 8x8x3 images over 6 clients of sizes 5, 70, 33, 100, 1, 64."""
    ds = make_image_dataset()
    counts = np.array([5, 70, 33, 100, 1, 64], np.int32)
    part = partition_from_counts(ds.train_x.shape[0], counts, seed=0)
    return ds, part, to_device(ds, part), held_out_to_device(ds)


@pytest.fixture
def without_debug_checks(monkeypatch):
    """For a test that means client updates to be non-finite (the update guard's): the engines it
    builds skip the debug checks, which would stop the first such update."""
    monkeypatch.setenv(DEBUG_CHECKS_ENV, "0")


# ---------------------------------------------------------------- a model to compute by hand
def _linear_logits(params, x):
    return x @ params["w"] + params["b"]


def _linear_loss(params, x, y):
    logits = _linear_logits(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y), logits


# softmax regression on one input feature, two classes, zero initial parameters: logits = x W + b
LINEAR = Model("linear2", lambda key: {"w": jnp.zeros((1, 2)), "b": jnp.zeros(2)}, _linear_logits, _linear_loss,
               (1,), 2, 4, 16)
# three samples (x, y): (1, 1), (-1, 0), (2, 0); client 0 holds the first two, client 1 the third
LINEAR_X = np.array([[1.0], [-1.0], [2.0]], np.float32)
LINEAR_Y = np.array([1, 0, 0], np.int32)


def linear_data() -> tuple[FederatedData, HeldOutSet]:
    """:data:`LINEAR`'s client data and, the same three samples, its test set (inputs as they are)."""
    one, zero = jnp.ones((), jnp.float32), jnp.zeros(1)
    data = FederatedData(x=jnp.asarray(LINEAR_X), y=jnp.asarray(LINEAR_Y),
                         index_table=jnp.array([[0, 1], [2, 0]], jnp.int32), counts=jnp.array([2, 1], jnp.int32),
                         input_scale=one, input_mean=zero, input_std=jnp.ones(1))
    return data, HeldOutSet(jnp.asarray(LINEAR_X), jnp.asarray(LINEAR_Y), one, zero, jnp.ones(1))


# ---------------------------------------------------------------- several CPU devices
ROOT = Path(__file__).resolve().parents[1]
FORCED_DEVICES = 4


class ForcedDevices:
    """Python code run in a fresh interpreter whose jax sees ``devices`` CPU devices.

    The device count has to be set before jax starts its backend (the first jax operation), which
    in this process has long happened, and the test process itself stays on one device (an engine
    takes every device jax sees): each script starts with ``chex.set_n_cpu_devices(devices)``
    (``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``). The checkout and ``tests/`` are on
    the script's path, so it imports this checkout's package and can ``from conftest import ...``.
    """

    def command(self, code: str, devices: int, *args) -> list[str]:
        preamble = f"import chex\nchex.set_n_cpu_devices({int(devices)})\n"
        return [sys.executable, "-c", preamble + textwrap.dedent(code), *(str(a) for a in args)]

    def env(self, **extra: str) -> dict:
        path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
        return {**os.environ, **extra, "JAX_PLATFORMS": "cpu", "PYTHONPATH": path}

    def run(self, code: str, devices: int = FORCED_DEVICES, *args, timeout: int = 600, **extra_env: str) -> str:
        """Runs ``code`` to the end and returns its stdout (a failure shows its stderr)."""
        proc = subprocess.run(self.command(code, devices, *args), env=self.env(**extra_env), cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    def popen(self, code: str, devices: int, *args, **extra_env: str) -> subprocess.Popen:
        """Starts ``code`` (for several processes at once); stdout and stderr are pipes."""
        return subprocess.Popen(self.command(code, devices, *args), env=self.env(**extra_env), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="session")
def forced_devices() -> ForcedDevices:
    """Runs scripts on forced CPU devices (:class:`ForcedDevices`): the one way the tests get several."""
    return ForcedDevices()


# ---------------------------------------------------------------- XLA compilations
class CompileCount:
    """``with CompileCount() as c: ...``: ``c.count`` is the number of XLA programs compiled in this
    process inside the block (every jitted function and every eager operation of a new shape), from
    jax's compile events: the counter behind a run summary's ``xla_compilations``. Read inside the
    block, the count so far."""

    def __enter__(self) -> "CompileCount":
        from felix_jax.experiment.results import _compiles  # its import registers the listener

        self._compiles, self._stop = _compiles, None
        self._start = _compiles["total"]
        return self

    def __exit__(self, *exc) -> None:
        self._stop = self._compiles["total"]

    @property
    def count(self) -> int:
        return (self._compiles["total"] if self._stop is None else self._stop) - self._start


# ---------------------------------------------------------------- chex variants
class JitVariants(chex.TestCase):
    """Base of tests under ``@chex.variants(with_jit=True, without_jit=True)``.

    The library's functions are jitted themselves, so chex's ``without_jit`` (the identity) would
    still run them compiled: :meth:`run_variant` runs ``without_jit`` under ``jax.disable_jit()``,
    op by op in Python, and ``with_jit`` under ``jax.jit``.
    """

    def jit_mode(self):
        """A context for host code under test: jit disabled for ``without_jit``, as deployed otherwise."""
        return jax.disable_jit() if self.variant.type is chex.ChexVariantType.WITHOUT_JIT else contextlib.nullcontext()

    def run_variant(self, fn, *args, static_argnames=None, **kwargs):
        wrapped = self.variant(fn, static_argnames=static_argnames)
        with self.jit_mode():
            return wrapped(*args, **kwargs)
