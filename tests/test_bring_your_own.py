"""A user's own trace, device profile and policies, by name from the CLI and scenario files."""

import json
import textwrap

import numpy as np
import pytest

from felix_jax.cli import main
from felix_jax.experiment import Scenario, get_preset
from felix_jax.experiment.registry import make_profile, make_trace
from felix_jax.options import OptionError
from felix_jax.traces import DataFileError, Tier, load_device_profile

T, U = int(Tier.AVL_TRAIN), int(Tier.UN_AVL)

HAND_TRACE = """client,time_s,state
1,0,AVL_TRAIN
1,300,UN_AVL
1,900,AVL_TRAIN
2,0,AVL_TRAIN
3,0,UN_AVL
3,120,AVL_TRAIN
"""


def test_a_hand_written_csv_trace_runs_from_the_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_trace.csv").write_text(HAND_TRACE)
    trace = make_trace("my_trace.csv", 6, seed=0)  # 3 clients reused cyclically for 6
    assert trace.state_at(400.0).tolist() == [U, T, T, U, T, T]
    assert trace.state_at(60.0).tolist() == [T, T, U, T, T, U]
    rc = main(["run", "--preset", "tiny", "--set", "availability=my_trace.csv", "--set", "max_aggregations=3",
               "--set", "num_clients=6", "--set", "concurrency=2", "--quiet", "--out", str(tmp_path / "out")])
    assert rc == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["scenario"]["availability"] == str(tmp_path / "my_trace.csv")  # absolute: reruns from anywhere
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["aggregations"] == 3


def test_trace_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("who,when\n1,2\n")
    with pytest.raises(DataFileError, match="t.csv"):
        make_trace(str(bad), 3, 0)
    with pytest.raises(KeyError, match="unknown extension '.txt'"):
        make_trace(str(tmp_path / "t.txt"), 3, 0)
    with pytest.raises(SystemExit, match="t.csv"):
        main(["run", "--preset", "tiny", "--set", f"availability={bad}", "--quiet", "--out", str(tmp_path / "o")])


def test_device_profile_from_csv_and_npz(tmp_path):
    (tmp_path / "p.csv").write_text("client,train_delay_s,down_kbps\n2,20,1000\n1,10,inf\n")
    p = load_device_profile(tmp_path / "p.csv")
    assert p.train_delay_s.tolist() == [10.0, 20.0] and p.down_kbps.tolist() == [np.inf, 1000.0]
    assert p.compute_speed.tolist() == [1.0, 1.0]
    (tmp_path / "c.csv").write_text("# measured on the lab phones\nclient,train_delay_s\n# the slow one\n2,20\n1,10\n")
    assert load_device_profile(tmp_path / "c.csv").train_delay_s.tolist() == [10.0, 20.0]
    np.savez(tmp_path / "p.npz", train_delay_s=np.array([1.0, 2.0, 3.0]))
    assert make_profile(str(tmp_path / "p.npz"), 5, 0).train_delay_s.tolist() == [1.0, 2.0, 3.0, 1.0, 2.0]
    (tmp_path / "q.csv").write_text("client,speed\n1,2\n")
    with pytest.raises(DataFileError, match="q.csv: columns"):
        load_device_profile(tmp_path / "q.csv")
    (tmp_path / "r.csv").write_text("train_delay_s\n-1\n")
    with pytest.raises(DataFileError, match="r.csv: line 2: train_delay_s '-1' must be a finite number of seconds >= 0"):
        load_device_profile(tmp_path / "r.csv")


