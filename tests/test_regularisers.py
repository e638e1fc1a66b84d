"""LeCam, balanced consistency (bCR) and lazy regularisation, against numbers computed by hand:
the formulas in numpy, the averages' rule step by step, their checkpointing (a resumed run
ends bit-identical to a straight one), 1 device against 2 towers and 2 mirrored replicas,
and StyleGAN2's optimizer scaling against a numpy Adam."""

import inspect
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from clihelp import inprocess
from toytask import finished_run, read_checkpoint, toy_config, variable_key

from stagegan.config.schema import LAZY_DEFAULTS, OPTIMIZER_TYPES, parse_config
from stagegan.core import regularisers
from stagegan.core.optimizers import describe, make_optimizer
from stagegan.core.staging import to_replica_floats
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.run.trainplan import TrainPlan
from stagegan.training.trainer import Trainer

RNG = np.random.default_rng(0)


def relu(x):
    return np.maximum(x, 0.0)


# LeCam: the penalty and the averages -------------------------------------------------------


def test_lecam_penalty_matches_numpy():
    real, fake = RNG.normal(size=(6, 1)), RNG.normal(size=(6, 1))
    ema_real, ema_fake = 0.3, -0.2
    expected = np.mean(relu(real - ema_fake) ** 2) + np.mean(relu(ema_real - fake) ** 2)
    got = regularisers.lecam_penalty(
        tf.constant(real, tf.float32), tf.constant(fake, tf.float32), ema_real, ema_fake
    )
    assert float(got) == pytest.approx(expected, rel=1e-6)
    assert expected > 0.1  # both halves take part: some outputs beyond the averages


def test_lecam_averages_follow_each_batch_until_warm_then_decay():
    lecam = regularisers.LeCam(decay=0.9, start=2, device="/CPU:0")
    real = [0.5, 1.0, float("nan"), 2.0, 4.0, 8.0]
    fake = [-0.5, -1.0, 0.0, -2.0, -4.0, -8.0]
    applied = [True, True, True, True, False, True]
    count, avg_real, avg_fake, penalties_on = 0, 0.0, 0.0, []
    for r, f, ok in zip(real, fake, applied, strict=True):
        penalties_on.append(bool(lecam.warm))
        lecam.observe({"d_real_mean": tf.constant(r), "d_fake_mean": tf.constant(f)}, ok)
        if ok and np.isfinite(r):  # a skipped update or a NaN mean leaves them alone
            decay = 0.9 if count >= 2 else 0.0  # the first `start` updates: the batch itself
            avg_real = decay * avg_real + (1 - decay) * r
            avg_fake = decay * avg_fake + (1 - decay) * f
            count += 1
    assert penalties_on == [False, False, True, True, True, True]
    assert int(lecam.count.numpy()) == count == 4
    assert float(lecam.real.numpy()) == pytest.approx(avg_real, rel=1e-6)  # 0.9 + 0.8
    assert float(lecam.fake.numpy()) == pytest.approx(avg_fake, rel=1e-6)
    assert avg_real == pytest.approx(0.9 * (0.9 * 1.0 + 0.1 * 2.0) + 0.1 * 8.0)


def mog_raw(name="lecam", towers=1, strategy="towers", steps=6, lazy=True):
    """mog2d, tiny: alternating D (d_loss + lecam, and a lazy R1 every 2 on the same optimizer)
    and G updates; a checkpoint every 3 steps."""
    d = {"train": "discriminator/*", "loss": {"d_loss": 1.0, "lecam": 2.0}, "optimizer": "d"}
    r1 = {"name": "r1", "train": "discriminator/*", "loss": {"r1": 0.5}, "optimizer": "d"}
    r1.update({"every": 2, "lazy": True} if lazy else {})
    g = {"train": "generator/*", "loss": "g_loss", "optimizer": "g"}
    return {
        "name": name,
        "seed": 1,
        "task": "mog2d",
        "batch_size": 8,
        "model": {"latent_dim": 2, "hidden": 8, "layers": 1},
        "loss": {"lecam_decay": 0.5},  # fast, so that the averages visibly move
        "devices": {"towers": towers, "strategy": strategy},
        "optimizers": {
            "d": {"type": "adam", "learning_rate": 0.05, "beta_1": 0.5},
            "g": {"type": "adam", "learning_rate": 0.05, "beta_1": 0.5},
        },
        "stages": [{"name": "alternating", "steps": steps, "updates": [d, r1, g]}],
        "checkpoint": {"every": 3, "keep": 5},
        "log": {"every": 1, "tensorboard": False},
        "samples": None,
    }


