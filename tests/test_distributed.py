"""One experiment over two processes for real: ``jax.distributed.initialize`` on 127.0.0.1, one CPU
device each, the cohort's mesh over both (gloo collectives), results equal to one process's."""

import json
import socket

import pytest

pytestmark = pytest.mark.slow

WORKER = """
    import json, sys
    import jax
    rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=rank,
                               initialization_timeout=120)
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.runner import build_simulator, run
    sc = get_preset("tiny").with_overrides({"strategy": "felix", "availability": "avail50"})
    result = run(sc, f"{out}/host{rank}", plot=False)
    print(json.dumps({"devices": jax.device_count(), "local": jax.local_device_count(),
                      "processes": jax.process_count(), "calls": result.summary["cohort"]["train"]["calls"]}))
"""

# measured, not computed: timings, and memory (the process's peak and its runtime share, measured)
TIMING = {"host_seconds", "host_ms_per_event", "cohort", "xla_compilations", "selection_ms_mean", "memory"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_equal_one(forced_devices, tmp_path):
    port = str(_free_port())
    procs = [forced_devices.popen(WORKER, 1, rank, port, tmp_path) for rank in (0, 1)]  # one CPU device each
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert all(o["devices"] == 2 and o["local"] == 1 and o["processes"] == 2 for o in outs)
    forced_devices.run(f"""
        from felix_jax.experiment import get_preset
        from felix_jax.experiment.runner import run
        sc = get_preset("tiny").with_overrides({{"strategy": "felix", "availability": "avail50"}})
        run(sc, {str(tmp_path / 'one')!r}, plot=False)
    """, 1)
    reference = (tmp_path / "one" / "metrics.csv").read_bytes()
    for rank in (0, 1):
        assert (tmp_path / f"host{rank}" / "metrics.csv").read_bytes() == reference, rank
        mine = json.loads((tmp_path / f"host{rank}" / "summary.json").read_text())
        alone = json.loads((tmp_path / "one" / "summary.json").read_text())
        assert {k: v for k, v in mine.items() if k not in TIMING} == {k: v for k, v in alone.items() if k not in TIMING}
