"""What a new user meets in their second hour: near-match suggestions for a mistyped name, the
reading in a run's folder name and banner, CLI words in CLI errors, trace errors with the file's
line, and a note when a trace or profile is reused cyclically."""

from __future__ import annotations

import pytest

from felix_jax.cli import main
from felix_jax.suggest import MAX_LISTED, NEAREST, did_you_mean, known_names, nearest
from tests.test_hostile_inputs import refused  # one line naming the command, as every CLI refusal




# ------------------------------------------------------------------ did you mean
def test_the_nearest_names_come_first_and_a_close_one_is_suggested():
    fields = ["timeout_s", "timeout_frees_slot", "semantics", "seed", "strategy", "slot_s"]
    assert nearest("timeout", fields, 2) == ["timeout_s", "timeout_frees_slot"]
    assert did_you_mean("semantic", fields) == "semantics"
    assert did_you_mean("FeLiX", ["felix", "fedbuff"]) == "felix"  # case does not matter
    assert did_you_mean("zzzz", fields) is None  # nothing close: no guess
    assert did_you_mean("a", ["a_long_name", "normalize"]) is None  # a letter is no near match
    few = known_names("avail5", ["avail100", "avail50"], "regimes")
    assert few == "; did you mean 'avail50'? known: avail100, avail50"
    many = [f"name{i}" for i in range(MAX_LISTED + 5)]
    text = known_names("name3x", many, "things")
    assert "did you mean 'name3'?" in text and f"felix-jax run --list shows all {len(many)} things" in text
    assert text.count(",") == NEAREST - 1  # the nearest few, not the whole list


@pytest.mark.parametrize("argv, expected", [
    (["run", "--set", "strategy=felx"], "did you mean 'felix'?"),
    (["run", "--set", "timeout=30"], "did you mean 'timeout_s'?"),
    (["run", "--set", "semantic=paper_code"], "did you mean 'semantics'?"),
    (["run", "--preset", "quickstrat"], "did you mean 'quickstart'?"),
    (["run", "--set", "model=mpl"], "did you mean 'mlp'?"),
    (["run", "--set", "availability=avail5"], "did you mean 'avail50'?"),
    (["run", "--set", "availability=syn_50"], "did you mean 'ref:syn_50'?"),
    (["run", "--set", "strategy=felix", "--set", "aggregator.normalise=true"], "did you mean 'normalize'?"),
    (["run", "--set", "strategy=felix", "--set", "selector.variant=fedscal"], "did you mean 'fedscale'?"),
    (["run", "--set", "selecter.variant=fedscale"], "did you mean 'selector.variant'?"),
    (["compare", "--scenario", "tiny", "--strategies", "oort_async", "--quiet"], "did you mean 'oort-async'?"),
    (["compare", "--scenario", "tiny", "--availability", "ref:syn50", "--quiet"], "did you mean 'ref:syn_50'?"),
], ids=["strategy", "field", "semantics", "preset", "model", "regime", "ref-regime", "aggregator-option",
        "selector-variant", "option-field", "compare-strategy", "compare-ref"])