PLUGIN = textwrap.dedent('''
    import dataclasses
    import numpy as np
    from felix_jax import plugins
    from felix_jax.policies import Aggregator, Selector

    @dataclasses.dataclass(frozen=True)
    class GreedyConfig:
        fraction: float = 1.0

    @plugins.selector("test-greedy-utility", config=GreedyConfig)
    def make_greedy(config):
        def select(state, ctx, k):
            ids = np.flatnonzero(ctx.eligible)
            best = ids[np.argsort(-ctx.view.utility[ids], kind="stable")]
            return best[: max(1, int(config.fraction * k))], state
        return Selector("test-greedy-utility", lambda: None, select)

    @dataclasses.dataclass(frozen=True)
    class FlatConfig:
        server_lr: float = 0.3

    @plugins.aggregator("test-flat", config=FlatConfig)
    def make_flat(config):
        return Aggregator("test-flat", lambda info: np.ones(len(info.staleness)), server_lr=config.server_lr)

    plugins.strategy("test-felix-greedy", mode="async", knowledge="tiertrack", selector="test-greedy-utility",
                     aggregator="test-flat", eval_selector="tierselect-eval")
''')


def test_a_users_selector_and_aggregator_run_through_compare(tmp_path):
    (tmp_path / "my_policies.py").write_text(PLUGIN)
    out = tmp_path / "cmp"
    rc = main(["compare", "--scenario", "tiny", "--strategies", "test-felix-greedy,felix", "--availability",
               "avail100", "--set", f"plugins={tmp_path / 'my_policies.py'}", "--set", "max_aggregations=2",
               "--set", "aggregator.server_lr=0.2", "--quiet", "--out", str(out)])
    assert rc == 0
    config = json.loads(next((out / "runs").glob("test-felix-greedy-*")).joinpath("config.json").read_text())
    assert config["policies"]["selector"] == {"fraction": 1.0}
    assert config["policies"]["aggregator"] == {"server_lr": 0.2}
    sc = Scenario.from_file(next((out / "runs").glob("test-felix-greedy-*")) / "config.json")
    assert sc.resolve_strategy().strategy.selector == "test-greedy-utility"
    # the plugin's own options, from --set
    assert sc.with_overrides({"selector.fraction": "0.5"}).resolve_strategy().selector.fraction == 0.5


def test_plugin_errors_are_one_line(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(OptionError, match=r"plugins=.*broken.py.*importing it failed \(RuntimeError: boom\)"):
        get_preset("tiny").with_overrides({"plugins": str(tmp_path / "broken.py")})
    with pytest.raises(OptionError, match="no such file"):
        get_preset("tiny").with_overrides({"plugins": str(tmp_path / "missing.py")})


MODEL_PLUGIN = textwrap.dedent('''
    import flax.linen as nn
    from felix_jax import plugins
    from felix_jax.models.base import make_model

    class DropoutMLP(nn.Module):
        num_classes: int

        @nn.compact
        def __call__(self, x, train: bool):
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(32, kernel_init=nn.initializers.xavier_uniform())(x))
            x = nn.Dropout(0.5, deterministic=not train)(x)
            return nn.Dense(self.num_classes)(x)

    @plugins.model("test-dropout-mlp")
    def make(input_shape, num_classes):
        return make_model("test-dropout-mlp", DropoutMLP(num_classes), input_shape, num_classes, train_flag="train")
''')


@pytest.mark.slow  # a comparison; the default tier runs the same model in test_dropout_is_keyed_per_task...
def test_a_users_flax_model_with_dropout_runs_through_compare(tmp_path):
    (tmp_path / "my_model.py").write_text(MODEL_PLUGIN)
    out = tmp_path / "cmp"
    rc = main(["compare", "--scenario", "tiny", "--strategies", "felix,fedbuff", "--availability", "avail100",
               "--set", f"plugins={tmp_path / 'my_model.py'}", "--set", "model=test-dropout-mlp",
               "--set", "max_aggregations=2", "--quiet", "--out", str(out)])
    assert rc == 0
    assert len(list((out / "runs").glob("*/summary.json"))) == 2


def test_dropout_is_keyed_per_task_and_off_in_evaluation(tmp_path):
    import jax

    from felix_jax.cohort import LocalTrainConfig
    from felix_jax.cohort.local import local_train
    from felix_jax.data.federated import to_device
    from felix_jax.data.partition import partition_from_counts
    from felix_jax.plugins import load_plugins
    from felix_jax.experiment.registry import make_model
    from tests.conftest import make_image_dataset

    (tmp_path / "my_model.py").write_text(MODEL_PLUGIN.replace("test-dropout-mlp", "test-dropout-mlp-2"))
    load_plugins(str(tmp_path / "my_model.py"))
    model = make_model("test-dropout-mlp-2", (8, 8, 3), 10)
    params = model.init(jax.random.key(0))
    x = np.ones((4, 8, 8, 3), np.float32)
    np.testing.assert_array_equal(model.apply(params, x), model.apply(params, x))  # eval: no dropout
    a = model.train_loss(params, x, np.zeros(4, np.int32), jax.random.key(1))[1]
    b = model.train_loss(params, x, np.zeros(4, np.int32), jax.random.key(2))[1]
    assert not np.allclose(a, b)  # the key reaches dropout
    ds = make_image_dataset(num_train=32, num_test=8)
    data = to_device(ds, partition_from_counts(32, np.array([32]), seed=0))
    cfg = LocalTrainConfig(batch_size=16, mode="steps", local_steps=2, learning_rate=0.1)
    run = lambda k: local_train(model, cfg, 2, params, data, np.int32(0), jax.random.key(k), np.int32(2))  # noqa
    d1, d1b, d2 = run(3).delta, run(3).delta, run(4).delta
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(lambda u, v: bool(np.array_equal(u, v)), d1, d1b))
    assert not jax.tree_util.tree_all(jax.tree_util.tree_map(lambda u, v: bool(np.allclose(u, v)), d1, d2))


