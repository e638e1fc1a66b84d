"""The completion task: hole geometry, exact crops, known pixels kept, loss values, stages."""

import numpy as np
import pytest
import tensorflow as tf
from toytask import run_steps, snapshot

from stagegan.config.schema import parse_config
from stagegan.core.staging import to_replica_floats
from stagegan.errors import ConfigError
from stagegan.tasks.completion import crop_around, draw_holes, feathered
from stagegan.training.trainer import Trainer

OPTIONS = {"hole_min": 0.25, "hole_max": 0.5, "strokes": 0}


def test_holes_are_single_rectangles_within_size_limits_and_inside_the_crop():
    rng = tf.random.Generator.from_seed(1)
    out = draw_holes(rng, 64, 32, OPTIONS, crop=16)
    masks, offsets = out["mask"].numpy()[..., 0], out["crop_offset"].numpy()
    for mask, (top, left) in zip(masks, offsets, strict=True):
        rows, cols = np.nonzero(mask.any(1))[0], np.nonzero(mask.any(0))[0]
        h, w = rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1
        assert 8 <= h <= 16 and 8 <= w <= 16
        assert mask.sum() == h * w  # one filled rectangle
        assert top <= rows[0] and rows[-1] < top + 16 and left <= cols[0] and cols[-1] < left + 16
        assert 0 <= top <= 16 and 0 <= left <= 16


def test_strokes_add_free_form_holes():
    rng = tf.random.Generator.from_seed(2)
    plain = draw_holes(tf.random.Generator.from_seed(2), 8, 32, OPTIONS, 16)["mask"].numpy()
    stroked = draw_holes(rng, 8, 32, {**OPTIONS, "strokes": 3}, 16)["mask"].numpy()
    assert (stroked >= plain).all() and stroked.sum() > plain.sum()


def test_crops_are_exact_pixels():
    images = tf.reshape(tf.range(2 * 8 * 8 * 1, dtype=tf.float32), [2, 8, 8, 1])
    crops = crop_around(images, tf.constant([[0, 3], [4, 1]]), 4).numpy()
    np.testing.assert_allclose(crops[0], images.numpy()[0, 0:4, 3:7], atol=1e-4)
    np.testing.assert_allclose(crops[1], images.numpy()[1, 4:8, 1:5], atol=1e-4)


STAGES = [
    {
        "name": "completion",
        "steps": 2,
        "updates": [{"train": "generator/*", "loss": "reconstruction"}],
    },
    {
        "name": "discriminator",
        "steps": 1,
        "updates": [{"train": "discriminator/*", "loss": "d_adversarial"}],
    },
    {
        "name": "joint",
        "steps": 2,
        "mode": "simultaneous",
        "updates": [
            {"train": "discriminator/*", "loss": "d_adversarial"},
            {"train": "generator/*", "loss": {"reconstruction": 1.0, "g_adversarial": 0.0004}},
        ],
    },
]


@pytest.fixture(scope="module")
def trainer():
    config = parse_config(
        {
            "name": "c",
            "task": "completion",
            "batch_size": 4,
            "devices": {"towers": 2},
            "data": {"size": 16, "count": 32},
            "model": {"width": 4, "dilations": [2]},
            "stages": STAGES,
        }
    )
    return Trainer(config)


def test_completed_images_keep_known_pixels_and_losses_match_numpy(trainer):
    task = trainer.task
    batch = to_replica_floats(task.batch(4))  # as a replica receives it
    x, mask = batch["x"].numpy(), batch["mask"].numpy()
    raw, completed = (t.numpy() for t in task.complete(batch["x"], batch["mask"], False))
    np.testing.assert_array_equal(completed * (1 - mask), x * (1 - mask))
    np.testing.assert_allclose((completed * mask), (raw * mask), atol=1e-6)
    terms = task.losses(batch, ("reconstruction", "reconstruction_l1"))
    # The default reduction is the paper's: per image, the sum over the hole; then the mean.
    hole = np.broadcast_to(mask, raw.shape)
    per_image = ((raw - x) ** 2 * hole).sum(axis=(1, 2, 3))
    assert float(terms["reconstruction"]) == pytest.approx(per_image.mean(), rel=1e-4)
    per_image = (np.abs(raw - x) * hole).sum(axis=(1, 2, 3))
    assert float(terms["reconstruction_l1"]) == pytest.approx(per_image.mean(), rel=1e-4)


