"""Class-conditional GANs: the conditional step against a plain TF reference on every backend,
the projection head by hand, class-row grids and `sample --class`.

The reference trains clones of the same networks (same initial weights) with its own data
draw, label packing, losses and SGD: labels must reach the generator (`fake_y`, drawn with the
data's class frequencies) and the discriminator (`y` for real images), packed as the images are.
"""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from clihelp import inprocess
from toytask import run_steps

from stagegan.config.schema import parse_config
from stagegan.core.layers import pack
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.tasks.base import make_generator
from stagegan.training.trainer import Trainer

SEED, BATCH, PACK, LR, LATENT = 5, 8, 2, 0.05, 3
LABELS = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2])  # shares 1/2, 1/4, 1/4


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("cond") / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(path, images=rng.integers(0, 256, (12, 28, 28, 1), np.uint8), labels=LABELS)
    return str(path)


def config(npz, towers=1, strategy="towers", pack_=PACK, steps=2):
    return parse_config(
        {
            "name": "cond",
            "seed": SEED,
            "task": "unconditional",
            "data": {
                "source": "npz",
                "path": npz,
                "size": 28,
                "channels": 1,
                "labels": "labels",
                "classes": ["a", "b", "c"],
            },
            "model": {
                "latent_dim": LATENT,
                "width": 2,
                "batchnorm": False,
                "pack": pack_,
                "conditional": True,
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
                    "steps": steps,
                    "updates": [
                        {"train": "discriminator/*", "loss": "d_loss", "optimizer": "d"},
                        {"train": "generator/*", "loss": "g_loss", "optimizer": "g"},
                    ],
                }
            ],
            "samples": None,
            "eval": None,
        }
    )


def reference_run(trainer, images, steps=2):
    """Two alternating SGD updates per step in plain TensorFlow, on clones of the networks."""
    generator = keras.models.clone_model(trainer.task.generator)
    discriminator = keras.models.clone_model(trainer.task.discriminator)
    generator.set_weights(trainer.task.generator.get_weights())
    discriminator.set_weights(trainer.task.discriminator.get_weights())
    data, noise = make_generator(SEED, 0), make_generator(SEED, 1)
    table = tf.constant(images.astype(np.float32) / 127.5 - 1.0)
    cdf = tf.constant([0.5, 0.75])  # the data's class shares, accumulated

    def batch():
        index = data.uniform([BATCH], 0, len(images), dtype=tf.int32)
        x, y = tf.gather(table, index), tf.gather(tf.constant(LABELS, tf.int32), index)
        z = noise.normal([BATCH, LATENT])
        noise.uniform([BATCH])  # epsilon (the gradient penalty's; unused here)
        fake_y = tf.searchsorted(cdf, noise.uniform([BATCH]), side="right", out_type=tf.int32)
        return x, y, z, fake_y

    def critic(images, labels):
        return discriminator([pack(images, PACK), tf.reshape(labels, [-1, PACK])])

    def sgd(loss_fn, variables):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        for var, grad in zip(variables, tape.gradient(loss, variables), strict=True):
            var.assign_sub(LR * tf.convert_to_tensor(grad))

    for _ in range(steps):
        x, y, z, fake_y = batch()
        fake = generator([z, fake_y])
        d_loss = lambda x=x, y=y, fake=fake, fake_y=fake_y: (
            tf.reduce_mean(tf.nn.softplus(-critic(x, y)))
            + tf.reduce_mean(tf.nn.softplus(critic(fake, fake_y)))
        )
        sgd(
            d_loss,
            discriminator.trainable_variables,
        )
        _, _, z, fake_y = batch()
        sgd(
            lambda: tf.reduce_mean(tf.nn.softplus(-critic(generator([z, fake_y]), fake_y))),  # noqa: B023
            generator.trainable_variables,
        )
    return [*generator.get_weights(), *discriminator.get_weights()]


@pytest.mark.parametrize(
    "towers, strategy", [(1, "towers"), (4, "towers"), (2, "mirrored")], ids=str
)
def test_conditional_steps_match_a_plain_reference(npz, towers, strategy):
    trainer = Trainer(config(npz, towers, strategy))
    expected = reference_run(trainer, np.load(npz)["images"])
    initial = [*trainer.task.generator.get_weights(), *trainer.task.discriminator.get_weights()]
    run_steps(trainer)
    final = [*trainer.task.generator.get_weights(), *trainer.task.discriminator.get_weights()]
    moved = max(float(np.abs(f - i).max()) for f, i in zip(final, initial, strict=True))
    diff = max(float(np.abs(f - e).max()) for f, e in zip(final, expected, strict=True))
    assert moved > 1e-3
    assert diff < 1e-5, diff


