"""The levers against mode collapse (issue 68), each against numbers computed by hand: the
relativistic pairing loss `rpgan`, R2, MSGAN's `mode_seeking` term, and the minibatch
standard deviation of the DCGAN and ResNet discriminators (`model.mbstd`); their wiring through
packing and conditioning; a tiny run with all of them; the settings they refuse."""

import math
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from toytask import run_steps

from stagegan.config.schema import parse_config
from stagegan.core import losses
from stagegan.core.layers import MinibatchStddev
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.tasks import resnet
from stagegan.tasks.base import Context, adversarial_losses
from stagegan.tasks.unconditional import Unconditional, conditional_generator, discriminator
from stagegan.training.trainer import Trainer

sp = lambda v: math.log1p(math.exp(v))  # softplus


def test_rpgan_pairs_the_ith_real_output_with_the_ith_generated_one():
    real, fake = tf.constant([[2.0], [-1.0]]), tf.constant([[0.5], [-3.0]])
    d_loss, g_loss = losses.adversarial("rpgan")
    assert float(d_loss(real, fake)) == pytest.approx((sp(0.5 - 2) + sp(-3 + 1)) / 2, rel=1e-6)
    assert float(g_loss(fake, real)) == pytest.approx((sp(2 - 0.5) + sp(-1 + 3)) / 2, rel=1e-6)
    assert losses.relativistic("rpgan") and not losses.relativistic("hinge")
    with pytest.raises(ValueError, match="g_loss\\(fake, real\\)"):
        g_loss(fake)
    # Accuracy: the share of pairs ordered rightly (pair 2 is not: -1 < -0.5), for both sides.
    monitor = losses.AccuracyMonitor("rpgan")
    values = monitor(real, tf.constant([[0.5], [-0.5]]), losses.ACCURACY_TERMS)
    assert {k: float(v) for k, v in values.items()} == {
        "d_real_accuracy": 0.5,
        "d_fake_accuracy": 0.5,
    }


def test_r2_is_r1_on_generated_samples_held_constant():
    critic = lambda x: 0.5 * tf.reduce_sum(tf.square(x), axis=1)  # gradient x
    fake = tf.Variable([[1.0, 2.0], [3.0, 0.0]])
    with tf.GradientTape() as tape:
        value = losses.r2_penalty(critic, fake)
    assert float(value) == pytest.approx((1 + 4 + 9) / 2)
    assert tape.gradient(value, fake) is None  # it trains the discriminator only


def test_mode_seeking_by_hand():
    # pairs (rows 0, 1) and (2, 3): mean |image difference| over all elements
    # (|1 - 0| + |3 - 0| + |2 - 4| + |0 - 0|) / 4 = 1.5; mean |latent difference| (2 + 1) / 2
    images = tf.constant([[0.0, 0.0], [1.0, 3.0], [2.0, 0.0], [4.0, 0.0]])
    latents = tf.constant([[0.0], [2.0], [1.0], [0.0]])
    expected = 1 / (1.5 / 1.5 + 1e-5)
    assert float(losses.mode_seeking(images, latents)) == pytest.approx(expected, rel=1e-6)
    spread = tf.constant([[0.0, 0.0], [2.0, 6.0], [4.0, 0.0], [8.0, 0.0]])  # twice as far
    assert float(losses.mode_seeking(spread, latents)) == pytest.approx(1 / (2 + 1e-5), rel=1e-6)


def test_mode_seeking_pairs_by_hand():
    # the pairs of test_mode_seeking_by_hand, each alone: pair 0 |1 - 0| + |3 - 0| = 4 over 2
    # elements = 2, over |0 - 2| = 2: ratio 1; pair 1 (|2 - 4| + 0) / 2 = 1 over 1: ratio 1
    images = tf.constant([[0.0, 0.0], [1.0, 3.0], [2.0, 0.0], [4.0, 0.0]])
    latents = tf.constant([[0.0], [2.0], [1.0], [0.0]])
    assert float(losses.mode_seeking_pairs(images, latents)) == pytest.approx(1 / (1 + 1e-5))
    # a nearly collapsed pair (rows 2 and 3, 0.02 apart: ratio 0.01) dominates; the batch
    # form is barely moved, mean distances (4 + 0.02) / 4 over 1.5
    collapsed = tf.Variable([[0.0, 0.0], [1.0, 3.0], [2.0, 0.0], [2.02, 0.0]])
    with tf.GradientTape() as tape:
        value = losses.mode_seeking_pairs(collapsed, latents, epsilon=0.01)
    assert float(value) == pytest.approx((1 / 1.01 + 1 / 0.02) / 2, rel=1e-5)
    batch = losses.mode_seeking(collapsed, latents)
    assert float(batch) == pytest.approx(1 / (1.005 / 1.5 + 1e-5), rel=1e-5)
    grads = tape.gradient(value, collapsed).numpy()
    # d/d(apart_k) of (1 / (apart_k / between_k + e)) / 2 = -1 / (2 between_k (ratio_k + e)^2);
    # apart_k = mean|difference| over the pair's 2 elements, so each element gets half of it
    pair0 = 1 / (2 * 2 * 1.01**2) / 2
    assert grads[1] == pytest.approx([-pair0, -pair0], rel=1e-4)  # pushed away from row 0
    # -625, some 5,000 times pair 0's
    assert grads[3][0] == pytest.approx(-1 / (2 * 1 * 0.02**2) / 2, rel=1e-4)


