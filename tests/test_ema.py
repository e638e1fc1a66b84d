"""The generator EMA: values against an average computed here in numpy from the weights after
each step, sampling from the average, checkpointing, and config errors."""

import numpy as np
import pytest
import tensorflow as tf
from test_training import ALL_KINDS, config
from toytask import read_checkpoint

from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError
from stagegan.training.trainer import Trainer

DECAY, START = 0.8, 3


def weights(network):
    return [v.numpy().copy() for v in network.weights]


def run_recording(trainer, network):
    """Run every step; returns the network's weights before the run and after each step."""
    history = [weights(network)]
    for position in trainer.schedule.positions(trainer.step_count):
        trainer.step(position)
        history.append(weights(network))
    return history


def numpy_ema(history, decay, start):
    average = [w.copy() for w in history[0]]
    for step, current in enumerate(history[1:], start=1):
        d = decay if step > start else 0.0
        average = [d * a + (1 - d) * w for a, w in zip(average, current, strict=True)]
    return average


@pytest.fixture(scope="module")
def trained():
    trainer = Trainer(config(2, ALL_KINDS, ema={"decay": DECAY, "start": START}))
    history = run_recording(trainer, trainer.task.generator)
    return trainer, history


def test_average_matches_numpy_across_every_stage_kind(trained):
    trainer, history = trained
    assert len(history) == 1 + trainer.schedule.total_steps
    expected = numpy_ema(history, DECAY, START)
    for average, want in zip(trainer.ema.averages, expected, strict=True):
        np.testing.assert_allclose(average.numpy(), want, rtol=1e-5, atol=1e-6)
    # It is a real average: different from the live weights.
    assert not np.allclose(trainer.ema.averages[0].numpy(), history[-1][0])


def test_mirrored_average_is_kept_on_each_replica_and_matches_numpy():
    """Under `mirrored` each replica's device holds a copy of the average, updated there from
    that replica's copy of the weights (no host round trip): the copies equal the numpy
    average, and the graph assigns each copy on its own device."""
    raw = config(2, ALL_KINDS, ema={"decay": DECAY, "start": START}).raw
    raw = {**raw, "devices": {"towers": 2, "strategy": "mirrored"}}
    trainer = Trainer(parse_config(raw))
    history = run_recording(trainer, trainer.task.generator)
    expected = numpy_ema(history, DECAY, START)
    for average, want in zip(trainer.ema.averages, expected, strict=True):
        copies = average.values
        assert {c.device[-5:] for c in copies} == {"CPU:0", "CPU:1"}
        for copy in copies:
            np.testing.assert_allclose(copy.numpy(), want, rtol=1e-5, atol=1e-6)
    # strategy.extended.update names each device's fold `update_<replica>`: one assign per
    # copy of each average, on the copy's device (the optimizers apply inside their own
    # functions, not at the top level of the step).
    step = trainer.stage_steps[0].function.get_concrete_function(tf.TensorSpec([], tf.int64))
    assigns = [
        op.device[-5:]
        for op in step.graph.get_operations()
        if op.type == "AssignVariableOp" and op.name.startswith("update_")
    ]
    count = len(trainer.ema.averages)
    assert sorted(assigns) == ["CPU:0"] * count + ["CPU:1"] * count


def test_sampling_uses_the_average_and_restores_the_live_weights(trained):
    trainer, history = trained
    z = tf.random.normal([5, 2], seed=1)
    average = numpy_ema(history, DECAY, START)
    # The generator by hand: Dense(3, tanh) -> Dense(2), with the averaged weights.
    k1, b1, k2, b2 = average
    expected = np.tanh(z.numpy() @ k1 + b1) @ k2 + b2
    np.testing.assert_allclose(trainer.sample({"z": z}).numpy(), expected, rtol=1e-5, atol=1e-6)
    for live, want in zip(weights(trainer.task.generator), history[-1], strict=True):
        np.testing.assert_array_equal(live, want)
    k1, b1, k2, b2 = history[-1]
    live = np.tanh(z.numpy() @ k1 + b1) @ k2 + b2
    np.testing.assert_allclose(trainer.sample({"z": z}, ema=False).numpy(), live, rtol=1e-5)


def test_average_is_checkpointed(trained, tmp_path):
    trainer, _ = trained
    saved = [a.numpy().copy() for a in trainer.ema.averages]
    path = trainer.checkpoint.write(str(tmp_path / "ckpt"))
    keys = list(read_checkpoint(path))
    assert "ema:generator:hidden:kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys
    for average in trainer.ema.averages:
        average.assign(tf.zeros_like(average))
    trainer.checkpoint.read(path).assert_consumed()
    for average, want in zip(trainer.ema.averages, saved, strict=True):
        np.testing.assert_array_equal(average.numpy(), want)


def test_batchnorm_statistics_are_averaged_too():
    stages = [
        {"name": "d", "steps": 4, "updates": [{"train": "discriminator/*", "loss": "d_loss"}]}
    ]
    trainer = Trainer(
        config(1, stages, model={"batchnorm": True}, ema={"decay": 0.5, "network": "discriminator"})
    )
    history = run_recording(trainer, trainer.task.discriminator)
    paths = [v.path for v in trainer.task.discriminator.weights]
    assert "discriminator/bn/moving_mean" in paths
    for average, want in zip(trainer.ema.averages, numpy_ema(history, 0.5, 0), strict=True):
        np.testing.assert_allclose(average.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "ema, key",
    [
        ({"decay": 1.0}, "ema.decay"),
        ({"decay": "high"}, "ema.decay"),
        ({"start": -1}, "ema.start"),
        ({"every": 2}, "ema.every"),
        ([0.999], "ema"),
    ],
)
def test_bad_ema_config(ema, key):
    with pytest.raises(ConfigError) as error:
        config(1, ALL_KINDS, ema=ema)
    assert error.value.key == key


def test_unknown_network():
    with pytest.raises(ConfigError, match="no network 'critic'") as error:
        Trainer(config(1, ALL_KINDS, ema={"network": "critic"}))
    assert error.value.key == "ema.network"
