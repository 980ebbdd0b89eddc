"""The viewers the README names open after installing the extras it names: the ``tensorboard`` extra
brings the ``tensorboard`` server (``tensorboard --logdir DIR``), the ``mlflow`` extra the full
``mlflow`` package (``mlflow ui``, which needs flask). Each server is started on a free local port
and answers an HTTP request; each check skips where its extra is not installed."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def extra(name: str) -> set[str]:
    """The distribution names an extra of pyproject.toml requires."""
    reqs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][name]
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in reqs}


def installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_extras_bring_the_viewers():
    assert {"tensorboardx", "tensorboard"} <= extra("tensorboard")  # the writer and the server
    mlflow = extra("mlflow")
    assert "mlflow" in mlflow and "mlflow-skinny" not in mlflow  # skinny has no `mlflow ui` (no flask)


def script(name: str) -> str:
    """The console script beside this interpreter (the environment the extra went into), else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"no {name} command on PATH")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serves(cmd: list[str], url: str, timeout_s: float = 180.0) -> str:
    """Starts ``cmd``, waits until ``url`` answers 200 and returns the page's start; stops the server."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stdout.read()}")
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    assert r.status == 200
                    return r.read(2000).decode(errors="replace")
            except OSError:
                time.sleep(1.0)
        pytest.fail(f"{' '.join(cmd)} did not answer {url} within {timeout_s:.0f} s")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not (installed("tensorboardX") and installed("tensorboard")),
                    reason="needs the tensorboard extra: pip install -e '.[tensorboard]'")
def test_tensorboard_logdir_opens(tmp_path):
    import tensorboard.main  # noqa: F401 - what the `tensorboard` command runs

    port = free_port()
    page = serves([script("tensorboard"), "--logdir", str(tmp_path), "--host", "127.0.0.1", "--port", str(port)],
                  f"http://127.0.0.1:{port}/")
    assert "<html" in page.lower()


# slow tier: the server's first start migrates its store (about a minute on 2 cores); the default tier keeps
# the mlflow writer's run read back through mlflow's own client (test_writers.py) and the other viewer's start
@pytest.mark.slow
@pytest.mark.skipif(not installed("mlflow"), reason="needs the mlflow extra (the full mlflow package): "
                                                    "pip install -e '.[mlflow]'")
def test_mlflow_ui_opens(tmp_path):
    import flask  # noqa: F401 - what `mlflow ui` needs and mlflow-skinny lacks
    import mlflow.server  # noqa: F401

    port = free_port()
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    page = serves([script("mlflow"), "ui", "--backend-store-uri", store, "--host", "127.0.0.1", "--port", str(port)],
                  f"http://127.0.0.1:{port}/health", timeout_s=420.0)  # its first start migrates the store: slow
    assert "ok" in page.lower()
