"""LaMa's and DeepFill's options of the completion task, against numpy: L1 on the known
pixels, the spatial discount, a perceptual loss on a network the test builds, gated
convolutions; and their refusals."""

import keras
import numpy as np
import pytest

from stagegan.config.schema import parse_config
from stagegan.core.staging import to_replica_floats
from stagegan.errors import ConfigError
from stagegan.tasks.completion import discounted
from stagegan.training.trainer import Trainer


def features(task):
    """A fixed feature network: two outputs, a 1x1 mix of the channels and its 2x2 mean."""
    channels = task.data["channels"]
    kernel = np.arange(1, channels * 2 + 1, dtype=np.float32).reshape(1, 1, channels, 2) / 4
    x = keras.Input((task.size, task.size, channels))
    mixed = keras.layers.Conv2D(
        2, 1, use_bias=False, kernel_initializer=keras.initializers.Constant(kernel)
    )(x)
    return keras.Model(x, [mixed, keras.layers.AveragePooling2D(2)(mixed)])


def raw_config(loss=None, model=None, terms=None):
    return {
        "name": "recipe",
        "task": "completion",
        "batch_size": 4,
        "devices": {"towers": 1},
        "data": {"size": 16, "count": 16},
        "model": {"width": 4, "dilations": [2], "gated": True, **(model or {})},
        "loss": {
            "reduction": "mean",
            "spatial_discount": 0.5,
            "perceptual_network": "test_completion_recipe:features",
            **(loss or {}),
        },
        "stages": [
            {
                "name": "g",
                "steps": 1,
                "updates": [
                    {
                        "name": "g_update",
                        "train": "generator/*",
                        "loss": terms
                        or {"reconstruction_known": 10.0, "perceptual": 1.0, "reconstruction": 1.0},
                    }
                ],
            }
        ],
    }


@pytest.fixture(scope="module")
def trainer():
    return Trainer(parse_config(raw_config()))


def test_the_discount_of_a_rectangle_is_deepfills():
    mask = np.zeros((1, 9, 9, 1), np.float32)
    mask[0, 2:7, 1:5] = 1.0  # h 5, w 4
    weights = discounted(mask, 0.5).numpy()[0, ..., 0]
    for i in range(5):
        for j in range(4):
            expected = max(0.5 ** min(i, 4 - i), 0.5 ** min(j, 3 - j))
            assert weights[2 + i, 1 + j] == pytest.approx(expected)
    assert weights[0, 0] == 1.0 and weights[8, 8] == 1.0  # known pixels


def test_the_terms_match_numpy(trainer):
    task = trainer.task
    batch = to_replica_floats(task.batch(4))
    out = task.losses(batch, ["reconstruction_known", "perceptual", "reconstruction"])
    x, mask = batch["x"].numpy(), batch["mask"].numpy()
    raw = task.complete(batch["x"], batch["mask"], training=True)[0].numpy()
    known = np.broadcast_to(1 - mask, x.shape)
    expected = (np.abs(raw - x) * known).sum() / known.sum()
    assert float(out["reconstruction_known"]) == pytest.approx(expected, rel=1e-5)
    # The hole's L2, each pixel weighed 0.5 ** (distance to the known pixels - 1).
    weights = np.broadcast_to(discounted(mask, 0.5).numpy() * mask, x.shape)
    expected = ((raw - x) ** 2 * weights).sum() / weights.sum()
    assert float(out["reconstruction"]) == pytest.approx(expected, rel=1e-5)
    kernel = np.array([[1, 2], [3, 4], [5, 6]], np.float32) / 4  # features()'s, 3 channels
    mix = lambda a: a @ kernel
    pool = lambda a: a.reshape(4, 8, 2, 8, 2, 2).mean(axis=(2, 4))
    fx, fr = mix(x), mix(raw)
    expected = ((fr - fx) ** 2).mean() + ((pool(fr) - pool(fx)) ** 2).mean()
    assert float(out["perceptual"]) == pytest.approx(expected, rel=1e-5)


def test_gated_convolutions_double_the_generator_and_train(trainer):
    names = [layer.name for layer in trainer.task.generator.layers]
    assert "enc1_gate" in names and "dilated2_gate" in names and "out_gate" not in names
    plain = Trainer(parse_config(raw_config(model={"gated": False})))
    count = lambda t: sum(int(np.prod(v.shape)) for v in t.task.generator.trainable_variables)
    assert 1.9 < count(trainer) / count(plain) < 2.0
    # The feature network is frozen and is not a network of the run.
    assert set(trainer.networks) == {"generator", "discriminator"}
    assert not trainer.task.perceptual_network.trainable_variables
    before = [v.numpy().copy() for v in trainer.task.generator.trainable_variables]
    position = next(iter(trainer.schedule.positions(trainer.step_count)))
    metrics = trainer.step(position).metrics
    assert np.isfinite(float(metrics["g_update/perceptual"]))
    after = trainer.task.generator.trainable_variables
    assert all(not np.array_equal(a, b.numpy()) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize(
    "loss, model, terms, key",
    [
        ({"perceptual_network": None}, None, None, "loss.perceptual_network"),
        ({"perceptual_network": "no_such_module:f"}, None, None, "loss.perceptual_network"),
        ({"perceptual_network": 3}, None, None, "loss.perceptual_network"),
        ({"spatial_discount": 1.5}, None, None, "loss.spatial_discount"),
        ({"spatial_discount": True}, None, None, "loss.spatial_discount"),
        (None, {"gated": "yes"}, None, "model.gated"),
        ({"adversarial_target": "patches"}, None, None, "loss.adversarial_target"),
    ],
)
def test_bad_options_are_refused_by_name(loss, model, terms, key):
    with pytest.raises(ConfigError) as error:
        Trainer(parse_config(raw_config(loss, model, terms)))
    assert error.value.key == key
