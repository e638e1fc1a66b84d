"""The Python API (`stagegan.train`, `stagegan.load_run`) against the CLI on the same config:
the same weights, samples, evaluation and resume, to the last bit (one tiny mog2d run each,
in process). The API's generator is a Python callable defined here; the CLI names the same
builder by its `module:function` path."""

import importlib
import json
import pkgutil
import shutil

import keras
import numpy as np
import pytest
import yaml
from clihelp import TINY, inprocess
from toytask import read_checkpoint

import stagegan
from stagegan import errors
from stagegan.config.schema import load_config
from stagegan.evaluation import registry

# One stage of 6 steps (each stage traced costs seconds), checkpoints at 2, 4 and 6.
OVERRIDES = [*TINY[1::2], "stages=alternating", "stages[0].steps=6", "samples=null", "eval=null"]
EXTEND = "stages[0].steps=9"


def builder(task):
    """A mog2d generator given to the API as a callable: z -> Dense(16) -> 2."""
    z = keras.Input((task.model["latent_dim"],))
    h = keras.layers.Dense(16, activation="relu", name="a")(z)
    return keras.Model(z, keras.layers.Dense(2, name="out")(h))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("api")
    raw = load_config("mog_ring", OVERRIDES).raw  # the whole config, as a dict
    raw["model"]["generator"] = builder
    api = stagegan.train(raw, run_dir=base / "api", quiet=True)
    sets = [a for o in [*OVERRIDES, "model.generator=test_api:builder"] for a in ("--set", o)]
    cli = inprocess("train", "--config", "mog_ring", *sets, "--run-dir", base / "cli")
    assert cli.returncode == 0, cli.stderr
    return api, base / "cli", base


def assert_same_weights(a, b):
    a, b = read_checkpoint(a), read_checkpoint(b)
    assert sorted(a) == sorted(b)
    for key, value in a.items():
        np.testing.assert_array_equal(b[key], value, err_msg=key)


def test_api_trains_what_the_cli_trains(runs):
    api, cli, _ = runs
    assert isinstance(api, stagegan.Run) and api.checkpoints()[-1] == 6
    assert_same_weights(api.path / "checkpoints/ckpt-00000006", cli / "checkpoints/ckpt-00000006")
    saved = yaml.safe_load((api.path / "config.yaml").read_text())
    assert saved["model"]["generator"] == "test_api:builder"  # a later process imports it
    assert api.metrics()[-1]["step"] == 6


def test_sample_and_evaluate_match_the_cli(runs, tmp_path):
    api, cli, _ = runs
    out = tmp_path / "points.npy"
    result = inprocess("sample", "--run", cli, "--num", 50, "--seed", 3, "--output", out)
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(stagegan.load_run(api.path).sample(50, seed=3), np.load(out))
    result = inprocess("eval", "--run", cli, "--count", 200, "--seed", 1, "--json")
    assert result.returncode == 0, result.stderr
    expected = json.loads(result.stdout)
    evaluated = api.evaluate(count=200, seed=1)
    assert evaluated["metrics"] == expected["metrics"] and evaluated["step"] == 6
    assert api.plan().startswith("run mog-ring: task mog2d, seed 0, 1 stages, 6 steps")


def test_resume_extends_as_the_cli_does(runs):
    api, cli, base = runs
    api_copy = shutil.copytree(api.path, base / "api_extended")
    cli_copy = shutil.copytree(cli, base / "cli_extended")
    run = stagegan.load_run(api_copy).resume({"stages[0].steps": 9}, quiet=True)
    assert run.checkpoints()[-1] == 9
    result = inprocess("train", "--resume", cli_copy, "--set", EXTEND)
    assert result.returncode == 0, result.stderr
    assert_same_weights(
        run.path / "checkpoints/ckpt-00000009", cli_copy / "checkpoints/ckpt-00000009"
    )


def test_errors_are_one_type_with_the_key_path(tmp_path):
    with pytest.raises(stagegan.Error) as caught:
        stagegan.train("mog_ring", {"stages[0].updates[0].train": "nothing/*"}, tmp_path / "x")
    assert caught.value.key == "stages[0].updates[0].train"
    assert "matches no variable" in caught.value.message
    assert not (tmp_path / "x").exists()
    with pytest.raises(stagegan.Error) as caught:
        stagegan.load_run(tmp_path / "missing")
    assert caught.value.key == "run" and isinstance(caught.value, stagegan.ConfigError)
    with pytest.raises(stagegan.Error) as caught:
        stagegan.train({"task": "mog2d", "batch_size": 8, "stages": "alternating", "sed": 1})
    assert caught.value.key == "sed"


def test_api_checks_its_arguments_as_the_cli_does(runs):
    api, _, _ = runs
    for call, key in ((lambda: api.sample(0), "n"), (lambda: api.evaluate(count=-3), "count")):
        with pytest.raises(stagegan.ConfigError) as caught:
            call()
        assert caught.value.key == key and "must be at least" in caught.value.message
    with pytest.raises(stagegan.ConfigError) as caught:  # None means "all of --input" only
        api.sample(None)  # in the CLI; the API has no --input to name
    assert caught.value.key == "n" and "--input" not in caught.value.message


