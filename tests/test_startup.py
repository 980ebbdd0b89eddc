"""A Ctrl-C while a command starts (felix_jax/startup.py): one line and status 130, not a dropped signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from felix_jax.commands import run_script
from felix_jax.startup import EXIT_STATUS, exit_on_interrupt, is_entry, restore_interrupts

# A child that spends its time in a garbage-collection callback, as a process importing jax does (jax
# registers one): a KeyboardInterrupt raised there is printed as "Exception ignored" and dropped.
CHILD = textwrap.dedent("""
    import gc, sys, time
    if sys.argv[1] == "installed":
        from felix_jax.startup import exit_on_interrupt
        assert exit_on_interrupt("child")
    def slow(phase, info):
        time.sleep(0.02)
    gc.callbacks.append(slow)
    print("ready", flush=True)
    end = time.time() + 4
    while time.time() < end:
        gc.collect()
    print("went on to the end", flush=True)
""")


def _interrupted_child(mode: str) -> subprocess.CompletedProcess:
    # SIGINT at its default in the child whatever the test runner's workers do with it
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_ctrl_c_inside_a_gc_callback_ends_the_process_in_one_line():
    done = _interrupted_child("installed")
    assert done.returncode == EXIT_STATUS == 130
    assert done.stderr == "child: interrupted while starting; nothing was run\n"
    assert "went on" not in done.stdout


def test_without_it_the_same_ctrl_c_is_dropped_or_a_traceback():
    done = _interrupted_child("default")  # what the commands did before
    assert done.stderr != "child: interrupted while starting; nothing was run\n"
    assert "went on to the end" in done.stdout or "Traceback" in done.stderr
    assert "Exception ignored" in done.stderr or "Traceback" in done.stderr


def test_the_command_installs_it_only_when_started_as_felix_jax_and_main_gives_ctrl_c_back():
    code = textwrap.dedent("""
        import signal, sys
        sys.argv[0] = sys.argv[1]
        import felix_jax.cli
        print(getattr(signal.getsignal(signal.SIGINT), "felix_jax_starting", False))
        felix_jax.cli.main(["data", "list"])
        print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    """)
    for argv0, installed in (("/home/u/.venv/bin/felix-jax", "True"), ("my_notebook.py", "False")):
        done = subprocess.run([sys.executable, "-c", code, argv0], capture_output=True, text=True, timeout=300,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        assert lines[0] == installed and lines[-1] == "True"


def test_run_script_gives_ctrl_c_back_and_a_background_job_keeps_ignoring_it():
    before = signal.getsignal(signal.SIGINT)
    try:
        # Python's own handling to start from, whatever this test process inherited (a pytest started in the
        # background by a shell without job control ignores SIGINT)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        assert exit_on_interrupt("x.py")
        assert run_script("x.py", lambda argv: signal.getsignal(signal.SIGINT)) is signal.default_int_handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job a shell without job control started in the background
        assert not exit_on_interrupt("x.py")
        restore_interrupts()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("argv0, entry", [("/usr/bin/felix-jax", True), ("C:/env/Scripts/felix-jax.exe", True),
                                          ("felix-jax-notes.py", False), ("", False)])
def test_is_entry_by_the_programs_file_name(argv0, entry):
    assert is_entry(argv0, "felix-jax") is entry