def test_projection_head_by_hand(npz):
    trainer = Trainer(config(npz, pack_=1, steps=1))
    d = trainer.task.discriminator
    x = np.random.default_rng(1).uniform(-1, 1, (3, 28, 28, 1)).astype(np.float32)
    y = np.array([[0], [1], [2]], np.int32)
    features = d.get_layer("features")(x).numpy()
    weights = {v.path.split("/", 1)[1]: v.numpy() for v in d.weights}
    kernel, bias = weights["out/kernel"], weights["out/bias"]
    embeddings = weights["embed/embeddings"]
    by_hand = features @ kernel + bias + (embeddings[y[:, 0]] * features).sum(1, keepdims=True)
    np.testing.assert_allclose(d([x, y]).numpy(), by_hand, rtol=1e-5, atol=1e-5)
    # a class changes the logit through its embedding alone
    assert not np.allclose(d([x, y]).numpy(), d([x, np.zeros_like(y)]).numpy())


def test_class_rows_class_names_and_plan(npz):
    trainer = Trainer(config(npz, pack_=1, steps=1))
    task = trainer.task
    inputs, info = task.sample_inputs(7, seed=0)
    assert info["columns"] == 3 and inputs["fake_y"].tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert task.class_index("b") == 1 and task.class_index("2") == 2
    with pytest.raises(ConfigError) as error:
        task.class_index("zebra")
    assert error.value.key == "--class" and "classes: a, b, c" in error.value.message
    trainer.trace()
    plan = describe_plan(trainer)
    assert "classes: 3: a (6), b (3), c (3)" in plan and "projection discriminator" in plan


def test_conditional_needs_labels(npz):
    bad = config(npz)
    options = {**bad.data, "labels": None, "classes": None}
    import dataclasses

    with pytest.raises(ConfigError) as error:
        Trainer(dataclasses.replace(bad, data=options))
    assert error.value.key == "model.conditional" and "data.labels" in error.value.message