def test_feathered_weights_ramp_down_around_the_hole_by_hand():
    mask = np.zeros((1, 8, 8, 1), np.float32)
    mask[0, 3:5, 3:5] = 1.0  # a 2 x 2 hole
    weights = feathered(tf.constant(mask), 2).numpy()[0, :, :, 0]
    # Chessboard distance d from the hole: 1 in it, (3 - d) / 3 for d = 1, 2, then 0.
    expected = np.zeros((8, 8), np.float32)
    for i in range(8):
        for j in range(8):
            d = max(max(3 - i, i - 4, 0), max(3 - j, j - 4, 0))
            expected[i, j] = (3 - d) / 3 if d <= 2 else 0.0
    np.testing.assert_allclose(weights, expected, atol=1e-6)


def test_feathered_completion_blends_the_band_and_weighs_its_reconstruction(trainer):
    task = trainer.task
    batch = to_replica_floats(task.batch(4))
    x, mask = batch["x"].numpy(), batch["mask"].numpy()
    task.model["feather"] = 2
    try:
        raw, completed = (t.numpy() for t in task.complete(batch["x"], batch["mask"], False))
        terms = task.losses(batch, ("reconstruction_l1",))
    finally:
        task.model["feather"] = 0
    w = feathered(tf.constant(mask), 2).numpy()
    assert ((w > 0) & (w < 1)).any() and (w[mask == 1] == 1).all()
    np.testing.assert_allclose(completed, x * (1 - w) + raw * w, atol=1e-6)
    outside = np.broadcast_to(w == 0, x.shape)
    np.testing.assert_array_equal(completed[outside], x[outside])  # beyond the band: untouched
    per_image = (np.abs(raw - x) * w).sum(axis=(1, 2, 3))  # the task's reduction: sum
    assert float(terms["reconstruction_l1"]) == pytest.approx(per_image.mean(), rel=1e-4)


@pytest.mark.parametrize("feather", [-1, 1.5, True, "2", 5])  # 5: wider than 16 px // 4
def test_feather_must_be_whole_pixels(feather):
    raw = {"task": "completion", "batch_size": 4, "data": {"size": 16, "count": 8}}
    raw["model"] = {"width": 2, "dilations": [2], "feather": feather}
    with pytest.raises(ConfigError) as error:
        Trainer(parse_config({**raw, "stages": STAGES[:1]}))
    assert error.value.key == "model.feather"


def test_r1_is_the_squared_input_gradient_through_both_branches(trainer):
    task = trainer.task
    batch = to_replica_floats(task.batch(4))  # as a replica receives it
    x, offsets, crop = batch["x"], batch["crop_offset"].numpy(), task.crop
    with tf.GradientTape() as tape:
        tape.watch(x)
        # The crop around the hole by plain slicing, independently of the task's gather.
        crops = tf.stack([x[i, t : t + crop, s : s + crop] for i, (t, s) in enumerate(offsets)])
        logits = task.discriminator([x, crops], training=True)
    grads = tape.gradient(logits, x).numpy()
    expected = (grads**2).sum(axis=(1, 2, 3)).mean()
    r1 = float(task.losses(batch, ("r1",))["r1"])
    assert r1 == pytest.approx(expected, rel=1e-4) and r1 > 0


