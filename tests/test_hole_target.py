"""`loss.adversarial_target: hole` (LaMa's `mask_as_fake_target`): each output of a patch
discriminator on a completed image is fake in proportion to the hole in its cell. Checked
against numpy on a discriminator whose logits are known in closed form (the 4x4 mean of its
input's channels), with and without augmentation that moves the pixels."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from toytask import run_steps

from stagegan.config.schema import AugmentConfig, parse_config
from stagegan.core import losses
from stagegan.core.augment import Augmenter, apply_ops, widths
from stagegan.core.staging import to_replica_floats
from stagegan.errors import ConfigError
from stagegan.training.trainer import Trainer

# Per output, in numpy: (real term, fake term, generator term).
NUMPY = {
    "non_saturating": (
        lambda o: np.log1p(np.exp(-o)),
        lambda o: np.log1p(np.exp(o)),
        lambda o: np.log1p(np.exp(-o)),
    ),
    "hinge": (lambda o: np.maximum(0, 1 - o), lambda o: np.maximum(0, 1 + o), lambda o: -o),
    "least_squares": (
        lambda o: 0.5 * (o - 1) ** 2,
        lambda o: 0.5 * o**2,
        lambda o: 0.5 * (o - 1) ** 2,
    ),
}


def by_hand(name, real, fake, t, share):
    real_term, fake_term, g_term = NUMPY[name]
    d = real_term(real).mean() + (t * fake_term(fake) + (1 - t) * real_term(fake)).mean()
    return d, (t * g_term(fake)).mean() / share


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_the_targeted_losses_weigh_each_output_by_its_target(name):
    rng = np.random.default_rng(3)
    real, fake = rng.normal(size=(2, 2, 3, 3, 1)).astype(np.float32)
    t = np.zeros((2, 3, 3, 1), np.float32)
    t[0, 1:, 1:] = 1.0
    t[1, 0, :2] = 0.25
    d_loss, g_loss = losses.targeted(name)
    d, g = by_hand(name, real, fake, t, t.mean())
    assert float(d_loss(real, fake, t)) == pytest.approx(d, rel=1e-5)
    assert float(g_loss(fake, t)) == pytest.approx(g, rel=1e-5)
    assert float(g_loss(fake, t, share=0.5)) == pytest.approx(g * t.mean() / 0.5, rel=1e-5)
    # Fake everywhere: the plain pair.
    plain_d, plain_g = losses.adversarial(name)
    ones = np.ones_like(t)
    assert float(d_loss(real, fake, ones)) == pytest.approx(float(plain_d(real, fake)), rel=1e-6)
    assert float(g_loss(fake, ones)) == pytest.approx(float(plain_g(fake)), rel=1e-6)


def test_the_fake_accuracy_counts_the_hole_outputs_only():
    real = np.array([[1.0, -1.0]], np.float32)
    fake = np.array([[-1.0, 2.0]], np.float32)  # the first is called fake, the second real
    t = np.array([[1.0, 0.0]], np.float32)  # only the first is in the hole
    values = losses.targeted_accuracy(real, fake, t)
    assert float(values["d_fake_accuracy"]) == 1.0
    assert float(values["d_real_accuracy"]) == 0.5


def test_the_mask_moves_with_the_spatial_ops_only():
    mask = np.zeros((2, 4, 4, 1), np.float32)
    mask[:, :, :1] = 1.0  # the left column
    u = np.array([[0.0, 0.5, 0.0], [0.0, 0.5, 0.9]], np.float32)  # brightness on; xflip on, off
    moved = apply_ops(mask, u, ["brightness", "xflip"], 0.5, spatial_only=True).numpy()
    np.testing.assert_array_equal(moved[0], mask[0, :, ::-1])
    np.testing.assert_array_equal(moved[1], mask[1])


def pooled(task):
    """Logits [B, S/4, S/4, 1]: the 4x4 mean of (the first image channel + 0.5 x the mask)."""
    channels = task.data["channels"]
    kernel = np.zeros((1, 1, channels + 1, 1), np.float32)
    kernel[0, 0, 0, 0], kernel[0, 0, -1, 0] = 1.0, 0.5
    x = keras.Input((task.size, task.size, channels + 1))
    mixed = keras.layers.Conv2D(
        1, 1, use_bias=False, kernel_initializer=keras.initializers.Constant(kernel), name="mix"
    )(x)
    return keras.Model(x, keras.layers.AveragePooling2D(4)(mixed), name="discriminator")


def pool(a):
    b, s = a.shape[0], a.shape[1]
    return a.reshape(b, s // 4, 4, s // 4, 4, -1).mean(axis=(2, 4))


def config(loss, **model):
    return parse_config(
        {
            "name": "hole",
            "task": "completion",
            "batch_size": 4,
            "devices": {"towers": 1},
            "data": {"size": 16, "count": 16},
            "model": {
                "width": 4,
                "dilations": [2],
                "discriminator_type": "patch",
                "discriminator": "test_hole_target:pooled",
                **model,
            },
            "loss": {"adversarial": loss, "adversarial_target": "hole"},
            "stages": [
                {
                    "name": "joint",
                    "steps": 1,
                    "updates": [
                        {"train": "discriminator/*", "loss": {"d_adversarial": 1.0}},
                        {"train": "generator/*", "loss": {"g_adversarial": 1.0}},
                    ],
                }
            ],
        }
    )


@pytest.fixture(scope="module")
def trainers():
    made = {name: Trainer(config(name)) for name in sorted(NUMPY)}
    made["feathered"] = Trainer(config("hinge", feather=2))
    return made


def feathered_by_hand(mask, feather):
    """Blend weights: (F + 1 - d) / (F + 1) at chessboard distance d from the hole, >= 0."""
    out = np.zeros_like(mask)
    for b, i, j in np.ndindex(*mask.shape[:3]):
        holes = np.argwhere(mask[b, ..., 0] > 0)
        d = np.abs(holes - [i, j]).max(axis=1).min()
        out[b, i, j, 0] = max(0.0, (feather + 1 - d) / (feather + 1))
    return out


def test_with_feathering_the_target_is_the_share_of_generated_pixels(trainers):
    task = trainers["feathered"].task
    batch = to_replica_floats(task.batch(4))
    x, mask = batch["x"].numpy(), batch["mask"].numpy()
    weights = feathered_by_hand(mask, 2)
    assert float(batch["hole_share"][0]) == pytest.approx(weights.mean(), rel=1e-5)
    completed = task.complete(batch["x"], batch["mask"], training=True)[1].numpy()
    out = task.losses(batch, ["d_adversarial", "g_adversarial"])
    real_logits = pool(x[..., :1] + 0.5 * mask)
    fake_logits = pool(completed[..., :1] + 0.5 * mask)
    d, g = by_hand("hinge", real_logits, fake_logits, pool(weights), weights.mean())
    assert float(out["d_adversarial"]) == pytest.approx(d, rel=1e-4)
    assert float(out["g_adversarial"]) == pytest.approx(g, rel=1e-4)


@pytest.mark.parametrize("name", sorted(NUMPY))
@pytest.mark.parametrize("flipped", [False, True])
def test_the_tasks_terms_match_numpy(trainers, name, flipped):
    task = trainers[name].task
    batch = to_replica_floats(task.batch(4))
    x, mask = batch["x"].numpy(), batch["mask"].numpy()
    assert 0 < mask.mean() < 1
    completed = task.complete(batch["x"], batch["mask"], training=True)[1].numpy()
    seen_fake = mask
    if flipped:  # xflip on every generated image, on no real one
        ops = AugmentConfig(ops=("xflip",), p=0.5, target=None, speed=1, interval=1, key="a")
        task.context.augmenter = Augmenter(ops, 4, "/cpu:0")
        k = sum(widths(ops.ops))
        batch["augment_real"] = tf.fill([4, k], 0.9)  # gates off
        batch["augment_fake"] = tf.fill([4, k], 0.1)  # gates on
        completed, seen_fake = completed[:, :, ::-1], mask[:, :, ::-1]
    try:
        out = task.losses(batch, ["d_adversarial", "g_adversarial", "d_fake_accuracy"])
    finally:
        task.context.augmenter = None
    real_logits = pool(x[..., :1] + 0.5 * mask)
    fake_logits = pool(completed[..., :1] + 0.5 * seen_fake)
    t = pool(seen_fake)
    d, g = by_hand(name, real_logits, fake_logits, t, mask.mean())
    assert float(out["d_adversarial"]) == pytest.approx(d, rel=1e-4)
    assert float(out["g_adversarial"]) == pytest.approx(g, rel=1e-4)
    threshold = 0.5 if name == "least_squares" else 0.0
    found = (t * (fake_logits <= threshold)).mean() / mask.mean()
    assert float(out["d_fake_accuracy"]) == pytest.approx(found, rel=1e-5)


def test_the_glcic_discriminator_is_refused():
    raw = config("hinge").raw
    raw["model"].update(discriminator_type="glcic", discriminator=None)
    with pytest.raises(ConfigError, match="loss.adversarial_target.*patch"):
        Trainer(parse_config(raw))


def trained(towers):
    raw = config("hinge").raw
    raw["model"].update(discriminator=None, spectral_norm=True)
    raw["devices"] = {"towers": towers}
    raw["augment"] = {"ops": ["translation", "xflip", "brightness"], "p": 0.5}
    raw["stages"][0]["steps"] = 3
    raw["stages"][0]["updates"][0]["loss"]["r1"] = 0.5  # R1 on the real images, as ever
    trainer = Trainer(parse_config(raw))
    metrics = run_steps(trainer)
    return trainer, [float(m.metrics["generator/g_adversarial"]) for m in metrics]


def test_two_towers_train_what_one_device_does_with_r1_and_augmentation():
    (one, losses_one), (two, losses_two) = trained(1), trained(2)
    assert losses_two == pytest.approx(losses_one, rel=1e-4)
    for a, b in zip(one.variables, two.variables, strict=True):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-5)