def run_steps(trainer):
    """Every step; the metrics of each."""
    return [
        {k: float(v) for k, v in trainer.step(p).metrics.items()}
        for p in trainer.schedule.positions()
    ]


def state(trainer):
    lecam = trainer.task.context.lecam
    weights = [v.numpy() for v in trainer.variables]
    return weights, [float(lecam.real.numpy()), float(lecam.fake.numpy())]


@pytest.fixture(scope="module")
def mog_one_device():
    trainer = Trainer(parse_config(mog_raw()))
    metrics = run_steps(trainer)
    return trainer, metrics


def test_averages_in_training_follow_the_logged_means(mog_one_device):
    trainer, metrics = mog_one_device
    avg_real = avg_fake = None
    for step, record in enumerate(metrics):
        lecam = record["discriminator/lecam"]
        if avg_real is None:
            assert lecam == 0.0  # no average yet: no penalty on the first update
        else:
            assert lecam > 0.0 or step  # the penalty is on from the second update
        r, f = record["discriminator/d_real_mean"], record["discriminator/d_fake_mean"]
        avg_real = r if avg_real is None else 0.5 * avg_real + 0.5 * r
        avg_fake = f if avg_fake is None else 0.5 * avg_fake + 0.5 * f
    _, averages = state(trainer)
    np.testing.assert_allclose(averages, [avg_real, avg_fake], rtol=1e-5)
    assert int(trainer.task.context.lecam.count.numpy()) == 6
    assert {"lecam_ema_real", "lecam_ema_fake", "lecam_count"} <= set(trainer.trackables())


def test_lecam_term_of_the_task_matches_numpy(mog_one_device):
    trainer, _ = mog_one_device
    task = trainer.task
    batch = {
        "x": tf.constant(RNG.normal(size=(8, 2)), tf.float32),
        "z": tf.constant(RNG.normal(size=(8, 2)), tf.float32),
        "epsilon": tf.zeros([8]),
    }
    out = task.losses(batch, ["lecam", "d_real_mean", "d_fake_mean"])
    real = task.discriminator(batch["x"]).numpy()
    fake = task.discriminator(task.generator(batch["z"])).numpy()
    a_real, a_fake = float(task.context.lecam.real.numpy()), float(task.context.lecam.fake.numpy())
    expected = np.mean(relu(real - a_fake) ** 2) + np.mean(relu(a_real - fake) ** 2)
    assert float(out["lecam"]) == pytest.approx(expected, rel=1e-5)
    assert float(out["d_real_mean"]) == pytest.approx(real.mean(), rel=1e-5)
    assert float(out["d_fake_mean"]) == pytest.approx(fake.mean(), rel=1e-5)
    # The averages are constants of the loss: the gradient reaches D, not the averages.
    with tf.GradientTape() as tape:
        loss = task.losses(batch, ["lecam"])["lecam"]
    grads = tape.gradient(loss, task.discriminator.trainable_variables)
    assert all(g is not None for g in grads)


@pytest.mark.parametrize("strategy", ["towers", "mirrored"])
def test_two_replicas_train_what_one_device_does(mog_one_device, strategy):
    one, metrics = mog_one_device
    other = Trainer(parse_config(mog_raw(towers=2, strategy=strategy)))
    other_metrics = run_steps(other)
    (weights, averages), (other_weights, other_averages) = state(one), state(other)
    np.testing.assert_allclose(other_averages, averages, rtol=1e-5, atol=1e-6)
    for a, b in zip(weights, other_weights, strict=True):
        np.testing.assert_allclose(b, a, atol=2e-5)
    lecam = [m["discriminator/lecam"] for m in metrics]
    assert [m["discriminator/lecam"] for m in other_metrics] == pytest.approx(lecam, rel=1e-4)
    assert max(lecam) > 1e-3  # the penalty took part