def hand_task(adversarial="rpgan"):
    """Packs of 2, conditional: G([z, y]) = 2 z + y; D([pack, labels]) = sum(pack^2) / 2 +
    sum(labels), whose input gradient is the pack itself."""

    def generator(inputs, training=False):
        z, y = inputs
        return tf.reshape(2.0 * z[:, 0] + tf.cast(y, tf.float32), [-1, 1, 1, 1])

    def critic(inputs, training=False):
        packs, labels = inputs
        total = 0.5 * tf.reduce_sum(tf.square(packs), axis=[1, 2, 3])
        return (total + tf.reduce_sum(tf.cast(labels, tf.float32), axis=1))[:, None]

    d_loss, g_loss = losses.adversarial(adversarial)
    return types.SimpleNamespace(
        pack=2, conditional=True, loss={"adversarial": adversarial}, context=Context(),
        generator=generator, discriminator=critic, d_loss=d_loss, g_loss=g_loss,
        d_accuracy=losses.AccuracyMonitor(adversarial),
    )  # fmt: skip


BATCH = {
    "x": tf.reshape(tf.constant([1.0, 2.0, 3.0, 4.0]), [4, 1, 1, 1]),
    "y": tf.constant([0, 1, 0, 1]),
    "z": tf.constant([[0.5], [1.5], [-1.0], [2.0]]),
    "fake_y": tf.constant([1, 0, 0, 1]),
    "epsilon": tf.constant([0.5, 0.5, 0.5, 0.5]),
}


def test_rpgan_r2_and_mode_seeking_through_packing_and_classes_by_hand():
    """Real packs (1, 2) and (3, 4), classes (0, 1) each: D = 2.5 + 1 = 3.5 and 12.5 + 1 =
    13.5. With mode_seeking the pairs take their first one's class, fake_y (1, 1, 0, 0):
    G = (2, 4, -2, 4), packs (2, 4) and (-2, 4): D = 10 + 2 = 12 and 10 + 0 = 10."""
    terms = ("d_loss", "g_loss", "r1", "r2", "mode_seeking", "d_real_accuracy")
    out = {k: float(v) for k, v in adversarial_losses(hand_task(), BATCH, terms).items()}
    assert out["d_loss"] == pytest.approx((sp(12 - 3.5) + sp(10 - 13.5)) / 2, rel=1e-5)
    assert out["g_loss"] == pytest.approx((sp(3.5 - 12) + sp(13.5 - 10)) / 2, rel=1e-5)
    assert out["r1"] == pytest.approx((1 + 4 + 9 + 16) / 2)  # ||real pack||^2
    assert out["r2"] == pytest.approx((4 + 16 + 4 + 16) / 2)  # ||generated pack||^2
    # pairs (2, 4) and (-2, 4) from latents (0.5, 1.5) and (-1, 2): ratio (2 + 6) / (1 + 3)
    assert out["mode_seeking"] == pytest.approx(1 / (2 + 1e-5), rel=1e-6)
    assert out["d_real_accuracy"] == 0.5  # 3.5 < 12, 13.5 > 10
    # pair by pair: |2 - 4| / |0.5 - 1.5| = 2 and |-2 - 4| / |-1 - 2| = 2, with the same classes
    pairs = adversarial_losses(hand_task(), BATCH, ("g_loss", "mode_seeking_pairs"))
    assert float(pairs["mode_seeking_pairs"]) == pytest.approx(1 / (2 + 1e-5), rel=1e-6)
    assert float(pairs["g_loss"]) == pytest.approx(out["g_loss"], rel=1e-6)
    # The generator's term alone scores the real packs itself; without mode_seeking each
    # sample keeps its class: G = (2, 3, -2, 5), D = 6.5 + 1 and 14.5 + 1.
    alone = adversarial_losses(hand_task(), BATCH, ("g_loss",))
    assert float(alone["g_loss"]) == pytest.approx((sp(3.5 - 7.5) + sp(13.5 - 15.5)) / 2, rel=1e-5)


