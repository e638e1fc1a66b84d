"""Warm start (`train --init-from RUN`): the networks and the EMA take a finished run's
checkpoint by variable path, optimizers and counters start fresh, `--init-only` restricts the
copy, mismatches are one line, and the new run's config records the source."""

import numpy as np
import pytest
import yaml
from clihelp import inprocess
from toytask import finished_run, read_checkpoint, two_stage_config, variable_key

from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError
from stagegan.run.reading import resolve_init
from stagegan.run.warmstart import warm_start
from stagegan.training.trainer import Trainer

SOURCE = two_stage_config("source", 3, 2, 2, model={"batchnorm": True}, ema={"decay": 0.5})


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A finished 4-step toy run (BatchNorm in D, an EMA of G), checkpoints at every step."""
    return finished_run(tmp_path_factory.mktemp("warm") / "source", SOURCE)


def new_config(source, seed=11, **init):
    raw = {**SOURCE, "name": "warm", "seed": seed, "init": {"run": str(source), **init}}
    return parse_config(raw)


def test_every_network_variable_and_the_ema_come_from_the_checkpoint(source):
    config, prefix = resolve_init(new_config(source, checkpoint=3))
    assert config.init.checkpoint == 3 and prefix.endswith("ckpt-00000003")
    trainer = Trainer(config)
    assert warm_start(trainer, prefix) == 12  # G 4, D 4 + BatchNorm's 4 (2 of them state)
    saved = read_checkpoint(prefix)  # read independently of the trainer's checkpoint object
    for network in trainer.networks.values():
        for weight in network.weights:
            np.testing.assert_array_equal(weight.numpy(), saved[variable_key(weight.path)])
    assert any("moving_mean" in w.path for w in trainer.networks["discriminator"].weights)
    for source_weight, average in zip(trainer.ema.sources, trainer.ema.averages, strict=True):
        want = saved[variable_key("ema:" + source_weight.path)]
        np.testing.assert_array_equal(average.numpy(), want)
        assert not np.array_equal(want, saved[variable_key(source_weight.path)])
    # Fresh: the step, every optimizer, the random streams (the seed differs from the source's).
    assert trainer.step_count == 0
    assert all(int(o.iterations.numpy()) == 0 for o in trainer.optimizers.values())
    assert not np.array_equal(
        trainer.rngs.noise.state.numpy(), saved["rng_noise/_state_var/.ATTRIBUTES/VARIABLE_VALUE"]
    )


def test_init_only_copies_the_matching_variables(source):
    config, prefix = resolve_init(new_config(source, only=["generator/*"]))
    assert config.init.checkpoint == 4  # the newest, written into the config
    trainer = Trainer(config)
    before = {w.path: w.numpy().copy() for w in trainer.networks["discriminator"].weights}
    assert warm_start(trainer, prefix) == 4
    saved = read_checkpoint(prefix)
    for weight in trainer.networks["generator"].weights:
        np.testing.assert_array_equal(weight.numpy(), saved[variable_key(weight.path)])
    for weight in trainer.networks["discriminator"].weights:
        np.testing.assert_array_equal(weight.numpy(), before[weight.path])


@pytest.mark.parametrize(
    "changes, only, key, words",
    [
        ({"model": {"batchnorm": True, "hidden": 5}}, None, "init.run",
         "generator/hidden/kernel has shape [2, 5] here but [2, 3] in"),
        ({"model": {"batchnorm": True, "generator_batchnorm": True}}, None, "init.run",
         "generator/bn/gamma is not in"),
        ({}, ["critic/*"], "init.only", "pattern 'critic/*' matches no variable"),
    ],
    ids=["shape", "missing", "pattern"],
)  # fmt: skip
def test_mismatches_name_the_variable_and_copy_nothing(source, changes, only, key, words):
    raw = {**SOURCE, **changes, "init": {"run": str(source), "only": only}}
    config, prefix = resolve_init(parse_config(raw))
    trainer = Trainer(config)
    before = [w.numpy().copy() for net in trainer.networks.values() for w in net.weights]
    with pytest.raises(ConfigError) as error:
        warm_start(trainer, prefix)
    assert error.value.key == key and words in error.value.message
    after = [w.numpy() for net in trainer.networks.values() for w in net.weights]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_cli_trains_from_the_source_and_records_it(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "new.yaml").write_text(yaml.safe_dump({**SOURCE, "name": "warm"}))
    args = ["train", "--config", "new.yaml", "--run-dir", "new", "--init-from", str(source)]
    result = inprocess(*args, "--init-checkpoint", "2", "--init-only", "generator/*")
    assert result.returncode == 0, result.stderr
    assert f"warm start: 4 network variables (generator/*) from {source}" in result.stdout
    recorded = yaml.safe_load((tmp_path / "new" / "config.yaml").read_text())["init"]
    assert recorded == {"run": str(source), "checkpoint": 2, "only": ["generator/*"]}
    plan = inprocess("plan", "--config", str(tmp_path / "new" / "config.yaml"))
    assert f"warm start: generator/* from {source} (checkpoint: step 2)" in plan.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["--init-from", "{root}/nowhere"], "init.run: no such run folder"),
        (["--init-from", "{source}", "--init-checkpoint", "9"], "init.checkpoint: "),
        (["--init-checkpoint", "2"], "--init-checkpoint: only with --init-from RUN"),
        (["--init-from", "{source}", "--set", "model.hidden=5"], "has shape [2, 5] here"),
    ],
    ids=["no run", "no such step", "no source", "shape"],
)
def test_bad_warm_starts_are_one_line_and_leave_nothing(source, tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "new.yaml").write_text(yaml.safe_dump({**SOURCE, "name": "warm"}))
    args = [a.replace("{root}", str(tmp_path)).replace("{source}", str(source)) for a in args]
    result = inprocess("train", "--config", "new.yaml", "--run-dir", "new", *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stagegan: error: ") and words in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.yaml"]