def test_resumed_run_ends_bit_identical_with_its_averages(tmp_path):
    from stagegan.run import runner

    straight = finished_run(tmp_path / "straight", mog_raw())
    resumed = tmp_path / "resumed"
    shutil.copytree(straight, resumed)
    runner.run(TrainPlan.resumed(resumed, checkpoint="3"))  # from the middle: steps 4 to 6 again
    end = "checkpoints/ckpt-00000006"
    expected = read_checkpoint(straight / end, skip="data_iterator")
    got = read_checkpoint(resumed / end, skip="data_iterator")
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    count = expected[variable_key("lecam_count")]
    middle = read_checkpoint(straight / "checkpoints/ckpt-00000003")
    assert count == 6 and middle[variable_key("lecam_count")] == 3
    assert middle[variable_key("lecam_ema_real")] != expected[variable_key("lecam_ema_real")]


def test_a_resume_may_append_the_first_stage_with_lecam(tmp_path):
    from stagegan.run import runner

    raw = mog_raw(steps=1, lazy=False)
    raw["stages"][0]["updates"][0]["loss"] = {"d_loss": 1.0}  # no LeCam before the append
    run = finished_run(tmp_path / "run", raw)
    stage = (
        "stages[+]={name: lecam, steps: 2, updates: [{train: discriminator/*, "
        "loss: {d_loss: 1, lecam: 1}, optimizer: d}]}"
    )
    runner.run(TrainPlan.resumed(run, [stage]))
    last = read_checkpoint(run / "checkpoints/ckpt-00000003")
    assert last[variable_key("lecam_count")] == 2  # fresh averages, moved by the new stage


# bCR: the consistency terms ----------------------------------------------------------------


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("bcr") / "data.npz"
    np.savez(path, images=RNG.integers(0, 256, (16, 28, 28, 1), np.uint8))
    return str(path)


def image_raw(npz, towers=1, strategy="towers", bcr_ops=None):
    loss = {"d_loss": 1.0, "bcr": 5.0, "lecam": 0.5}
    raw = {
        "name": "bcr",
        "seed": 2,
        "task": "unconditional",
        "data": {"source": "npz", "path": npz, "size": 28, "channels": 1},
        "model": {"latent_dim": 3, "width": 2, "batchnorm": False},
        "loss": {"bcr_ops": bcr_ops or {"xflip": 0.5, "translation": 1.0}},
        "batch_size": 8,
        "devices": {"towers": towers, "strategy": strategy},
        "optimizers": {
            "d": {"type": "sgd", "learning_rate": 0.05},
            "g": {"type": "sgd", "learning_rate": 0.05},
        },
        "stages": [
            {
                "name": "alternating",
                "steps": 2,
                "updates": [
                    {"train": "discriminator/*", "loss": loss, "optimizer": "d"},
                    {"train": "generator/*", "loss": "g_loss", "optimizer": "g"},
                ],
            }
        ],
        "samples": None,
    }
    return raw


def test_bcr_terms_match_a_hand_computation(npz):
    # T = flip every image, then shift it by (0, 0) (uniforms: gate 0 < p, shift u = 0.5).
    trainer = Trainer(parse_config(image_raw(npz)))
    task = trainer.task
    x = RNG.uniform(-1, 1, (4, 28, 28, 1)).astype(np.float32)
    z = RNG.normal(size=(4, 3)).astype(np.float32)
    flip_then_stay = np.tile(np.array([[0.0, 0.0, 0.5, 0.5]], np.float32), (4, 1))
    batch = {
        "x": tf.constant(x),
        "z": tf.constant(z),
        "epsilon": tf.zeros([4]),
        "bcr_real": tf.constant(flip_then_stay),
        "bcr_fake": tf.constant(flip_then_stay),
    }
    out = task.losses(batch, ["bcr", "bcr_real", "bcr_fake"])
    d = lambda images: task.discriminator(images, training=True).numpy()
    fake = task.generator(z, training=True).numpy()
    real_part = np.mean((d(x) - d(x[:, :, ::-1].copy())) ** 2)
    fake_part = np.mean((d(fake) - d(fake[:, :, ::-1].copy())) ** 2)
    assert float(out["bcr_real"]) == pytest.approx(real_part, rel=1e-4)
    assert float(out["bcr_fake"]) == pytest.approx(fake_part, rel=1e-4)
    assert float(out["bcr"]) == pytest.approx(real_part + fake_part, rel=1e-4)
    assert real_part > 1e-8 and fake_part > 1e-8
    # G(z) is a constant of bCR: it trains the discriminator only.
    with tf.GradientTape() as tape:
        loss = task.losses(batch, ["bcr"])["bcr"]
    variables = [*task.generator.trainable_variables, *task.discriminator.trainable_variables]
    grads = tape.gradient(loss, variables)
    assert all(g is None for g in grads[: len(task.generator.trainable_variables)])
    assert all(g is not None for g in grads[len(task.generator.trainable_variables) :])