def test_r1_alone_generates_nothing():
    task = hand_task()
    task.generator = None  # a call would fail: R1 (a lazy update's) needs only the reals
    assert float(adversarial_losses(task, BATCH, ("r1",))["r1"]) == pytest.approx(15.0)


def test_a_non_relativistic_generator_loss_takes_the_generated_outputs_only():
    out = adversarial_losses(hand_task("hinge"), BATCH, ("g_loss",))
    assert float(out["g_loss"]) == pytest.approx(-(7.5 + 15.5) / 2)


# The minibatch standard deviation ------------------------------------------------------------


def test_minibatch_stddev_of_two_groups_by_hand():
    x = tf.reshape(tf.constant([1.0, 3.0, 2.0, 2.0]), [4, 1, 1, 1])
    out = MinibatchStddev(2)(x).numpy()
    # groups (1, 3): deviations +-1, sqrt(1 + 1e-8); (2, 2): sqrt(0 + 1e-8)
    np.testing.assert_allclose(out[:, 0, 0, 1], [1.0, 1.0, 1e-4, 1e-4], rtol=1e-4)
    np.testing.assert_array_equal(out[..., 0], x.numpy()[..., 0])


class Rngs:
    seed = 0


def built(arch, **model):
    options = {
        "data": {"source": "shapes", "size": 32, "channels": 3},
        "model": {"arch": arch, "width": 4, "latent_dim": 8, **model},
    }
    task = Unconditional(options, Rngs())
    network = discriminator(task) if arch == "dcgan" else resnet.discriminator(task)
    return task, sum(int(np.prod(v.shape)) for v in network.trainable_weights)


def conv(k, a, b):
    return k * k * a * b + b


def test_the_dcgan_discriminator_takes_one_more_channel_into_its_last_conv():
    """32 px, width 4: convs 3->4, 4->8, 8->16 (4x4, stride 2) and a dense 4*4*16 -> 1; the
    minibatch deviation makes the last conv's input 8 + 1 channels (pack 2: 6 into the first)."""
    dense = 4 * 4 * 16 + 1
    task, plain = built("dcgan")
    assert plain == conv(4, 3, 4) + conv(4, 4, 8) + conv(4, 8, 16) + dense
    task, with_std = built("dcgan", mbstd=True, mbstd_group=2, pack=2)
    assert with_std == conv(4, 6, 4) + conv(4, 4, 8) + conv(4, 9, 16) + dense
    estimate = sum(count for _, count in task.network_sizes()[0][-3:])  # weights, no biases
    assert estimate == with_std - (4 + 8 + 16 + 1)
    assert "minibatch stddev (groups of 2)" in task.describe_networks()["discriminator"]


def test_the_resnet_discriminators_last_block_takes_one_more_channel():
    """32 px, width 4: 8 channels a block; the last block (8 + 1 -> 8) then needs a 1x1
    shortcut, where without the deviation it is the identity."""
    block = lambda a, b, shortcut=True: (
        conv(3, a, b) + conv(3, b, b) + (conv(1, a, b) if shortcut else 0)
    )
    head = 8 + 1
    task, plain = built("resnet")
    assert plain == block(3, 8) + block(8, 8) + 2 * block(8, 8, False) + head
    task, with_std = built("resnet", mbstd=True)
    assert with_std == block(3, 8) + block(8, 8) + block(8, 8, False) + block(9, 8) + head
    assert resnet.parameter_count(task, "discriminator") == with_std


def test_embed_norm_gives_every_class_embedding_the_length_of_a_typical_z():
    """latent_dim 8: the generator's body takes [z, e / |e| * sqrt(8)], whatever the length
    of the learned row e; without model.embed_norm it takes [z, e]."""
    z = np.random.default_rng(0).normal(size=(3, 8)).astype("float32")
    y = np.array([0, 1, 2], "int32")
    for norm in (True, False):
        options = {
            "data": {"source": "shapes", "size": 32, "channels": 3},
            "model": {"width": 4, "latent_dim": 8, "conditional": True, "embed_norm": norm},
        }
        task = Unconditional(options, Rngs())
        task.num_classes = 3
        generator = conditional_generator(task)
        rows = np.array([[3.0] * 8, [0.1, 0, 0, 0, 0, 0, 0, 0], np.arange(8.0)], "float32")
        generator.get_layer("embed").set_weights([rows])
        joined = next(layer for layer in generator.layers if "concatenate" in layer.name)
        body_input = keras.Model(generator.inputs, joined.output)([z, y]).numpy()
        by_hand = rows / np.linalg.norm(rows, axis=1, keepdims=True) * np.sqrt(8) if norm else rows
        np.testing.assert_allclose(body_input, np.concatenate([z, by_hand], 1), rtol=1e-5)
        said = "class embedding scaled to z's length" in task.describe_networks()["generator"]
        assert said == norm


