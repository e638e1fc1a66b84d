"""The completion task's `feature_matching` term (pix2pixHD): hand numbers, the patch
discriminator's hidden layers run one by one, isolation of the discriminator, the ablation."""

import importlib.util
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from toytask import run_steps

from stagegan.config.schema import parse_config
from stagegan.core.staging import to_replica_floats
from stagegan.tasks.completion import Completion, feature_extractor, feature_matching
from stagegan.training.trainer import Trainer


def test_feature_matching_sums_the_mean_absolute_difference_of_each_layer():
    real = [tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([[0.0, 0.0, 0.0]])]
    fake = [tf.constant([[1.0, 0.0], [3.0, 5.0]]), tf.constant([[3.0, -3.0, 0.0]])]
    # Layer 1: (0 + 2 + 0 + 1) / 4 = 0.75; layer 2: (3 + 3 + 0) / 3 = 2.0.
    assert float(feature_matching(real, fake)) == pytest.approx(2.75)
    assert float(feature_matching(real, real)) == 0.0


def test_feature_matching_refuses_unpaired_layers():
    with pytest.raises(ValueError, match="1 real, 2 fake"):
        feature_matching([tf.zeros([1])], [tf.zeros([1]), tf.zeros([1])])


def test_a_network_without_leaky_relu_layers_has_no_features():
    network = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert feature_extractor(network) is None


STAGES = [
    {
        "name": "generator_only",
        "steps": 1,
        "updates": [
            {
                "train": "generator/*",
                "loss": {"reconstruction_l1": 1.0, "feature_matching": 1.0},
            }
        ],
    }
]


@pytest.fixture(scope="module")
def trainer():
    config = parse_config(
        {
            "name": "fm",
            "task": "completion",
            "batch_size": 4,
            "devices": {"towers": 1},
            "data": {"size": 16, "count": 16},
            "model": {
                "width": 4,
                "dilations": [2],
                "discriminator_type": "patch",
                "spectral_norm": True,
            },
            "loss": {"adversarial": "hinge", "reconstruction": "l1", "reduction": "mean"},
            "stages": STAGES,
        }
    )
    return Trainer(config)


def test_the_term_matches_the_patch_discriminators_layers_run_one_by_one(trainer):
    task = trainer.task
    batch = to_replica_floats(task.batch(4))  # as a replica receives it
    x, mask = batch["x"], batch["mask"]
    completed = task.complete(x, mask, training=True)[1]

    def hidden(images):  # the discriminator's layers in order, independently of the task
        h, out = tf.concat([images, mask], -1), []
        for layer in task.discriminator.layers[1:]:
            h = layer(h, training=True)
            if isinstance(layer, keras.layers.LeakyReLU):
                out.append(h.numpy())
        return out

    real, fake = hidden(x), hidden(completed)
    assert len(real) == 3  # the patch discriminator's three hidden layers, not its logits
    expected = sum(np.abs(r - f).mean() for r, f in zip(real, fake, strict=True))
    value = float(task.losses(batch, ("feature_matching",))["feature_matching"])
    assert value == pytest.approx(expected, rel=1e-5) and value > 0


def test_it_trains_the_generator_and_leaves_every_discriminator_variable_alone(trainer):
    task = trainer.task
    networks = {"generator": task.generator, "discriminator": task.discriminator}
    before = {
        name: {v.path: v.numpy().copy() for v in network.variables}
        for name, network in networks.items()
    }
    metrics = run_steps(trainer)[-1].metrics
    assert float(metrics["generator/feature_matching"]) > 0

    def changed(name):
        now = {v.path: v.numpy() for v in networks[name].variables}
        return [p for p, v in before[name].items() if not np.array_equal(v, now[p])]

    assert changed("generator")
    # Kernels, biases and the spectral norm's power-iteration vectors `u`: all unchanged.
    assert changed("discriminator") == []


def test_the_ablation_removes_it_with_the_adversarial_term(monkeypatch):
    benchmarks = Path(__file__).resolve().parent.parent / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))  # ablation.py imports its `common`
    spec = importlib.util.spec_from_file_location("ablation", benchmarks / "ablation.py")
    ablation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ablation)
    joint = {
        "name": "joint",
        "steps": 1,
        "updates": [
            {"train": "discriminator/*", "loss": "d_adversarial"},
            {
                "train": ["generator/*"],
                "loss": {"reconstruction_l1": 1.0, "g_adversarial": 0.1, "feature_matching": 5.0},
            },
        ],
    }
    raw, removed = ablation.ablated({"task": "completion", "stages": [joint]}, Completion)
    assert raw["stages"][0]["updates"][1]["loss"] == {"reconstruction_l1": 1.0}
    assert removed == [
        "stages[0].updates[1].loss.feature_matching",
        "stages[0].updates[1].loss.g_adversarial",
    ]