def test_bcr_transform_gates_each_op_with_its_own_probability():
    images = RNG.uniform(-1, 1, (3, 8, 8, 1)).astype(np.float32)
    t = regularisers.Consistency({"xflip": 0.5, "cutout": 0.0})  # cutout never applies
    u = np.array([[0.2, 0.0, 0.1, 0.1], [0.7, 0.0, 0.1, 0.1], [0.49, 0.0, 0.9, 0.9]])
    out = t(images, tf.constant(u, tf.float32)).numpy()
    np.testing.assert_array_equal(out[0], images[0, :, ::-1])
    np.testing.assert_array_equal(out[1], images[1])
    np.testing.assert_array_equal(out[2], images[2, :, ::-1])


@pytest.fixture(scope="module")
def image_one_device(npz):
    trainer = Trainer(parse_config(image_raw(npz)))
    metrics = run_steps(trainer)
    return trainer, metrics


def test_bcr_and_lecam_on_two_towers_train_what_one_device_does(image_one_device, npz):
    one, metrics = image_one_device
    assert metrics[-1]["discriminator/bcr"] > 1e-6 and metrics[-1]["discriminator/lecam"] > 0
    other = Trainer(parse_config(image_raw(npz, towers=2)))
    other_metrics = run_steps(other)
    for a, b in zip(one.variables, other.variables, strict=True):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-5)
    bcr = [m["discriminator/bcr"] for m in metrics]
    assert [m["discriminator/bcr"] for m in other_metrics] == pytest.approx(bcr, rel=1e-4)
    # The draws come from the augmentation stream, per global batch: the same transform.
    _, averages = state(one)
    np.testing.assert_allclose(state(other)[1], averages, rtol=1e-5)


def test_completion_scores_real_against_completed_images():
    raw = {
        "task": "completion",
        "batch_size": 4,
        "data": {"source": "shapes", "size": 16, "count": 8},
        "model": {"width": 2, "dilations": [2]},
        "loss": {"bcr_ops": {"xflip": 1.0}},  # T: flip every image
        "stages": [
            {
                "name": "d",
                "steps": 1,
                "updates": [
                    {
                        "train": "discriminator/*",
                        "loss": {"d_adversarial": 1, "lecam": 1, "bcr": 1},
                    },
                ],
            }
        ],
        "samples": None,
    }
    task = Trainer(parse_config(raw)).task
    (
        task.context.lecam.real.assign(0.1),
        task.context.lecam.fake.assign(-0.1),
        task.context.lecam.count.assign(1),
    )
    batch = to_replica_floats(task.batch(4))  # as a replica receives it
    out = task.losses(batch, ["lecam", "bcr"])
    x = batch["x"].numpy()
    completed = task.complete(batch["x"], batch["mask"], training=True)[1].numpy()
    score = lambda images, side: task.score(tf.constant(images), batch, side).numpy()
    real, fake = score(x, "real"), score(completed, "fake")
    lecam = np.mean(relu(real + 0.1) ** 2) + np.mean(relu(0.1 - fake) ** 2)
    flip = lambda images: images[:, :, ::-1].copy()
    bcr = np.mean((real - score(flip(x), "real")) ** 2)
    bcr += np.mean((fake - score(flip(completed), "fake")) ** 2)
    assert float(out["lecam"]) == pytest.approx(lecam, rel=1e-4)
    assert float(out["bcr"]) == pytest.approx(bcr, rel=1e-4) and bcr > 1e-8