# A run with every lever, and what is refused ------------------------------------------------


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("modes") / "data.npz"
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1, 2], 4)
    np.savez(path, images=rng.integers(0, 256, (12, 28, 28, 1), np.uint8), labels=labels)
    return str(path)


def config(npz, model=None, loss=None, d_loss=None, g_loss=None, batch=8, towers=1, **extra):
    return {
        "name": "modes",
        "seed": 1,
        "task": "unconditional",
        "data": {"source": "npz", "path": npz, "size": 28, "channels": 1, "labels": "labels"},
        "model": {"latent_dim": 4, "width": 2, "conditional": True, **(model or {})},
        "loss": loss or {},
        "batch_size": batch,
        "devices": {"towers": towers},
        "stages": [
            {
                "name": "joint",
                "steps": 2,
                "mode": "simultaneous",
                "updates": [
                    {"train": "discriminator/*", "loss": d_loss or {"d_loss": 1}},
                    {"train": "generator/*", "loss": g_loss or {"g_loss": 1}},
                ],
            }
        ],
        "samples": None,
        "log": {"tensorboard": False},
        **extra,
    }


def test_a_conditional_packed_augmented_run_with_every_lever_trains(npz):
    raw = config(
        npz,
        model={"mbstd": True, "mbstd_group": 2, "pack": 2, "spectral_norm": True},
        loss={"adversarial": "rpgan"},
        d_loss={"d_loss": 1, "r1": 0.1, "r2": 0.1},
        g_loss={"g_loss": 1, "mode_seeking": 0.5},
        augment={"ops": ["translation"], "p": 0.5},
    )
    trainer = Trainer(parse_config(raw))
    outputs = run_steps(trainer)
    for name in ("d_loss", "r1", "r2", "g_loss", "mode_seeking"):
        values = [float(v) for out in outputs for k, v in out.metrics.items() if k.endswith(name)]
        assert values and all(np.isfinite(values)), name
    assert "minibatch stddev (groups of 2)" in describe_plan(trainer)


@pytest.mark.parametrize(
    "changes, key, words",
    [
        ({"model": {"arch": "progressive", "mbstd": True}}, "model.mbstd", "always has one"),
        ({"model": {"mbstd_group": 2}}, "model.mbstd_group", "progressive or with model.mbstd"),
        ({"model": {"mbstd": True, "mbstd_group": 0}}, "model.mbstd_group", "must be positive"),
        ({"model": {"mbstd": True, "mbstd_group": 3}}, "model.mbstd_group", "8 a replica"),
        (
            {"model": {"mbstd": True, "mbstd_group": 3, "pack": 2}},
            "model.mbstd_group",
            "8 a replica, 4 packs of 2",
        ),
        ({"model": {"mbstd": 1}}, "model.mbstd", "must be bool"),
        (
            {"model": {"embed_norm": True, "conditional": False}},
            "model.embed_norm",
            "needs model.conditional: true",
        ),
        (
            {"model": {"embed_norm": True, "generator": "mymodule:build"}},
            "model.embed_norm",
            "model.generator names your own (mymodule:build)",
        ),
        (
            {"model": {"embed_norm": True, "arch": "resnet"}},
            "model.embed_norm",
            "applies to model.arch: dcgan only",
        ),
        ({"loss": {"adversarial": "relativistic"}}, "loss.adversarial", "least_squares, rpgan"),
        (
            {"g_loss": {"g_loss": 1, "mode_seeking": 1}, "batch": 6, "towers": 2},
            "stages[0].updates[1].loss.mode_seeking",
            "must be even (batch_size 6 over 2 replicas = 3)",
        ),
        (
            {"g_loss": {"g_loss": 1, "mode_seeking_pairs": 1}, "batch": 6, "towers": 2},
            "stages[0].updates[1].loss.mode_seeking_pairs",
            "must be even (batch_size 6 over 2 replicas = 3)",
        ),
    ],
)
def test_settings_the_levers_refuse_name_their_key(npz, changes, key, words):
    with pytest.raises(ConfigError) as error:
        Trainer(parse_config(config(npz, **changes)))
    assert error.value.key == key and words in error.value.message, error.value


def test_completion_refuses_rpgan():
    from stagegan.tasks.base import RandomStreams
    from stagegan.tasks.completion import Completion

    with pytest.raises(ConfigError, match="^loss.adversarial: rpgan is not available"):
        Completion({"loss": {"adversarial": "rpgan"}}, RandomStreams(0))