def _user_npz(path, n=120, clients=6, with_client=True):
    rng = np.random.default_rng(0)
    arrays = dict(train_x=rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8), train_y=rng.integers(0, 4, n),
                  test_x=rng.integers(0, 256, (20, 8, 8, 3), dtype=np.uint8), test_y=rng.integers(0, 4, 20))
    if with_client:
        arrays["train_client"] = np.repeat(np.arange(100, 100 + clients), n // clients)
    np.savez(path, **arrays)
    return arrays


def test_a_users_npz_data_set_with_natural_clients_runs(tmp_path):
    from felix_jax.data.loaders import load_dataset

    arrays = _user_npz(tmp_path / "mine.npz")
    ds = load_dataset(str(tmp_path / "mine.npz"))
    assert ds.num_classes == 4 and ds.input_scale == 1 / 255 and ds.train_keys.max() == 5
    x = arrays["train_x"].reshape(-1, 3) / 255.0  # normalisation from the training inputs, per channel
    np.testing.assert_allclose(ds.input_mean, x.mean(0), rtol=1e-9)
    np.testing.assert_allclose(ds.input_std, x.std(0), rtol=1e-9)
    rc = main(["run", "--preset", "tiny", "--set", f"dataset={tmp_path / 'mine.npz'}", "--set", "partition=natural",
               "--set", "num_clients=6", "--set", "concurrency=2", "--set", "max_aggregations=2", "--quiet",
               "--out", str(tmp_path / "o")])
    assert rc == 0


def test_a_bad_user_npz_names_the_file(tmp_path):
    from felix_jax.data.loaders import load_dataset

    np.savez(tmp_path / "bad.npz", train_x=np.zeros((2, 3)), labels=np.zeros(2))
    with pytest.raises(DataFileError, match="bad.npz: arrays"):
        load_dataset(str(tmp_path / "bad.npz"))
    _user_npz(tmp_path / "nokeys.npz", with_client=False)
    with pytest.raises(SystemExit, match="no per-sample client ids"):
        main(["run", "--preset", "tiny", "--set", f"dataset={tmp_path / 'nokeys.npz'}", "--set",
              "partition=natural", "--quiet", "--out", str(tmp_path / "o")])


def test_tfds_data_sets_need_tensorflow_datasets_and_say_so(monkeypatch):
    import sys

    from felix_jax.data.loaders import load_dataset

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # a default install: no tfds extra
    with pytest.raises(ImportError, match=r"dataset=tfds:mnist needs the tfds extra \(tensorflow-datasets, "
                                          r"TensorFlow and importlib_resources; missing here: tensorflow-datasets"):
        load_dataset("tfds:mnist")