# Lazy regularisation ------------------------------------------------------------------------


def lazy_raw(lazy=True, d_optimizer=None, reg_weight=0.5, every=2, extra_optimizer=None):
    d = {"name": "d", "train": "discriminator/*", "loss": "d_loss", "optimizer": "d"}
    reg = {"name": "reg", "train": "discriminator/*", "loss": {"d_loss": reg_weight}}
    reg.update({"optimizer": "d", "every": every, **({"lazy": True} if lazy else {})})
    g = {"name": "g", "train": "generator/*", "loss": "g_loss", "optimizer": "g"}
    adam = d_optimizer or {"type": "adam", "learning_rate": 0.01, "beta_1": 0.5}
    optimizers = {"d": adam, "g": {"type": "sgd", "learning_rate": 0.1}}
    if extra_optimizer:
        optimizers[extra_optimizer] = adam
    return toy_config([{"name": "s", "steps": 4, "updates": [d, reg, g]}], optimizers=optimizers)


def test_lazy_scales_the_loss_and_the_shared_optimizer():
    config = parse_config(lazy_raw(every=4))
    reg = config.stages[0].updates[1]
    assert reg.lazy and reg.loss == (("d_loss", 2.0),)  # 0.5 x 4
    assert config.stages[0].updates[0].loss == (("d_loss", 1.0),)  # the main update: as given
    options = dict(config.optimizers["d"].options)
    c = 4 / 5
    assert options["learning_rate"] == pytest.approx(0.01 * 0.8)
    assert options["beta_1"] == pytest.approx(0.5**c) and options["beta_2"] == pytest.approx(
        0.999**c  # Keras's default beta_2, scaled too
    )
    assert describe(config.optimizers["d"]).endswith(
        "(lazy, every 4: learning rate x 4/5, betas ** 4/5)"
    )
    assert config.optimizers["g"] == parse_config(lazy_raw(lazy=False)).optimizers["g"]


def test_lazy_optimizer_takes_the_steps_of_a_numpy_adam():
    """One Adam with rate 0.01 x 2/3 and betas 0.5 ** 2/3, 0.999 ** 2/3, by hand."""
    spec = parse_config(lazy_raw(every=2)).optimizers["d"]
    optimizer = make_optimizer(spec, "optimizers.d", name="d")
    start = np.array([0.3, -1.2, 2.0], np.float32)
    variable = tf.Variable(start)
    optimizer.build([variable])
    grads = [np.array([0.5, -0.1, 2.0], np.float32), np.array([-0.3, 0.2, 1.0], np.float32)]
    c = 2 / 3
    rate, b1, b2, eps = 0.01 * c, 0.5**c, 0.999**c, 1e-7
    w, m, v = start.astype(np.float64), np.zeros(3), np.zeros(3)
    for t, g in enumerate(grads, start=1):
        optimizer.apply_gradients([(tf.constant(g), variable)])
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        w = w - rate * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
        np.testing.assert_allclose(variable.numpy(), w, rtol=1e-5)


