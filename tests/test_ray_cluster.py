"""The Ray executor on a real cluster: a head and a worker node started with ``ray start`` on
127.0.0.1 (each its own CPUs and a resource of its own), ``felix-jax compare --executor ray
--ray-address ...`` across both, every cell equal to the local run; then the worker node killed
while it runs a batch: the comparison finishes on the remaining node or stops with one line, and
the same command run again keeps every finished cell and completes the rest, nothing lost.

Slow (``-m slow``): two clusters, three comparisons, a few minutes on 2 cores. Each node is
started as ``ray start --block`` in a session of its own, and stopped by ending every process of
that session (never ``ray stop``, which ends every Ray process of the user on the machine). Ray
registers the nodes under this machine's interface address even when given 127.0.0.1 (it rewrites
loopback addresses for multi-node clusters); everything stays on this machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RAY = shutil.which("ray")
HAS_RAY = RAY is not None and importlib.util.find_spec("ray") is not None
HAS_TBX = importlib.util.find_spec("tensorboardX") is not None
START_TIMEOUT_S = 240
COMPARE_TIMEOUT_S = 1200

if not HAS_RAY:
    pytest.skip("needs Ray and its `ray` command: pip install 'felix-jax[ray]'", allow_module_level=True)
if not Path("/proc/self/stat").is_file():
    pytest.skip("stops the cluster's processes by their session, read from /proc (Linux)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    # RAY_AUTH_MODE set: not whatever a token in ~/.ray (which a local ray.init() writes) would make each
    # process decide on its own (a head in token mode refuses a worker that is not)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
               RAY_AUTH_MODE="disabled")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (a node's raylet, its workers, agents...)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(int(name))
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def end_session(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """Ends every process of the session that ``proc`` (a ``ray start --block``) leads."""
    sid = proc.pid
    deadline = time.time() + timeout_s
    while True:
        pids = session_pids(sid)
        if not pids or time.time() > deadline:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    left = session_pids(sid)
    assert not left, f"processes of the node's session {sid} still running: {left}"


class Cluster:
    """A head node and worker nodes on this machine, each ``ray start --block`` in its own session."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.temp_dir = Path(tempfile.mkdtemp(prefix="fxray", dir="/tmp"))  # short: Ray's socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen] = {}

    def _ports(self) -> list[str]:
        return [f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
                f"--metrics-export-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
                f"--node-manager-port={_free_port()}", f"--object-manager-port={_free_port()}"]

    def start(self, name: str, head: bool) -> None:
        args = [RAY, "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats",
                "--resources", json.dumps({f"felix_{name}": 1}), *self._ports()]
        if head:
            args += ["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.temp_dir}",
                     f"--ray-client-server-port={_free_port()}"]
        else:
            args += [f"--address={self.address}"]
        log = self.tmp / f"ray-{name}.log"
        proc = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                                env=_env(), cwd=self.tmp)
        self.nodes[name] = proc
        deadline = time.time() + START_TIMEOUT_S
        while "Ray runtime started" not in log.read_text():
            if proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"ray start of node {name} failed or timed out:\n{log.read_text()[-3000:]}")
            time.sleep(1)

    def kill(self, name: str) -> None:
        end_session(self.nodes.pop(name))

    def stop(self) -> None:
        for name in [n for n in self.nodes if n != "head"] + (["head"] if "head" in self.nodes else []):
            self.kill(name)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start("head", head=True)
        c.start("worker", head=False)
        yield c
    finally:
        c.stop()


def compare_args(out: Path, seeds: str, aggregations: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "felix_jax.cli", "compare", "--scenario", "tiny", "--strategies", "felix,fedbuff",
            "--availability", "avail50", "--seeds", seeds, "--set", f"max_aggregations={aggregations}",
            "--batch", "1", "--out", str(out), "--quiet", *extra]


def run_compare(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=COMPARE_TIMEOUT_S, env=_env(), cwd=tmp)


SAME_SUMMARY = ("time_to_target_s", "bytes_total", "aggregations", "final_accuracy", "best_accuracy", "stop_reason",
                "end_time_s", "dispatched_train", "staleness_p50")


def assert_cells_equal(local: Path, remote: Path, expected: int) -> None:
    names = sorted(p.name for p in (local / "runs").iterdir())
    assert len(names) == expected and sorted(p.name for p in (remote / "runs").iterdir()) == names
    for name in names:
        a, b = local / "runs" / name, remote / "runs" / name
        for file in ("metrics.csv", "events.csv", "distributions.json"):
            assert (a / file).read_bytes() == (b / file).read_bytes(), f"{name}/{file}"
        sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
        assert {k: sa[k] for k in SAME_SUMMARY} == {k: sb[k] for k in SAME_SUMMARY}, name