# A finished run on a labelled folder: sample --class, class rows, per-class eval ----------


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """cdcgan_folder for 2 + 1 steps on a folder of 3 classes (plain grey levels)."""
    base = tmp_path_factory.mktemp("cdcgan")
    for index in range(24):
        folder = base / "images" / ("dark", "mid", "light")[index % 3]
        folder.mkdir(parents=True, exist_ok=True)
        image = np.full((32, 32, 1), 40 + 80 * (index % 3) + index, np.uint8)
        (folder / f"{index}.png").write_bytes(tf.io.encode_png(image).numpy())
    run = base / "run"
    result = inprocess(
        "train", "--config", "cdcgan_folder", "--run-dir", run,
        "--set", f"data.path={base / 'images'}", "--set", "batch_size=6",
        "--set", "model.width=4", "--set", "model.latent_dim=4",
        "--set", "stages[0].steps=2", "--set", "stages[1].steps=1", "--set", "samples.count=7",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return run


def test_sample_one_class_matches_the_generator_by_hand(folder_run, tmp_path):
    from stagegan.run.reading import restore_run

    result = inprocess("sample", "--run", folder_run, "--num", "5", "--class", "mid",
                       "--output", tmp_path / "mid.npy")  # fmt: skip
    assert result.returncode == 0, result.stderr
    trainer, _ = restore_run(folder_run, None)
    assert trainer.task.classes == ["dark", "light", "mid"]  # the sorted subfolder names
    inputs, _ = trainer.task.sample_inputs(5, seed=0)
    by_hand = trainer.task.generator([inputs["z"], np.full(5, 2, np.int32)], training=False)
    np.testing.assert_allclose(np.load(tmp_path / "mid.npy"), (by_hand.numpy() + 1) / 2, atol=1e-6)
    other = inprocess("sample", "--run", folder_run, "--num", "5", "--class", "1",
                      "--output", tmp_path / "light.npy")  # fmt: skip
    assert other.returncode == 0 and not np.allclose(
        np.load(tmp_path / "light.npy"), np.load(tmp_path / "mid.npy")
    )
    bad = inprocess("sample", "--run", folder_run, "--num", "2", "--class", "zebra",
                    "--output", tmp_path / "z.npy")  # fmt: skip
    assert bad.returncode == 2 and "--class: unknown class 'zebra'" in bad.stderr
    assert not (tmp_path / "z.npy").exists()


def test_sample_grid_has_one_class_per_row(folder_run):
    from PIL import Image

    picture = np.asarray(Image.open(folder_run / "samples" / "step00000003-polish.png"))
    from stagegan.runfolder.pictures import image_grid

    # 7 samples of 3 classes: 3 columns, 3 rows (the same layout as a 3-column grid of 7)
    grid = image_grid(np.zeros((7, 32, 32, 1), np.float32), columns=3)
    wrong = image_grid(np.zeros((7, 32, 32, 1), np.float32))  # as square as possible: 3 x 3
    assert picture.shape[1] == grid.shape[1]
    assert np.load(folder_run / "samples" / "inputs.npz")["fake_y"].tolist() == [
        0, 0, 0, 1, 1, 1, 2,
    ]  # fmt: skip
    del wrong


def test_eval_reports_fid_and_kid_per_class(folder_run):
    from stagegan.evaluation import metrics
    from stagegan.evaluation.evaluate import Evaluation
    from stagegan.run.reading import restore_run

    result = inprocess("eval", "--run", folder_run, "--json", "--count", "24")
    assert result.returncode == 0, result.stderr
    import json

    reported = json.loads(result.stdout)["metrics"]
    assert {"fid", "kid", "fid/dark", "fid/mid", "fid/light", "kid/light"} <= set(reported)
    # fid/mid by hand: the 8 real "mid" images against 8 generated of class 2 (sorted names)
    trainer, _ = restore_run(folder_run, None)
    evaluation = Evaluation(trainer, folder_run, count=24, seed=0)
    real, labels, _ = trainer.task.real.draw(24, 0, labels=True)
    assert sorted(labels.tolist()) == [0] * 8 + [1] * 8 + [2] * 8
    inputs, _ = trainer.task.sample_inputs(24, 0)
    fake = trainer.task.generator([inputs["z"], labels], training=False).numpy()
    mid = labels == 2
    real_mid, fake_mid = evaluation.features(real[mid]), evaluation.features(fake[mid])
    by_hand = metrics.frechet_distance(real_mid, fake_mid)
    assert reported["fid/mid"] == pytest.approx(by_hand, rel=1e-4)
    # diversity/mid: the 8 samples' mean nearest-other distance over the 8 real images'
    spread = lambda f: np.mean([np.sort(np.linalg.norm(f - row, axis=1))[1] for row in f])
    assert reported["diversity/mid"] == pytest.approx(spread(fake_mid) / spread(real_mid), rel=1e-4)
    ratios = {name: reported[f"diversity/{name}"] for name in ("dark", "light", "mid")}
    assert reported["diversity_worst_class"] == min(ratios, key=ratios.get)


def test_class_samples_of_an_unconditional_run_are_refused_naming_the_key():
    from stagegan.tasks.base import RandomStreams
    from stagegan.tasks.unconditional import Unconditional

    task = Unconditional({"data": {"source": "shapes", "size": 32}}, RandomStreams(0))
    assert "classes" in task.capabilities  # declared: the refusal is the task's own
    with pytest.raises(ConfigError, match=r"^--class: the run's model is not class-conditional"):
        task.class_index("3")


def test_export_of_a_conditional_generator_takes_the_class(folder_run, tmp_path):
    """`export` of a class-conditional run: inputs `z` and `y` (int32), uint8 images equal to
    the EMA (or live) generator's by hand."""
    import tensorflow as tf

    from stagegan.run.export import export_generator
    from stagegan.run.reading import restore_run

    trainer, _ = restore_run(folder_run)
    path = export_generator(trainer, tmp_path / "out", "savedmodel")
    served = tf.saved_model.load(str(path))
    z = np.random.default_rng(1).standard_normal((6, trainer.task.model["latent_dim"]))
    y = np.array([0, 1, 2, 2, 1, 0], np.int32)
    images = served.serve([z.astype(np.float32), y]).numpy()  # the inputs as one list
    swapped = trainer.ema.swapped() if trainer.ema is not None else contextlib.nullcontext()
    with swapped:
        x = trainer.networks["generator"]([z.astype(np.float32), y], training=False).numpy()
    assert images.dtype == np.uint8
    np.testing.assert_array_equal(images, np.clip(np.round((x + 1) * 127.5), 0, 255))