def test_a_mistyped_name_gets_its_near_match_in_one_short_line(argv, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refused(argv, expected)
    assert len(message) < 400, message  # the nearest few names, not every field
    assert not (tmp_path / "results").exists()


# ------------------------------------------------------------------ the reading in names
def test_the_reading_names_its_default_folder_and_shows_in_the_banner(tmp_path, monkeypatch, capsys):
    from felix_jax.experiment import get_preset
    from felix_jax.experiment.naming import default_compare_dir, default_run_dir, reading_label

    tiny = get_preset("tiny")
    assert str(default_run_dir(tiny)) == "results/tiny-fedbuff-avail100-seed0"
    code = tiny.with_overrides({"semantics": "paper_code"})
    assert str(default_run_dir(code)) == "results/tiny-fedbuff-avail100-paper_code-seed0"
    switch = tiny.with_overrides({"reading.sync_records_stale": "false"})
    assert default_run_dir(switch).name == "tiny-fedbuff-avail100-paper+sync_records_stale-false-seed0"
    assert reading_label(switch) == "paper + reading.sync_records_stale=false"
    assert str(default_compare_dir(code)) == "results/compare-tiny-paper_code"
    assert str(default_compare_dir(tiny)) == "results/compare-tiny"
    # the plain run after the as-run one: each in its own folder, neither refused
    monkeypatch.chdir(tmp_path)
    quick = ["run", "--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--set", "target_accuracy=none"]
    assert main([*quick, "--set", "semantics=paper_code"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "| reading paper_code |" in first and "tiny-fedbuff-avail100-paper_code-seed0" in first
    assert main(quick) == 0
    assert "| reading paper |" in capsys.readouterr().out.splitlines()[0]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "tiny-fedbuff-avail100-paper_code-seed0", "tiny-fedbuff-avail100-seed0"]


# ------------------------------------------------------------------ CLI words in CLI errors
TRACE_FILE = "traces/felix_reference_300clients.npz"
CIFAR_FILE = "cifar10/cifar10_jpeg_bytes.npz"


def _data_folder(root):
    for relative in (TRACE_FILE, CIFAR_FILE):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(b"not read: only found")
    return root


@pytest.fixture
def no_data(monkeypatch, tmp_path):
    monkeypatch.delenv("FELIX_JAX_DATA", raising=False)
    monkeypatch.setenv("FELIX_JAX_CACHE", str(tmp_path / "cache"))
    return monkeypatch


REF_RUN = ["run", "--preset", "tiny", "--quiet", "--set", "availability=ref:syn_50"]
CIFAR_RUN = ["run", "--preset", "tiny", "--quiet", "--set", "dataset=cifar10"]


def test_missing_data_is_said_in_cli_words(no_data, tmp_path):
    message = refused([*CIFAR_RUN, "--out", str(tmp_path / "o")], "`felix-jax data fetch cifar10`")
    for python_words in ("path=", "data_dir", "load_digits_embedded", "Pass "):
        assert python_words not in message, message
    no_data.setenv("FELIX_JAX_DATA", str(tmp_path / "nowhere"))
    refused([*CIFAR_RUN, "--out", str(tmp_path / "o")], f"FELIX_JAX_DATA={tmp_path / 'nowhere'}, no such folder")
    assert not (tmp_path / "o").exists()
    # the paper's traces ship with felix-jax: a ref: run needs no data folder
    assert main([*REF_RUN, "--set", "max_aggregations=1", "--out", str(tmp_path / "ref")]) == 0


@pytest.mark.parametrize("where", ["above", "inside"])
def test_a_data_folder_one_level_off_is_named(no_data, tmp_path, where):
    data = _data_folder(tmp_path / "shared" / "data")
    wrong = tmp_path / "shared" if where == "above" else data / "cifar10"
    no_data.setenv("FELIX_JAX_DATA", str(wrong))
    how = "high" if where == "above" else "deep"
    refused([*CIFAR_RUN, "--out", str(tmp_path / "o")], f"FELIX_JAX_DATA={wrong} is one level too {how}",
            f"set FELIX_JAX_DATA={data}")


def test_the_python_api_keeps_its_own_words(no_data, tmp_path):
    from felix_jax.data.paths import data_file
    from felix_jax.traces.data_paths import resolve_data_file

    with pytest.raises(FileNotFoundError, match="or set FELIX_JAX_DATA or data_dir"):
        data_file(CIFAR_FILE)
    with pytest.raises(FileNotFoundError, match="pass path="):  # an explicit path: the only place looked
        resolve_data_file(TRACE_FILE, tmp_path / "nowhere")
    data = _data_folder(tmp_path / "shared" / "data")
    with pytest.raises(FileNotFoundError, match=f"data_dir={tmp_path / 'shared'} is one level too high"):
        data_file(CIFAR_FILE, tmp_path / "shared")
    assert data_file(CIFAR_FILE, data) == data / CIFAR_FILE


def test_resuming_a_finished_run_says_it_finished(tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--preset", "tiny", "--quiet", "--set", "max_aggregations=2", "--set",
                 "target_accuracy=none", "--out", str(out)]) == 0
    refused(["run", "--resume", str(out)], "that run finished (stop reason: max_aggregations); nothing to resume")


# ------------------------------------------------------------------ trace files
@pytest.mark.parametrize("text, expected", [
    ("# my phones\nclient,time_s,state\n0,0,AVL_TRAIN\n0,-5,UN_AVL\n", "line 4: negative time -5.0"),
    ("client,time_s,state\n0,0,AVL_TRAIN\n\n0,5\n", "line 4: 2 fields, but the header line client,time_s,state has 3"),
    ("client,time_s,state\n0,0,AVL_TRAIN\n0,1O.0,UN_AVL\n", "line 3: time_s '1O.0' is not a number"),
    ("client,time_s,state\n0,0,AVL_TRAIN\n0,inf,UN_AVL\n", "line 3: time_s 'inf' is not finite"),
    ("client,time_s,state\n0,0,ONLINE\n", "line 2: unknown tier name 'ONLINE'"),
    ("client,time_s,state\nx,0,AVL_TRAIN\n", "line 2: client id 'x' is not a whole number"),
    ("client;time_s;state\n0;0;AVL_TRAIN\n", "line 1: header ['client;time_s;state'] lacks columns"),
], ids=["negative-time", "ragged", "not-a-number", "not-finite", "state", "client-id", "semicolons"])
def test_a_bad_trace_csv_names_the_line_of_the_file(tmp_path, text, expected):
    from felix_jax.traces import DataFileError, load_interval_csv

    (tmp_path / "t.csv").write_text(text)
    with pytest.raises(DataFileError) as info:
        load_interval_csv(tmp_path / "t.csv")
    assert expected in str(info.value) and "\n" not in str(info.value)
    if "lacks columns" in expected:
        assert "looks ';'-separated: felix-jax reads comma-separated values" in str(info.value)
    refused(["run", "--preset", "tiny", "--quiet", "--set", f"availability={tmp_path / 't.csv'}",
             "--out", str(tmp_path / "o")], "t.csv", expected)


@pytest.mark.parametrize("text, expected", [
    ("# lab phones\n\ntrain_delay_s,up_kbps\n1,2\n3\n", "line 5: 1 field, but the header line"),
    ("train_delay_s,up_kbps\n1,2\n-3,4\n", "line 3: train_delay_s '-3' must be a finite number of seconds >= 0"),
    ("train_delay_s,up_kbps\n1,2\nabc,4\n", "line 3: train_delay_s 'abc' is not a number"),
    ("train_delay_s;up_kbps\n1;2\n", "line 1: the header 'train_delay_s;up_kbps' looks ';'-separated"),
], ids=["ragged", "negative", "not-a-number", "semicolons"])
def test_a_bad_profile_csv_names_the_line_of_the_file(tmp_path, text, expected):
    from felix_jax.traces import DataFileError, load_device_profile

    (tmp_path / "p.csv").write_text(text)
    with pytest.raises(DataFileError) as info:
        load_device_profile(tmp_path / "p.csv")
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_trace_or_profile_with_fewer_clients_says_it_is_reused_once(tmp_path, capsys):
    from felix_jax.experiment.registry import make_profile, make_trace

    (tmp_path / "six.csv").write_text("client,time_s,state\n" + "".join(f"{c},0,AVL_TRAIN\n" for c in range(6)))
    (tmp_path / "two.csv").write_text("train_delay_s\n1\n2\n")
    make_trace(str(tmp_path / "six.csv"), 12, 0)
    make_trace(str(tmp_path / "six.csv"), 12, 1)  # the same again: said once
    make_trace(str(tmp_path / "six.csv"), 4, 0)  # fewer clients than the file: the dropped ones are named
    make_profile(str(tmp_path / "two.csv"), 5, 0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert "availability file six.csv holds 6 clients" in lines[0] and "(clients 12 > 6 in the file)" in lines[0]
    assert "reused cyclically" in lines[0]
    assert "six.csv holds 6 clients, the scenario 4" in lines[1] and "drops 2 clients (ids 4-5)" in lines[1]
    assert "device profile two.csv holds 2 clients" in lines[2] and "(clients 5 > 2 in the file)" in lines[2]
