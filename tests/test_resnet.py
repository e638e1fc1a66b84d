"""The residual networks (`model.arch: resnet`): parameter counts against the reference
configurations, computed here by hand from the layer shapes; the shape at every block; the
plan's lines; a conditional run that trains; and the settings it refuses."""

import numpy as np
import pytest
import tensorflow as tf
from toytask import run_steps

from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.tasks import resnet
from stagegan.tasks.unconditional import Unconditional
from stagegan.training.trainer import Trainer


class Rngs:
    seed = 0


def networks(size=32, width=64, latent=128, channels=3, classes=0, **model):
    """The built-in generator and discriminator, built outside a run."""
    options = {
        "data": {"source": "shapes", "size": size, "channels": channels},
        "model": {"arch": "resnet", "width": width, "latent_dim": latent, **model},
    }
    task = Unconditional(options, Rngs())
    task.conditional, task.num_classes = bool(classes), classes
    return task, resnet.generator(task), resnet.discriminator(task)


def trainable(network):
    return sum(int(np.prod(v.shape)) for v in network.trainable_weights)


# By hand, from the layer shapes (PyTorch-StudioGAN's resnet.py; a conv's bias counted) -------


def conv(k, a, b):
    return k * k * a * b + b


def g_block(a, b, norm=2):
    """bn(a), conv3(a->b), bn(b), conv3(b->b), shortcut conv1(a->b); a BN has `norm` per
    channel (2: gamma and beta; 2K: a conditional one's per-class gain and bias)."""
    return norm * a + conv(3, a, b) + norm * b + conv(3, b, b) + conv(1, a, b)


def d_block(a, b, shortcut=True):
    return conv(3, a, b) + conv(3, b, b) + (conv(1, a, b) if shortcut else 0)


def test_sngan_cifar_networks_have_the_papers_parameter_counts():
    """SNGAN's CIFAR-10 ResNets (StudioGAN g_conv_dim = d_conv_dim = 64, z 128): the
    generator's three 256-channel up-blocks, the discriminator's four 128-channel blocks."""
    _, g, d = networks(spectral_norm=True)
    generator = (128 * 16 * 256 + 16 * 256) + 3 * g_block(256, 256) + 2 * 256 + conv(3, 256, 3)
    discriminator = d_block(3, 128) + d_block(128, 128) + 2 * d_block(128, 128, False) + 129
    assert (trainable(g), trainable(d)) == (generator, discriminator) == (4_276_739, 1_053_825)
    sides = [(8, 256), (16, 256), (32, 256)]
    assert [tuple(g.get_layer(f"block{i}").output.shape[2:]) for i in range(3)] == sides
    sides = [(16, 128), (8, 128), (8, 128), (8, 128)]
    assert [tuple(d.get_layer(f"block{i}").output.shape[2:]) for i in range(4)] == sides


@pytest.mark.parametrize("size", [64, 128])
def test_bigger_sides_follow_studiogans_widths(size):
    task, g, d = networks(size=size, width=4, latent=8)
    ins = {64: [64, 32, 16, 8], 128: [64, 64, 32, 16, 8]}[size]
    outs = {64: [32, 16, 8, 4], 128: [64, 32, 16, 8, 4]}[size]
    generator = 8 * 16 * ins[0] + 16 * ins[0] + 2 * outs[-1] + conv(3, outs[-1], 3)
    generator += sum(g_block(a, b) for a, b in zip(ins, outs, strict=True))
    d_outs = {64: [4, 8, 16, 32, 64], 128: [4, 8, 16, 32, 64, 64]}[size]
    discriminator = d_block(3, 4) + d_outs[-1] + 1
    for i, (a, b) in enumerate(zip(d_outs, d_outs[1:], strict=False)):
        pools = i + 2 < len(d_outs)  # all but the last block halve the side
        discriminator += d_block(a, b, shortcut=pools or a != b)
    assert trainable(g) == generator
    assert trainable(d) == discriminator
    for i, b in enumerate(outs):
        assert g.get_layer(f"block{i}").output.shape[1:] == (8 * 2**i, 8 * 2**i, b)
    for i, b in enumerate(d_outs):
        side = size // 2 ** min(i + 1, len(d_outs) - 1)
        assert d.get_layer(f"block{i}").output.shape[1:] == (side, side, b)
    assert resnet.parameter_count(task, "generator") == generator
    assert resnet.parameter_count(task, "discriminator") == discriminator


