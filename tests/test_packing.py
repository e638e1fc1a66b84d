"""PacGAN packing and the penalties of mog2d on every backend, against a plain TF reference.

One discriminator update (d_loss + r1 + gradient penalty) and one generator update, with SGD,
on a packed mog2d: the reference packs with a numpy-style reshape of the whole global batch,
computes the penalties by hand, and must give the weights stagegan gives with 1 or 4 towers,
or 2 mirrored replicas (packs are formed inside each shard: none spans two devices).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from toytask import run_steps, snapshot

from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.tasks.base import make_generator
from stagegan.tasks.mog2d import mode_centres
from stagegan.training.trainer import Trainer

SEED, BATCH, PACK, LR = 3, 16, 2, 0.05
R1, GP = 0.5, 2.0


def config(towers=1, strategy="towers", pack=PACK, spectral_norm=False):
    return parse_config(
        {
            "name": "pack",
            "seed": SEED,
            "task": "mog2d",
            "model": {
                "latent_dim": 3,
                "hidden": 5,
                "layers": 1,
                "pack": pack,
                "spectral_norm": spectral_norm,
            },
            "batch_size": BATCH,
            "devices": {"towers": towers, "strategy": strategy},
            "optimizers": {
                "g": {"type": "sgd", "learning_rate": LR},
                "d": {"type": "sgd", "learning_rate": LR},
            },
            "stages": [
                {
                    "name": "alternating",
                    "steps": 2,
                    "updates": [
                        {
                            "train": "discriminator/*",
                            "loss": {"d_loss": 1.0, "r1": R1, "gradient_penalty": GP},
                            "optimizer": "d",
                        },
                        {"train": "generator/*", "loss": "g_loss", "optimizer": "g"},
                    ],
                }
            ],
        }
    )


def reference_run(initial, steps=2):
    """The same two updates per step written out in plain TensorFlow."""
    dense = lambda units, act=None: keras.layers.Dense(units, activation=act)
    g_layers, d_layers = [dense(5, "relu"), dense(2)], [dense(5, "relu"), dense(1)]
    generator = lambda z: g_layers[1](g_layers[0](z))
    discriminator = lambda x: d_layers[1](d_layers[0](x))
    generator(tf.zeros([1, 3]))
    discriminator(tf.zeros([1, 2 * PACK]))
    g_vars = [v for layer in g_layers for v in layer.trainable_variables]
    d_vars = [v for layer in d_layers for v in layer.trainable_variables]
    for var, path in zip(g_vars + d_vars, initial, strict=True):
        var.assign(initial[path])
    data, noise = make_generator(SEED, 0), make_generator(SEED, 1)
    centres = tf.constant(mode_centres("ring"))

    def batch():
        modes = data.uniform([BATCH], 0, 8, dtype=tf.int32)
        x = tf.gather(centres, modes) + data.normal([BATCH, 2], stddev=0.01)
        return x, noise.normal([BATCH, 3]), noise.uniform([BATCH])

    def packed(points):  # consecutive samples side by side: [B, 2] -> [B / PACK, 2 * PACK]
        return tf.reshape(points, [BATCH // PACK, 2 * PACK])

    def squared_input_gradients(points):  # per pack: ||dD/d(pack)||^2
        with tf.GradientTape() as tape:
            tape.watch(points)
            logits = tf.reduce_sum(discriminator(points))
        return tf.reduce_sum(tf.square(tape.gradient(logits, points)), axis=1)

    def sgd(loss_fn, variables):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        for var, grad in zip(variables, tape.gradient(loss, variables), strict=True):
            var.assign_sub(LR * grad)

    def d_loss(x, z, epsilon):
        real, fake = packed(x), packed(tf.stop_gradient(generator(z)))
        adversarial = tf.reduce_mean(tf.nn.softplus(-discriminator(real))) + tf.reduce_mean(
            tf.nn.softplus(discriminator(fake))
        )
        weights = epsilon[::PACK][:, None]  # one per pack: its first sample's
        mixed = real + weights * (fake - real)
        norms = tf.sqrt(squared_input_gradients(mixed) + 1e-12)  # smooth at a zero gradient
        penalty = tf.reduce_mean(tf.square(norms - 1.0))
        r1 = tf.reduce_mean(squared_input_gradients(real))
        return adversarial + R1 * r1 + GP * penalty

    for _ in range(steps):
        x, z, epsilon = batch()
        sgd(lambda: d_loss(x, z, epsilon), d_vars)  # noqa: B023 - called at once
        _, z, _ = batch()
        sgd(lambda: tf.reduce_mean(tf.nn.softplus(-discriminator(packed(generator(z))))), g_vars)  # noqa: B023
    return {path: var.numpy() for path, var in zip(initial, g_vars + d_vars, strict=True)}


@pytest.mark.parametrize(
    "towers, strategy", [(1, "towers"), (4, "towers"), (2, "mirrored")], ids=str
)
def test_packed_steps_match_a_plain_reference(towers, strategy):
    trainer = Trainer(config(towers, strategy))
    initial = snapshot(trainer)
    run_steps(trainer)
    expected = reference_run(initial)
    final = {v.path: v.numpy() for v in trainer.variables}
    diff = max(float(np.max(np.abs(final[p] - expected[p]))) for p in expected)
    moved = max(float(np.max(np.abs(final[p] - initial[p]))) for p in expected)
    assert moved > 1e-3
    assert diff < 1e-5, diff


def test_discriminator_input_width_follows_the_pack():
    trainer = Trainer(config(pack=4))
    assert trainer.task.discriminator.input_shape == (None, 8)


def test_plan_shows_packing_and_spectral_norm():
    trainer = Trainer(config(spectral_norm=True))
    trainer.trace()
    assert "discriminator: packs 2 samples per input (PacGAN), spectral normalisation" in (
        describe_plan(trainer)
    )


def test_a_pack_must_divide_each_shard():
    with pytest.raises(ConfigError) as info:
        Trainer(config(towers=4, pack=8))  # 16 / 4 = 4 per tower
    assert info.value.key == "model.pack"
    assert "batch_size 16 over 4 replicas = 4" in info.value.message


def test_a_generator_update_leaves_a_spectral_norm_discriminator_untouched():
    """Keras's SpectralNormalization would write W / sigma into the kernel in the generator's
    update; stagegan's layers write nothing, and u moves only in the discriminator's update."""
    raw = config(spectral_norm=True).raw
    stage = raw["stages"][0]
    g_only = parse_config({**raw, "stages": [{**stage, "updates": stage["updates"][1:]}]})
    trainer = Trainer(g_only)
    discriminator = trainer.task.discriminator
    before = {v.path: v.numpy().copy() for v in discriminator.variables}
    generator = {v.path: v.numpy().copy() for v in trainer.task.generator.trainable_variables}
    trainer.step(next(iter(trainer.schedule.positions())))
    for variable in discriminator.variables:  # kernels, biases and u
        np.testing.assert_array_equal(variable.numpy(), before[variable.path])
    assert any(
        not np.array_equal(v.numpy(), generator[v.path])
        for v in trainer.task.generator.trainable_variables
    )
    paths = [v.path for v in discriminator.non_trainable_variables]
    assert paths == ["discriminator/hidden0/u", "discriminator/out/u"]


def test_spectral_norm_trains_alike_on_every_backend():
    """Every discriminator call of a step uses the same sigma, and u advances once per applied
    discriminator update on the variable device: 4 towers and 2 mirrored replicas give the
    weights and u of one device."""

    def run(towers, strategy):
        trainer = Trainer(config(towers, strategy, spectral_norm=True))
        run_steps(trainer)
        return snapshot(trainer, state=True)

    single = run(1, "towers")
    assert "discriminator/hidden0/u" in single
    for towers, strategy in [(4, "towers"), (2, "mirrored")]:
        other = run(towers, strategy)
        assert other.keys() == single.keys()
        for path, value in single.items():
            np.testing.assert_allclose(other[path], value, atol=1e-5, err_msg=path)


def test_u_advances_once_per_applied_discriminator_update():
    trainer = Trainer(config(spectral_norm=True))
    layer = trainer.task.discriminator.get_layer("hidden0")
    u = layer.u.numpy().astype(np.float64)
    position = next(iter(trainer.schedule.positions()))
    trainer.step(position)  # D then G: u takes one power iteration on D's new kernel
    w = layer.kernel.numpy().astype(np.float64)
    v = w @ u
    expected = w.T @ (v / np.linalg.norm(v))
    np.testing.assert_allclose(layer.u.numpy(), expected / np.linalg.norm(expected), rtol=1e-5)