def test_lazy_run_equals_the_same_scaling_written_out():
    lazy = Trainer(parse_config(lazy_raw()))
    c = 2 / 3
    by_hand = {"type": "adam", "learning_rate": 0.01 * c, "beta_1": 0.5**c, "beta_2": 0.999**c}
    plain = Trainer(parse_config(lazy_raw(lazy=False, d_optimizer=by_hand, reg_weight=1.0)))
    run_steps(lazy), run_steps(plain)
    for a, b in zip(lazy.variables, plain.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(lazy.optimizers["d"].iterations) == 4 + 2  # main every step, reg on 0 and 2
    assert "every 2, lazy (loss weights x 2)" in describe_plan(lazy)


def test_lazy_defaults_are_keras_defaults():
    for kind, defaults in LAZY_DEFAULTS.items():
        cls = getattr(keras.optimizers, OPTIMIZER_TYPES[kind])
        parameters = inspect.signature(cls.__init__).parameters
        assert {k: parameters[k].default for k in defaults} == defaults, kind
        assert ("beta_1" in defaults) == ("beta_1" in parameters), kind
    assert set(LAZY_DEFAULTS) == set(OPTIMIZER_TYPES)


# Bad inputs ---------------------------------------------------------------------------------


def with_update(raw, **changes):
    raw["stages"][0]["updates"][1].update(changes)
    return raw


@pytest.mark.parametrize(
    "raw, key, words",
    [
        (with_update(lazy_raw(), every=1), "stages[0].updates[1].lazy", "needs every: n > 1"),
        (with_update(lazy_raw(), lazy="yes"), "stages[0].updates[1].lazy", "true or false"),
        (
            with_update(lazy_raw(), optimizer={"type": "adam"}),
            "stages[0].updates[1].lazy",
            "its optimizer is private",
        ),
        (
            with_update(lazy_raw(extra_optimizer="r"), optimizer="r"),
            "stages[0].updates[1].lazy",
            "optimizer 'r' serves only lazy updates",
        ),
        (
            lazy_raw(d_optimizer={"type": "adam", "beta_1": 1.5}),
            "optimizers.d.beta_1",
            "must be in [0, 1)",
        ),
    ],
    ids=["every-1", "not-bool", "private", "only-lazy", "bad-beta"],
)
def test_bad_lazy_names_its_key(raw, key, words):
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert error.value.key == key and words in error.value.message


def test_lazy_updates_sharing_an_optimizer_need_one_interval():
    raw = lazy_raw()
    second = {**raw["stages"][0]["updates"][1], "name": "reg2", "every": 3}
    raw["stages"][0]["updates"].insert(2, second)
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert error.value.key == "stages[0].updates[2].lazy" and "same every" in error.value.message


@pytest.mark.parametrize(
    "change, key, words",
    [
        ({"loss": {"lecam_decay": 1.0}}, "loss.lecam_decay", "must be in [0, 1)"),
        ({"loss": {"lecam_decay": -0.1}}, "loss.lecam_decay", "must be in [0, 1)"),
        ({"loss": {"lecam_decay": float("nan")}}, "loss.lecam_decay", "finite"),
        # an int beyond any float (found by test_config_fuzz): compared, never converted
        ({"loss": {"lecam_decay": 10**5000}}, "loss.lecam_decay", "Received: an integer beyond"),
        ({"loss": {"bcr_ops": {"xflip": 10**400}}}, "loss.bcr_ops.xflip", "probability in"),
        ({"loss": {"lecam_start": -1}}, "loss.lecam_start", "0 or more"),
        ({"loss": {"lecam_decy": 0.9}}, "loss.lecam_decy", "unknown key"),
        ({"loss": {"bcr_ops": {"blur": 1.0}}}, "loss.bcr_ops.blur", "unknown op"),
        ({"loss": {"bcr_ops": {"xflip": 2}}}, "loss.bcr_ops.xflip", "probability in [0, 1]"),
        ({"loss": {"bcr_ops": {}}}, "loss.bcr_ops", "at least one op"),
        ({"loss": {"bcr_ops": ["xflip"]}}, "loss.bcr_ops", "must be dict"),
        ({"weight": -0.3}, "stages[0].updates[0].loss.lecam", "at least 0"),
    ],
)
def test_bad_regulariser_options_name_their_key(npz, change, key, words):
    raw = image_raw(npz)
    raw["loss"].update(change.get("loss", {}))
    if "weight" in change:
        raw["stages"][0]["updates"][0]["loss"]["lecam"] = change["weight"]
    with pytest.raises(ConfigError) as error:
        Trainer(parse_config(raw))
    assert error.value.key == key and words in error.value.message


def test_the_cli_says_it_in_one_line(tmp_path):
    import yaml

    path = tmp_path / "lazy.yaml"
    path.write_text(yaml.safe_dump(with_update(lazy_raw(), every=1)))
    result = inprocess("plan", "--config", path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "stagegan: error: stages[0].updates[1].lazy: needs every: n > 1 (a lazy regulariser "
        "runs every n steps, its loss x n). Received: every 1"
    ]