def test_conditional_networks_attention_and_more_blocks():
    """5 classes: every generator BN holds a gain and a bias per class, the discriminator an
    embedding of its last width; attention at 16 px adds C*C/8 * 2 + C*C/2 * 2 + sigma in each
    network; `blocks: 2` doubles each resolution's blocks (the extra ones keep their width,
    so their shortcut is the identity)."""
    k = 5
    task, g, d = networks(width=4, latent=8, classes=k, attention=16, blocks=2)
    c = 16  # generator: 4 x width everywhere at 32 px
    attention = lambda ch: ch * ch // 8 * 2 + ch * ch // 2 * 2 + 1
    extra = 2 * k * c * 2 + 2 * conv(3, c, c)  # a same-width block: two cBNs, two convs
    generator = 8 * 16 * c + 16 * c + 3 * (g_block(c, c, 2 * k) + extra)
    generator += 2 * k * c + conv(3, c, 3) + attention(c) - 1  # no sigma: its out conv starts at 0
    assert trainable(g) == generator
    c = 8  # discriminator: 2 x width
    discriminator = d_block(3, c) + d_block(c, c) + 6 * d_block(c, c, False) + (c + 1) + k * c
    assert trainable(d) == discriminator + attention(c)
    assert resnet.parameter_count(task, "generator") == trainable(g)
    assert resnet.parameter_count(task, "discriminator") == trainable(d)
    z, y = tf.random.normal([4, 8]), tf.constant([0, 1, 2, 4])
    images = g([z, y], training=True)
    assert images.shape == (4, 32, 32, 3)
    assert d([images, y[:, None]]).shape == (4, 1)
    # a fresh conditional BN is the plain BN of every class: gains 1, biases 0
    gain, bias = g.get_layer("block0_bn1_gain"), g.get_layer("block0_bn1_bias")
    assert np.all(gain.embeddings.numpy() == 1) and np.all(bias.embeddings.numpy() == 0)
    assert np.all(g.get_layer("attention_out").kernel.numpy() == 0)  # starts as the identity


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("resnet") / "data.npz"
    rng = np.random.default_rng(0)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    np.savez(path, images=rng.integers(0, 256, (12, 28, 28, 3), np.uint8), labels=labels)
    return str(path)


def config(npz, **model):
    return {
        "name": "resnet",
        "seed": 2,
        "task": "unconditional",
        "data": {"source": "npz", "path": npz, "size": 28, "channels": 3, "labels": "labels"},
        "model": {"arch": "resnet", "latent_dim": 4, "width": 2, "conditional": True, **model},
        "batch_size": 4,
        "optimizers": {"g": {"type": "adam"}, "d": {"type": "adam"}},
        "stages": [
            {
                "name": "joint",
                "steps": 2,
                "mode": "simultaneous",
                "updates": [
                    {"train": "discriminator/*", "loss": "d_loss", "optimizer": "d"},
                    {"train": "generator/*", "loss": "g_loss", "optimizer": "g"},
                ],
            }
        ],
        "samples": None,
        "log": {"tensorboard": False},
    }


@pytest.fixture(scope="module")
def trainer(npz):
    """A conditional resnet run with attention, built and traced once for the module."""
    return Trainer(parse_config(config(npz, spectral_norm=True, attention=14, width=4)))


def test_a_conditional_resnet_run_trains_and_plan_names_its_networks(trainer):
    before = [w.copy() for w in trainer.task.discriminator.get_weights()]
    outputs = run_steps(trainer, 2)
    assert all(np.isfinite(float(v)) for out in outputs for v in out.metrics.values())
    after = trainer.task.discriminator.get_weights()
    assert any(np.abs(a - b).max() > 0 for a, b in zip(after, before, strict=True))
    plan = describe_plan(trainer)
    g = trainable(trainer.task.generator)
    assert (
        "generator: resnet: 2 residual blocks (2 upsampling) 7->28 px, channels 16, "
        f"conditional batch norm, self-attention at 14 px, {g:,} trainable parameters"
    ) in plan
    assert "discriminator: resnet: 4 residual blocks (2 pooling) 28->7 px, channels 8, " in plan
    assert "projection head, self-attention at 14 px" in plan and "spectral normalisation" in plan


LOAD = """
import sys
import numpy as np
import keras
model = keras.saving.load_model(sys.argv[1])
z, y = np.load(sys.argv[2]), np.array([0, 2, 1], np.int32)
np.save(sys.argv[3], np.asarray(model([z, y])))
assert not any(name.startswith("stagegan") for name in sys.modules), "stagegan was imported"
"""


def test_an_exported_conditional_generator_with_attention_loads_without_stagegan(trainer, tmp_path):
    """The generator is made of Keras's own layers: its `.keras` export loads in a process that
    never imports stagegan and draws the generator's images (uint8, by hand)."""
    import subprocess
    import sys

    from stagegan.run.export import export_generator

    path = export_generator(trainer, tmp_path / "out", "keras")
    z = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "z.npy", z)
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(path), str(tmp_path / "z.npy"), str(tmp_path / "x.npy")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    x = trainer.task.generator([z, np.array([0, 2, 1], np.int32)], training=False).numpy()
    expected = np.clip(np.round((x + 1) * 127.5), 0, 255)
    assert np.abs(np.load(tmp_path / "x.npy").astype(float) - expected).max() <= 1


@pytest.mark.parametrize(
    "model, key, words",
    [
        ({"blocks": 0}, "model.blocks", "whole number >= 1"),
        ({"blocks": True}, "model.blocks", "must be int"),
        ({"attention": 7}, "model.attention", "(14, 28 at data.size 28)"),
        ({"attention": 14, "width": 2}, "model.attention", "at least 8 channels at 14 px"),
        ({"arch": "stylegan"}, "model.arch", "dcgan, resnet"),
        ({"arch": "dcgan", "blocks": 2}, "model.blocks", "model.arch: resnet only"),
        ({"arch": "dcgan", "attention": 14}, "model.attention", "model.arch: resnet only"),
    ],
)
def test_settings_that_cannot_be_built_name_their_key(npz, model, key, words):
    with pytest.raises(ConfigError) as error:
        Trainer(parse_config(config(npz, **model)))
    assert error.value.key == key and words in error.value.message


def test_dcgan_refuses_128_px_and_names_the_resnet():
    options = {"data": {"source": "shapes", "size": 128}, "model": {}}
    with pytest.raises(ConfigError, match="128 with model.arch: resnet"):
        Unconditional(options, Rngs())
