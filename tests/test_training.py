"""The engine end to end, in process: equivalence with a plain TensorFlow loop, trace counts,
isolation between stages, None gradients, and the repeat/every counters."""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from toytask import ALL_KINDS, D, G, optimizers, read_checkpoint, run_steps, snapshot, toy_config

from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError
from stagegan.tasks.base import make_generator
from stagegan.training.trainer import Trainer

SEED = 7
BATCH = 16
LR_G, LR_D = 0.1, 0.05


def config(towers, stages, **changes):
    raw = toy_config(
        stages,
        "t",
        SEED,
        BATCH,
        devices={"towers": towers},
        optimizers=optimizers("sgd", LR_G, LR_D),
    )
    return parse_config({**raw, **changes})


def run_all(trainer):
    run_steps(trainer)


# The reference: a plain single-device TensorFlow loop, written here from the task's docstring.


def reference_run(initial):  # noqa: C901 - the plain loop, written out step by step
    g_hidden, g_out = keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(2)
    d_hidden, d_out = keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)
    generator = lambda z: g_out(g_hidden(z))
    discriminator = lambda x: d_out(d_hidden(x))
    generator(tf.zeros([1, 2]))
    discriminator(tf.zeros([1, 2]))
    g_vars = g_hidden.trainable_variables + g_out.trainable_variables
    d_vars = d_hidden.trainable_variables + d_out.trainable_variables
    for var, path in zip(g_vars + d_vars, initial, strict=True):
        var.assign(initial[path])
    data = make_generator(SEED, 0)
    noise = make_generator(SEED, 1)

    def batch():
        x = tf.constant([1.0, -1.0]) + 0.5 * data.normal([BATCH, 2])
        return x, noise.normal([BATCH, 2])

    def d_loss(x, z):
        fake = tf.stop_gradient(generator(z))
        return tf.reduce_mean(tf.nn.softplus(-discriminator(x))) + tf.reduce_mean(
            tf.nn.softplus(discriminator(fake))
        )

    def g_loss(z):
        return tf.reduce_mean(tf.nn.softplus(-discriminator(generator(z))))

    def sgd(loss_fn, variables, lr):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        for var, grad in zip(variables, tape.gradient(loss, variables), strict=True):
            var.assign_sub(lr * grad)

    def d_step():
        x, z = batch()
        sgd(lambda: d_loss(x, z), d_vars, LR_D)

    def g_step():
        _, z = batch()
        sgd(lambda: g_loss(z), g_vars, LR_G)

    for _ in range(2):  # g_only
        g_step()
    for _ in range(2 * 2):  # d_only, repeat 2
        d_step()
    for step in range(3):  # alternating; the generator only on even steps
        d_step()
        if step % 2 == 0:
            g_step()
    for _ in range(3):  # joint: one batch, both gradients from the same weights
        x, z = batch()
        with tf.GradientTape(persistent=True) as tape:
            ld, lg = d_loss(x, z), g_loss(z)
        gd, gg = tape.gradient(ld, d_vars), tape.gradient(lg, g_vars)
        for var, grad in zip(d_vars, gd, strict=True):
            var.assign_sub(LR_D * grad)
        for var, grad in zip(g_vars, gg, strict=True):
            var.assign_sub(LR_G * grad)
    return {path: var.numpy() for path, var in zip(initial, g_vars + d_vars, strict=True)}


BACKENDS = [(1, "towers"), (4, "towers"), (2, "mirrored"), (4, "mirrored"), (2, "central_storage")]


@pytest.fixture(scope="module", params=BACKENDS, ids=[f"{s}-{n}" for n, s in BACKENDS])
def trained(request):
    towers, strategy = request.param
    trainer = Trainer(config(towers, ALL_KINDS, devices={"towers": towers, "strategy": strategy}))
    initial = snapshot(trainer)
    run_all(trainer)
    return trainer, initial


def test_towers_match_a_plain_single_device_loop(trained):
    trainer, initial = trained
    expected = reference_run(initial)
    final = snapshot(trainer)
    diff = max(float(np.max(np.abs(final[p] - expected[p]))) for p in expected)
    moved = max(float(np.max(np.abs(final[p] - initial[p]))) for p in expected)
    backend = trainer.config.devices.strategy
    print(f"{backend} x{trainer.placement.replicas}: max |stagegan - reference| = {diff:.3g}")
    assert moved > 1e-2  # training really happened
    assert diff <= 1e-5