def nodes_in(log: str) -> set[str]:
    return {line.split(" finished on node ")[1].split()[0] for line in log.splitlines() if " finished on node " in line}


def assert_logs_equal_metrics(out: Path) -> None:
    """Each cell's TensorBoard run holds its metrics.csv's every step once."""
    from felix_jax.experiment.writers import read_scalars

    for cell in (out / "runs").iterdir():
        sc = json.loads((cell / "config.json").read_text())["scenario"]
        logged = read_scalars(out / "tensorboard" / sc["strategy"] / "avail50" / f"seed{sc['seed']}")["test/accuracy"]
        rows = (cell / "metrics.csv").read_text().splitlines()[1:]
        assert [s for s, _, _ in logged] == [int(r.split(",")[2]) for r in rows], cell.name


def test_compare_across_a_two_node_cluster_equals_the_local_run(cluster, tmp_path):
    local = run_compare(compare_args(tmp_path / "local", "0,1", 6), tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    writers = ["--log-to", "tensorboard"] if HAS_TBX else []
    remote = run_compare(compare_args(tmp_path / "ray", "0,1", 6, "--executor", "ray", "--ray-address",
                                      cluster.address, *writers), tmp_path)
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert len(nodes_in(remote.stdout)) == 2, remote.stdout[-3000:]  # batches ran on both nodes
    assert_cells_equal(tmp_path / "local", tmp_path / "ray", 4)
    assert (tmp_path / "ray" / "report.html").is_file()
    if HAS_TBX:
        assert_logs_equal_metrics(tmp_path / "ray")


@pytest.mark.parametrize("retries", [3, 0], ids=["rerun-elsewhere", "no-retries-stops"])
def test_a_node_lost_mid_sweep_loses_no_finished_cell_and_a_rerun_completes(cluster, tmp_path, retries):
    """With Ray's retries (the default 3) the lost batch runs again on the head node and the comparison
    finishes; with none it stops, once the other batches have finished, with one line naming the lost
    cells. Either way the same command again keeps every finished cell and completes the rest."""
    local = run_compare(compare_args(tmp_path / "local", "0,1,2", 10), tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    writers = ["--log-to", "tensorboard"] if HAS_TBX else []
    args = compare_args(tmp_path / "ray", "0,1,2", 10, "--executor", "ray", "--ray-address", cluster.address,
                        "--ray-max-retries", str(retries), *writers)
    stderr = open(tmp_path / "first.err", "w")
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr, env=_env(), cwd=tmp_path)
    try:
        worker = cluster.nodes["worker"].pid
        deadline = time.time() + COMPARE_TIMEOUT_S
        while not any("ray::_run_batch" in cmdline(p) for p in session_pids(worker)):  # a batch runs there
            assert first.poll() is None, "the comparison ended before the worker node ran a batch"
            assert time.time() < deadline, "the worker node never ran a batch"
            time.sleep(0.5)
        time.sleep(3)  # mid-cell: its folder half written
        cluster.kill("worker")
        rc = first.wait(timeout=COMPARE_TIMEOUT_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
        stderr.close()
    log = (tmp_path / "first.err").read_text()
    print(f"the comparison with the worker node killed mid-batch: exit {rc}; last line: "
          f"{(log.strip().splitlines() or [''])[-1]}")  # shown with -s
    assert (rc == 0) == (retries > 0), log[-3000:]
    if rc != 0:  # stopped: with one line saying what was lost and what to do
        # (Ray's own raylet log lines reach the driver's stderr as they come, also after that line)
        last = [line for line in log.strip().splitlines() if "(raylet)" not in line][-1]
        assert last.startswith("felix-jax compare: ray: the batch of ") and "run the same command again" in last, \
            log[-3000:]
    finished = {}
    for cell in (tmp_path / "ray" / "runs").iterdir():
        summary = cell / "summary.json"
        if summary.is_file() and json.loads(summary.read_text()).get("stop_reason") != "interrupted":
            finished[cell.name] = summary.stat().st_mtime_ns
    assert finished, log[-3000:]
    again = run_compare(args, tmp_path)  # on the head node alone now
    assert again.returncode == 0, again.stderr[-3000:]
    print(f"cells finished before the rerun: {len(finished)} of 6; the rerun ran on "
          f"{len(nodes_in(again.stdout))} node(s)")
    kept = [line for line in again.stdout.splitlines() + again.stderr.splitlines() if "finished earlier, kept" in line]
    assert len(kept) >= len(finished)
    for name, stamp in finished.items():  # kept, not run again
        assert (tmp_path / "ray" / "runs" / name / "summary.json").stat().st_mtime_ns == stamp, name
    assert_cells_equal(tmp_path / "local", tmp_path / "ray", 6)
    if HAS_TBX:
        assert_logs_equal_metrics(tmp_path / "ray")
