"""The tf.distribute backends in one process: BatchNormalization statistics, the EMA and
checkpoints behave as on `towers`. (Weights against the single-device reference loop, for every
kind of stage: tests/test_training.py. The guard: tests/test_guard.py.)"""

import dataclasses
import shutil

import numpy as np
import pytest
import yaml
from test_training import ALL_KINDS, config, run_all
from toytask import read_checkpoint, two_stage_config

from stagegan.cli import main as cli
from stagegan.run.reading import find_checkpoint
from stagegan.training.trainer import Trainer

STRATEGIES = ["towers", "mirrored", "central_storage"]


def every_variable(trainer):
    values = {v.path: v.numpy().copy() for net in trainer.networks.values() for v in net.weights}
    if trainer.ema is not None:
        values.update({f"ema:{k}": v.numpy().copy() for k, v in trainer.ema.trackables().items()})
    return values


@pytest.fixture(scope="module")
def trained_with_bn():
    """Each backend, 2 replicas, BatchNorm in D, an EMA of G, through all kinds of stage."""
    trained = {}
    for strategy in STRATEGIES:
        trainer = Trainer(
            config(
                2,
                ALL_KINDS,
                devices={"towers": 2, "strategy": strategy},
                model={"batchnorm": True},
                ema={"decay": 0.5},
            )
        )
        run_all(trainer)
        trained[strategy] = trainer
    return trained


@pytest.mark.parametrize("strategy", STRATEGIES[1:])
def test_batchnorm_statistics_and_ema_match_towers(trained_with_bn, strategy):
    expected = every_variable(trained_with_bn["towers"])
    found = every_variable(trained_with_bn[strategy])
    assert sorted(found) == sorted(expected)
    assert any("moving_mean" in path for path in found)
    moved = np.max(np.abs(expected["discriminator/bn/moving_mean"]))
    assert moved > 1e-3  # the statistics really were updated
    for path in expected:
        np.testing.assert_allclose(found[path], expected[path], atol=1e-5, err_msg=path)


def optimizer_state(trainer):
    return {
        f"{key}:{v.path}": v.numpy().copy()
        for key, opt in trainer.optimizers.items()
        for v in opt.variables
    }


@pytest.mark.parametrize("source, target", [("mirrored", "towers"), ("towers", "central_storage")])
def test_a_checkpoint_moves_between_backends(trained_with_bn, source, target, tmp_path):
    trained = trained_with_bn[source]
    path = trained.checkpoint.write(str(tmp_path / "ckpt"))
    devices = dataclasses.replace(trained.config.devices, strategy=target)
    fresh = Trainer(dataclasses.replace(trained.config, devices=devices))
    fresh.checkpoint.read(path).assert_existing_objects_matched()
    assert fresh.step_count == trained.step_count
    for name, expected in [("weights", every_variable), ("optimizers", optimizer_state)]:
        want, got = expected(trained), expected(fresh)
        assert sorted(got) == sorted(want), name
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_resume_on_another_backend_continues_the_same_training(tmp_path, capfd):
    """A towers run, resumed from its step-2 checkpoint on mirrored x2 (a safe --set), ends
    where the uninterrupted run ended."""
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(two_stage_config("x", 5, 2, 3)))
    first = tmp_path / "first"
    assert cli.main(["train", "--config", str(tmp_path / "run.yaml"), "--run-dir", str(first)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    changes = ["--set", "devices.strategy=mirrored", "--set", "devices.towers=2"]
    assert cli.main(["train", "--resume", str(copy), "--checkpoint", "2", *changes]) == 0
    capfd.readouterr()
    want = read_checkpoint(find_checkpoint(first))
    got = read_checkpoint(find_checkpoint(copy))
    keys = [
        key
        for key in want
        if key.startswith(("generator:", "discriminator:")) and "OPTIMIZER_SLOT" not in key
    ]
    for key in keys:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5)
    assert len(keys) == 8
    config = yaml.safe_load((copy / "config.yaml").read_text())
    assert config["devices"]["strategy"] == "mirrored" and config["devices"]["towers"] == 2