def test_all_three_glcic_stages_train_on_two_towers(trainer):
    before = snapshot(trainer)
    metrics = run_steps(trainer)[-1].metrics
    assert set(metrics) == {
        "discriminator/d_adversarial",
        "discriminator/d_real_accuracy",  # monitors: logged, not trained on
        "discriminator/d_fake_accuracy",
        "discriminator/grad_norm",
        "generator/reconstruction",
        "generator/g_adversarial",
        "generator/loss",
        "generator/grad_norm",
    }
    assert all(np.isfinite(float(v)) for v in metrics.values())
    changed = [p for p, v in before.items() if not np.array_equal(v, _value(trainer, p))]
    assert len(changed) == len(before)
    assert trainer.trace_counts() == {"completion": 1, "discriminator": 1, "joint": 1}


def _value(trainer, path):
    return next(v.numpy() for v in trainer.variables if v.path == path)


def test_the_joint_stage_compiles_with_xla_and_mixed_precision():
    """`devices.jit` and `devices.mixed_precision` on the completion task (its crops and
    masks must compile; its networks' bfloat16 outputs meet float32 images). The joint stage
    runs every computation of the three stages (reconstruction, both discriminators, every
    loss term); each stage would be an XLA compile of its own."""
    config = parse_config(
        {
            "name": "c",
            "task": "completion",
            "batch_size": 4,
            "devices": {"towers": 1, "jit": True, "mixed_precision": True},
            "data": {"size": 16, "count": 32},
            "model": {"width": 4, "dilations": [2]},
            "stages": STAGES[2:],
        }
    )
    trainer = Trainer(config)
    metrics = run_steps(trainer)[-1].metrics
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert trainer.step_count == trainer.schedule.total_steps


def test_evaluation_of_a_small_source_uses_all_its_images_and_refuses_more(tmp_path):
    from stagegan.errors import ConfigError
    from stagegan.evaluation.evaluate import Evaluation

    images = np.random.default_rng(0).integers(0, 256, (20, 16, 16, 3), dtype=np.uint8)
    np.savez(tmp_path / "small.npz", images=images)
    config = parse_config(
        {
            "name": "c",
            "task": "completion",
            "batch_size": 4,
            "data": {"source": "npz", "path": str(tmp_path / "small.npz"), "size": 16},
            "model": {"width": 4, "dilations": [2]},
            "stages": STAGES[:1],
        }
    )
    small = Trainer(config)
    evaluation = Evaluation(small, None, seed=1)
    evaluation.check()
    assert evaluation.count == 20  # not the default 1,000, and not drawn with replacement
    result = evaluation.run()["metrics"]
    assert result["count"] == 20 and "fid" not in result  # no features named off `shapes`
    with pytest.raises(ConfigError) as info:
        Evaluation(small, None, count=21, count_key="eval.count").check()
    assert info.value.key == "eval.count" and "has 20" in info.value.message


def test_patch_discriminator_scores_each_patch_and_sees_the_hole():
    config = parse_config(
        {
            "name": "p",
            "task": "completion",
            "batch_size": 4,
            "data": {"size": 64, "count": 16},
            "model": {"width": 2, "dilations": [2], "discriminator_type": "patch"},
            "augment": {"ops": ["translation"]},
            "stages": STAGES[1:],
        }
    )
    trainer = Trainer(config)
    d = trainer.task.discriminator
    assert d.output.shape[1:] == (16, 16, 1) and d.input.shape[-1] == 4  # RGB + mask
    x = np.zeros((1, 64, 64, 4), np.float32)
    hole = x.copy()
    hole[0, :4, :4, 3] = 1.0  # the mask channel: a hole in the top-left corner only
    changed = np.abs(d(hole).numpy() - d(x).numpy())[0, :, :, 0]
    # Each logit sees a 30 x 30 patch: the corner's do, the far ones do not.
    assert changed[0, 0] > 0 and changed[15, 15] == 0 and changed[8:, 8:].max() == 0
    before = [w.copy() for w in d.get_weights()]
    run_steps(trainer)
    assert any(np.abs(a - b).max() > 0 for a, b in zip(before, d.get_weights(), strict=True))