def test_step_counters_follow_repeat_and_every(trained):
    trainer, _ = trained
    # d: 2 steps x repeat 2, 3 alternating steps, 3 joint steps; g: 2 + steps 0 and 2 + 3.
    assert int(trainer.optimizers["d"].iterations.numpy()) == 4 + 3 + 3
    assert int(trainer.optimizers["g"].iterations.numpy()) == 2 + 2 + 3
    assert trainer.step_count == 10


def test_every_stage_traced_once_whatever_the_order():
    trainer = Trainer(config(2, ALL_KINDS))  # its own: the shared fixtures are not changed
    order = [3, 0, 2, 1, 0, 3, 1, 2]  # alternate stages out of schedule order
    for index in order:
        trainer.stage_steps[index](1)
    assert trainer.trace_counts() == {"g_only": 1, "d_only": 1, "alternating": 1, "joint": 1}
    for stage_step in trainer.stage_steps:
        assert stage_step.function.experimental_get_tracing_count() == 1


def test_randomness_does_not_depend_on_tower_count():
    one = Trainer(config(1, ALL_KINDS[:2]))
    two = Trainer(config(2, ALL_KINDS[:2]))
    assert snapshot(one).keys() == snapshot(two).keys()
    for a, b in zip(snapshot(one).values(), snapshot(two).values(), strict=True):
        np.testing.assert_array_equal(a, b)  # same initial weights from the same seed
    run_all(one)
    run_all(two)
    for a, b in zip(snapshot(one).values(), snapshot(two).values(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


ISOLATION = [
    {"name": "g_only", "steps": 3, "updates": [G]},
    {"name": "d_only", "steps": 3, "updates": [D]},
    {"name": "g_out_only", "steps": 3, "updates": [{**G, "train": "generator/out/*"}]},
    {"name": "joint", "steps": 2, "mode": "simultaneous", "updates": [D, G]},
]


def test_variables_outside_a_stage_never_change():
    trainer = Trainer(config(2, ISOLATION))
    trained_by = {
        "g_only": "generator/",
        "d_only": "discriminator/",
        "g_out_only": "generator/out/",
        "joint": "",
    }
    for index, stage in enumerate(trainer.schedule.stages):
        before = snapshot(trainer)
        for step in range(stage.steps):
            trainer.step(trainer.schedule.position(trainer.step_count))
            del step
        after = snapshot(trainer)
        for path in before:
            if path.startswith(trained_by[stage.name]):
                assert not np.array_equal(before[path], after[path]), (stage.name, path)
            else:
                np.testing.assert_array_equal(before[path], after[path], err_msg=stage.name)
        assert trainer.stage_steps[index].trace_count == 1


def test_none_gradients_are_dropped_and_logged_once(caplog):
    stages = [{"name": "both", "steps": 3, "updates": [{**D, "train": "*"}]}]
    trainer = Trainer(config(2, stages))
    with caplog.at_level(logging.INFO, logger="stagegan"):
        trainer.trace()
        before = snapshot(trainer)
        run_all(trainer)
    after = snapshot(trainer)
    g_paths = [p for p in before if p.startswith("generator/")]
    assert list(trainer.stage_steps[0].traced["update"].dropped) == g_paths
    for path in before:
        changed = not np.array_equal(before[path], after[path])
        assert changed == path.startswith("discriminator/"), path
    messages = [r.getMessage() for r in caplog.records if "get no gradient" in r.getMessage()]
    assert len(messages) == 1 and "4 variable(s)" in messages[0]


def test_an_update_with_no_gradient_at_all_is_a_config_error():
    stages = [{"name": "wrong", "steps": 1, "updates": [{**G, "loss": "d_loss"}]}]
    trainer = Trainer(config(1, stages))
    with pytest.raises(ConfigError) as info:
        trainer.trace()
    assert info.value.key == "stages[0].updates[0]"
    assert "stage 'wrong', update 'generator'" in info.value.message
    assert "d_loss" in info.value.message


@pytest.mark.parametrize(
    "change, key, words",
    [
        ({"train": "disc/*"}, "stages[0].updates[0].train", "known scopes: discriminator/"),
        ({"loss": "w_loss"}, "stages[0].updates[0].loss.w_loss", "unknown loss term"),
    ],
)
def test_build_time_errors_name_the_key(change, key, words):
    with pytest.raises(ConfigError) as info:
        Trainer(config(1, [{"name": "s", "steps": 1, "updates": [{**D, **change}]}]))
    assert info.value.key == key and words in info.value.message


def test_overlapping_updates_in_a_simultaneous_stage_are_refused():
    stage = {"name": "s", "steps": 1, "mode": "simultaneous", "updates": [D, {**G, "train": "*"}]}
    with pytest.raises(ConfigError, match="also trained by stages\\[0\\].updates\\[0\\]"):
        Trainer(config(1, [stage]))


def test_optimizer_option_errors_name_the_key():
    bad = {"g": {"type": "sgd", "learning_rate": 0.1, "beta_1": 0.5}}
    with pytest.raises(ConfigError) as info:
        Trainer(config(1, [{"name": "s", "steps": 1, "updates": [G]}], optimizers=bad))
    assert info.value.key == "optimizers.g.beta_1"


def test_private_optimizers_do_not_share_state():
    private = {"type": "adam", "learning_rate": 0.01}
    stages = [
        {"name": "a", "steps": 2, "updates": [{**G, "optimizer": private}]},
        {"name": "b", "steps": 3, "updates": [{**G, "optimizer": private}]},
    ]
    trainer = Trainer(config(1, stages))
    run_all(trainer)
    first, second = (trainer.optimizers[f"stages[{i}].updates[0]"] for i in range(2))
    assert first is not second
    assert (int(first.iterations), int(second.iterations)) == (2, 3)


# Isolation of everything in the checkpoint: weights, optimizer state, and the state of the
# networks (BatchNormalization statistics in both networks here). A frozen network runs on
# batch statistics and its writes are discarded (stagegan.core.replicas).

BN_ISOLATION = [
    {"name": "g_only", "steps": 2, "updates": [G]},
    {"name": "d_only", "steps": 2, "updates": [D]},
    {"name": "g_out_only", "steps": 2, "updates": [{**G, "train": "generator/out/*"}]},
    {"name": "joint", "steps": 2, "mode": "simultaneous", "updates": [D, G]},
]
# Which checkpoint keys a stage may change, besides the step counter and the random streams.
MAY_CHANGE = {
    "g_only": ("generator:", "optimizer_g/"),
    "d_only": ("discriminator:", "optimizer_d/"),
    "g_out_only": ("generator:out:", "generator:bn:", "optimizer_g/"),
    "joint": ("generator:", "discriminator:", "optimizer_"),
}
ALWAYS = ("global_step", "rng_", "toy_", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH")


def checkpoint_values(trainer, path):
    return read_checkpoint(trainer.checkpoint.write(str(path)))


@pytest.mark.parametrize("towers, strategy", [(2, "towers"), (2, "mirrored")])
def test_nothing_in_the_checkpoint_changes_outside_its_stage(towers, strategy, tmp_path):
    trainer = Trainer(
        config(
            towers,
            BN_ISOLATION,
            devices={"towers": towers, "strategy": strategy},
            model={"batchnorm": True, "generator_batchnorm": True},
        )
    )
    for stage in trainer.schedule.stages:
        before = checkpoint_values(trainer, tmp_path / f"{stage.name}-before")
        for _ in range(stage.steps):
            trainer.step(trainer.schedule.position(trainer.step_count))
        after = checkpoint_values(trainer, tmp_path / f"{stage.name}-after")
        assert sorted(after) == sorted(before)
        allowed = MAY_CHANGE[stage.name]
        changed = [k for k in before if not np.array_equal(before[k], after[k])]
        unexpected = [k for k in changed if not k.startswith(allowed + ALWAYS)]
        assert unexpected == [], stage.name
        # The trained networks' statistics did move (so the test can see a change).
        for prefix in allowed:
            if prefix.endswith(":") and prefix != "generator:out:":
                stats = f"{prefix.split(':')[0]}:bn:moving_mean/.ATTRIBUTES/VARIABLE_VALUE"
                assert stats in changed, (stage.name, stats)