def test_api_refuses_arguments_of_the_wrong_type_naming_them(runs, tmp_path):
    api, _, _ = runs
    run = stagegan.load_run(api.path)
    for call, key in (
        (lambda: stagegan.load(3), "config"),
        (lambda: stagegan.load("mog_ring", overrides=5), "overrides"),
        (lambda: stagegan.load("mog_ring", overrides=[("seed",)]), "overrides"),
        (lambda: stagegan.load("mog_ring", overrides={3: 1}), "overrides"),
        (lambda: stagegan.plan(config=3), "config"),
        (lambda: stagegan.plan("mog_ring", overrides=5), "overrides"),
        (lambda: stagegan.train("mog_ring", overrides=5), "overrides"),
        (lambda: stagegan.train("mog_ring", run_dir=5), "run_dir"),
        (lambda: stagegan.train("mog_ring", quiet="yes"), "quiet"),
        (lambda: stagegan.train("mog_ring", init_from=7), "init_from"),
        (lambda: stagegan.train("mog_ring", init_checkpoint=2), "init_checkpoint"),
        (lambda: stagegan.train("mog_ring", init_from=api.path, init_only=3), "init_only"),
        (lambda: stagegan.load_run(3), "path"),
        (lambda: run.sample(4, seed=2**32), "seed"),
        (lambda: run.sample(4, seed="0"), "seed"),
        (lambda: run.sample(4, checkpoint=2.0), "checkpoint"),
        (lambda: run.sample(4, ema="no"), "ema"),
        (lambda: run.sample(4, class_name=1.5), "class_name"),
        (lambda: run.evaluate(seed=-1), "seed"),
        (lambda: run.evaluate(features=3), "features"),
        (lambda: run.evaluate(memorise="yes"), "memorise"),
        (lambda: run.evaluate(nearest=3), "nearest"),
        (lambda: run.evaluate(nearest=str(tmp_path / "near.jpg")), "nearest"),
        (lambda: run.resume(overrides=5), "overrides"),
        (lambda: run.resume(checkpoint=-2), "checkpoint"),
    ):
        with pytest.raises(stagegan.ConfigError) as caught:
            call()
        assert caught.value.key == key, (key, caught.value)
    assert not (tmp_path / "runs").exists()


def test_load_takes_overrides_as_the_other_calls_do():
    assert stagegan.load("mog_ring", {"seed": 3, "stages[-1].steps": 7}).seed == 3
    assert stagegan.load("mog_ring", ["seed=4"]).seed == 4


# The package's attributes are its API: importing a submodule sets an attribute of the same
# name on the package, so a module named like an API name (`stagegan/plan.py`, once) would
# replace that function after the first call that imported it.
API = {
    "ConfigError": errors.ConfigError,
    "Error": errors.StageganError,
    "RunStopped": errors.RunStopped,
    "WriteError": errors.WriteError,
    **{
        name: getattr(stagegan.api, name)
        for name in ("Run", "compare", "load", "load_run", "plan", "train")
    },
    "register_metric": registry.register_metric,
}


def test_no_module_is_named_like_an_api_name():
    assert sorted(API) == sorted(stagegan.__all__)
    modules = {module.name for module in pkgutil.iter_modules(stagegan.__path__)}
    assert modules.isdisjoint(stagegan.__all__)


def test_api_names_survive_importing_every_submodule():
    for module in pkgutil.walk_packages(stagegan.__path__, "stagegan."):
        importlib.import_module(module.name)
    for name in stagegan.__all__:
        assert getattr(stagegan, name) is API[name], name


def test_api_errors_name_the_api_arguments_not_the_cli_flags(runs, tmp_path):
    """Hardening round 4: the library names the CLI's flags in its errors; the API's callers
    see their own arguments' names, running out of memory included."""
    api, _, _ = runs
    run = stagegan.load_run(api.path)
    for call, key in (
        (lambda: run.sample(2, checkpoint=999), "checkpoint"),
        (lambda: run.sample(10**15), "n"),
        (lambda: run.evaluate(count=10**15), "count"),
        # mog2d draws no images: refused before anything is written (as `eval --nearest`)
        (lambda: run.evaluate(nearest=str(tmp_path / "near.png")), "nearest"),
        (lambda: stagegan.load_run(tmp_path / "nothing"), "run"),
        (lambda: stagegan.Run(api.path).resume(checkpoint=999), "checkpoint"),
    ):
        with pytest.raises(stagegan.Error) as caught:
            call()
        assert caught.value.key == key, caught.value
        assert "--" not in caught.value.key
    with pytest.raises(stagegan.Error, match="task 'mog2d' does not draw images from latents"):
        run.evaluate(nearest=str(tmp_path / "near.png"))
    assert not (tmp_path / "near.png").exists()
    with pytest.raises(stagegan.Error) as caught:
        stagegan.train("mog_ring", {"model.hidden": 10**8}, tmp_path / "huge")
    assert caught.value.key == "model.hidden" and "would need about" in caught.value.message
    assert not (tmp_path / "huge").exists()
