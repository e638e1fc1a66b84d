"""Differentiable augmentation (`augment:`): each op against numpy, gradients through it, the
adaptive-p controller by hand, and the same training on 1 tower, 4 towers and mirrored."""

from statistics import NormalDist

import numpy as np
import pytest
import tensorflow as tf
from toytask import run_steps

from stagegan.config.schema import AUGMENT_OPS, AugmentConfig, parse_config
from stagegan.core import augment
from stagegan.core.layers import pack, unpack
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.training.trainer import Trainer

RNG = np.random.default_rng(0)
IMAGES = RNG.uniform(-1, 1, (5, 8, 8, 3)).astype(np.float32)


def run_op(op, u, images=IMAGES, gate=True):
    uniforms = np.concatenate([np.full((len(images), 1), 0.0 if gate else 1.0), u], axis=1)
    return augment.apply_ops(images, tf.constant(uniforms, tf.float32), [op], 0.5).numpy()


def uniforms(width, n=5, seed=1):
    return np.random.default_rng(seed).uniform(0, 1, (n, width)).astype(np.float32)


# numpy references, written from the papers' code ---------------------------------------------


def np_shift(images, dy, dx, reflect):
    out = np.empty_like(images)
    h, w = images.shape[1:3]
    for i, image in enumerate(images):
        if reflect:
            padded = np.pad(image, ((h, h), (w, w), (0, 0)), mode="reflect")
            out[i] = padded[h - dy[i] : 2 * h - dy[i], w - dx[i] : 2 * w - dx[i]]
        else:
            padded = np.pad(image, ((h, h), (w, w), (0, 0)))
            out[i] = padded[h - dy[i] : 2 * h - dy[i], w - dx[i] : 2 * w - dx[i]]
    return out


def test_color_matches_diffaugment():
    u = uniforms(3)
    x = IMAGES + (u[:, 0] - 0.5)[:, None, None, None]
    mean = x.mean(axis=3, keepdims=True)
    x = (x - mean) * (2 * u[:, 1])[:, None, None, None] + mean
    mean = x.mean(axis=(1, 2, 3), keepdims=True)
    x = (x - mean) * (u[:, 2] + 0.5)[:, None, None, None] + mean
    np.testing.assert_allclose(run_op("color", u), x, atol=1e-5)


def test_translation_shifts_by_up_to_an_eighth_with_zero_padding():
    u = np.array([[0.0, 0.99], [0.5, 0.5], [0.99, 0.0], [0.3, 0.7], [0.2, 0.9]], np.float32)
    s = int(8 * 0.125 + 0.5)  # 1 pixel at 8 px
    shifts = np.floor(u * (2 * s + 1)).astype(int) - s  # DiffAugment's randint(-s, s + 1)
    expected = np_shift(IMAGES, shifts[:, 0], shifts[:, 1], reflect=False)
    np.testing.assert_allclose(run_op("translation", u), expected, atol=0)
    assert {tuple(r) for r in shifts} >= {(-1, 1), (0, 0), (1, -1)}


def test_xint_translates_with_reflect_padding():
    u = np.array([[0.0, 1.0], [0.5, 0.5], [1.0, 0.0], [0.3, 0.8], [0.6, 0.1]], np.float32)
    big = RNG.uniform(-1, 1, (5, 16, 16, 1)).astype(np.float32)
    shifts = np.round((u * 2 - 1) * 0.125 * 16).astype(int)  # ADA: up to 2 px at 16 px
    expected = np_shift(big, shifts[:, 0], shifts[:, 1], reflect=True)
    np.testing.assert_allclose(run_op("xint", u, big), expected, atol=0)
    assert shifts.min() == -2 and shifts.max() == 2


def test_cutout_zeroes_a_half_side_square():
    u = np.array([[0.0, 0.0], [0.99, 0.99], [0.5, 0.3], [0.1, 0.8], [0.7, 0.7]], np.float32)
    out = run_op("cutout", u)
    size = 4  # int(8 * 0.5 + 0.5)
    for i in range(5):
        oy, ox = (np.floor(u[i] * (8 + 1 - size % 2))).astype(int)  # DiffAugment's offsets
        mask = np.ones((8, 8, 1), np.float32)
        mask[max(oy - 2, 0) : max(oy + 2, 0), max(ox - 2, 0) : max(ox + 2, 0)] = 0
        np.testing.assert_allclose(out[i], IMAGES[i] * mask, atol=0)


def test_flip_and_rotations():
    np.testing.assert_array_equal(run_op("xflip", np.zeros((5, 0))), IMAGES[:, :, ::-1])
    u = np.array([[0.1], [0.3], [0.6], [0.9], [0.0]], np.float32)
    out = run_op("rotate90", u)
    for i, k in enumerate([0, 1, 2, 3, 0]):
        np.testing.assert_array_equal(out[i], np.rot90(IMAGES[i], k, axes=(0, 1)))


def test_ada_colour_ops():
    u = uniforms(1)
    z = np.array([NormalDist().inv_cdf(float(v)) for v in u[:, 0]])
    b = IMAGES + (0.2 * z)[:, None, None, None]
    np.testing.assert_allclose(run_op("brightness", u), b, atol=1e-5)
    c = IMAGES * (2 ** (0.5 * z))[:, None, None, None]
    np.testing.assert_allclose(run_op("contrast", u), c, atol=1e-5)
    axis = np.ones(3) / np.sqrt(3)
    along = (IMAGES @ axis)[..., None] * axis
    s = along + (IMAGES - along) * (2**z)[:, None, None, None]
    np.testing.assert_allclose(run_op("saturation", u), s, atol=1e-5)
    grey = IMAGES[..., :1]
    np.testing.assert_array_equal(run_op("saturation", u, grey), grey)


# ADA's geometric pipeline, written again in plain numpy: reflect padding, upfirdn with the
# sym6 filter, bilinear sampling (ADA's augment.py with upfirdn2d and grid_sample).

SYM6 = np.array([0.015404109327027373, 0.0034907120842174702, -0.11799011114819057,
                 -0.048311742585633, 0.4910559419267466, 0.787641141030194,
                 0.3379294217276218, -0.07263752278646252, -0.021060292512300564,
                 0.04472490177066578, 0.0017677118642428036, -0.007800708325034148])  # fmt: skip


def np_upfirdn(x, up, down, pad0, pad1, flip):
    """upfirdn2d's reference on one axis (the first) of x: zero insertion, padding, the
    filter (flipped unless `flip`, times `up`), decimation."""
    z = np.zeros((len(x) * up, *x.shape[1:]))
    z[::up] = x
    z = np.concatenate([np.zeros((max(pad0, 0), *x.shape[1:])), z,
                        np.zeros((max(pad1, 0), *x.shape[1:]))])  # fmt: skip
    z = z[max(-pad0, 0) : len(z) - max(-pad1, 0)]
    taps = (SYM6 if flip else SYM6[::-1]) / SYM6.sum() * up
    out = np.stack([np.tensordot(taps, z[i : i + len(taps)], 1) for i in range(len(z) - 11)])
    return out[::down]


def np_warp(image, matrix):
    h, w, c = image.shape
    m = max(h, w)
    padded = np.pad(image, ((m, m), (m, m), (0, 0)), mode="reflect")
    up = np_upfirdn(np_upfirdn(padded, 2, 1, 6, 5, False).swapaxes(0, 1), 2, 1, 6, 5, False)
    up = up.swapaxes(0, 1)
    out = np.zeros((2 * h + 12, 2 * w + 12, c))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            qx, qy = (2 * m - 6 + j + 0.5) / 2 - m - w / 2, (2 * m - 6 + i + 0.5) / 2 - m - h / 2
            sx, sy, _ = matrix @ [qx, qy, 1.0]
            x, y = 2 * (sx + w / 2 + m) - 0.5, 2 * (sy + h / 2 + m) - 0.5
            x0, y0 = int(np.floor(x)), int(np.floor(y))
            fx, fy = x - x0, y - y0
            at = lambda yy, xx: up[np.clip(yy, 0, len(up) - 1), np.clip(xx, 0, up.shape[1] - 1)]
            top = at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx
            out[i, j] = top * (1 - fy) + (at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx) * fy
    down = np_upfirdn(out, 1, 2, -1, -1, True).swapaxes(0, 1)
    return np_upfirdn(down, 1, 2, -1, -1, True).swapaxes(0, 1)


def test_geometric_ops_match_adas_pipeline_in_numpy():
    ops = ["scale", "rotate", "aniso", "xfrac"]
    u = uniforms(sum(augment.widths(ops)), n=3, seed=7)
    u[:, [0, 2, 4, 6]] = [[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]]
    images = RNG.uniform(-1, 1, (3, 10, 10, 3)).astype(np.float32)
    out = augment.apply_ops(images, tf.constant(u), ops, 0.5).numpy()
    rows = lambda *cols: [tf.constant(u[:, c]) for c in cols]
    matrices = [
        augment.scale_matrices(rows(1), images.shape),
        augment.rotate_matrices(rows(3), images.shape),
        augment.aniso_matrices(rows(5), images.shape),
        augment.xfrac_matrices(rows(7, 8), images.shape),
    ]
    for i in range(3):
        total = np.eye(3)
        for gate, matrix in zip(u[i, [0, 2, 4, 6]] < 0.5, matrices, strict=True):
            total = total @ (matrix.numpy()[i] if gate else np.eye(3))
        np.testing.assert_allclose(out[i], np_warp(images[i], total), atol=2e-5)
    # The matrices by hand: image 0 takes all four, scale and aniso by 2^(0.2 N(u)).
    s = 2 ** (0.2 * NormalDist().inv_cdf(float(u[0, 1])))
    np.testing.assert_allclose(matrices[0].numpy()[0], np.diag([1 / s, 1 / s, 1]), rtol=1e-5)
    theta = (2 * u[0, 3] - 1) * np.pi
    np.testing.assert_allclose(
        matrices[1].numpy()[0, :2, :2],
        [[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]], atol=1e-6,
    )  # fmt: skip


def test_warp_is_exact_for_the_identity_and_whole_pixel_shifts():
    """The sym6 filter pair reconstructs perfectly, so no transform leaves no trace, and a
    fractional translation by a whole pixel is xint's reflect-padded shift."""
    images = RNG.uniform(-1, 1, (2, 12, 12, 3)).astype(np.float32)
    np.testing.assert_allclose(augment.warp(images, tf.eye(3, batch_shape=[2])), images, atol=1e-5)
    ones, zeros = tf.ones(2), tf.zeros(2)
    shift = augment._affine(ones, zeros, zeros, ones, tf.constant([-1.0, 2.0]), -ones * 3)
    expected = np_shift(images, [3, 3], [1, -2], reflect=True)
    np.testing.assert_allclose(augment.warp(images, shift), expected, atol=1e-5)


def test_hue_and_lumaflip_against_numpy():
    """Hue turns the colour around the grey axis and keeps its luma; luma flip mirrors the
    luma and keeps the colour around it (ADA's rotate3d and its Householder matrix)."""
    u = np.array([[0.8], [0.3], [0.6], [0.1], [0.5]], np.float32)
    v = np.ones(3) / np.sqrt(3)
    cross = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    for i, theta in enumerate((2 * u[:, 0] - 1) * np.pi):
        rotation = np.cos(theta) * np.eye(3) + np.sin(theta) * cross
        rotation += (1 - np.cos(theta)) * np.outer(v, v)
        np.testing.assert_allclose(run_op("hue", u)[i], IMAGES[i] @ rotation.T, atol=1e-5)
    flipped = run_op("lumaflip", u)
    householder = np.eye(3) - 2 * np.outer(v, v)
    for i in range(5):
        expected = IMAGES[i] @ householder.T if u[i, 0] >= 0.5 else IMAGES[i]
        np.testing.assert_allclose(flipped[i], expected, atol=1e-6)
    grey = IMAGES[..., :1]
    for op in ("hue", "lumaflip"):
        np.testing.assert_array_equal(run_op(op, u, grey), grey)


@pytest.mark.parametrize("op", sorted(AUGMENT_OPS))
def test_a_closed_gate_leaves_the_image(op):
    u = uniforms(AUGMENT_OPS[op])
    np.testing.assert_array_equal(run_op(op, u, gate=False), IMAGES)


def test_p_gates_each_image_on_its_own():
    gates = np.array([[0.1], [0.9], [0.49], [0.51], [0.0]], np.float32)
    out = augment.apply_ops(IMAGES, gates, ["xflip"], 0.5).numpy()
    for i, flipped in enumerate([True, False, True, False, True]):
        np.testing.assert_array_equal(out[i], IMAGES[i, :, ::-1] if flipped else IMAGES[i])


def test_gradients_flow_through_every_op():
    ops = list(AUGMENT_OPS)
    u = uniforms(sum(augment.widths(ops)), seed=3)
    u[:, 0] = 0.0
    x = tf.Variable(IMAGES)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(augment.apply_ops(x, u, ops, 1.0) ** 2)
    gradient = tape.gradient(loss, x).numpy()
    assert np.isfinite(gradient).all() and np.abs(gradient).sum() > 1.0
    # Translation by hand: d sum(shift(x)) / dx is 1 where a pixel lands inside the image.
    v = tf.Variable(np.ones((1, 8, 8, 1), np.float32))
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(augment.translate(v, tf.constant([1]), tf.constant([-1]), False))
    expected = np.zeros((8, 8))
    expected[:7, 1:] = 1.0  # row 7 and column 0 fall off the edge
    np.testing.assert_array_equal(tape.gradient(total, v).numpy()[0, :, :, 0], expected)


def test_unpack_inverts_pack():
    x = tf.constant(RNG.normal(size=(6, 4, 4, 3)), tf.float32)
    np.testing.assert_array_equal(unpack(pack(x, 3), 3).numpy(), x.numpy())
    y = tf.constant(RNG.normal(size=(6, 5)), tf.float32)
    np.testing.assert_array_equal(unpack(pack(y, 2), 2).numpy(), y.numpy())


# The adaptive p, by hand --------------------------------------------------------------------


def test_adaptive_p_follows_ada_heuristic():
    spec = AugmentConfig(ops=("xflip",), p=0.1, target=0.6, speed=640, interval=2, key="augment")
    augmenter = augment.Augmenter(spec, batch_size=32, device="/CPU:0")
    accuracies = [0.9, 0.95, 0.7, 0.75, 0.6, 0.7, float("nan"), 0.5, 0.7]
    applied = [True, True, True, True, True, True, True, True, False]
    p, sums, count, rts = 0.1, 0.0, 0, []
    for accuracy, ok in zip(accuracies, applied, strict=True):
        augmenter.observe(tf.constant(accuracy), tf.constant(ok))
        if ok and np.isfinite(accuracy):
            sums, count = sums + 2 * accuracy - 1, count + 1
        if count == 2:  # every 2 counted updates: p += sign(rt - 0.6) * 32 * 2 / 640
            rt = sums / count
            p = min(max(p + np.sign(rt - 0.6) * 0.1, 0.0), 1.0)
            rts.append(rt)
            sums, count = 0.0, 0
    # rt: 0.85 (up), 0.45 (down), 0.3 (down), then one update pending (0.5; 0.7 not applied)
    np.testing.assert_allclose(rts, [0.85, 0.45, 0.3], atol=1e-6)
    assert p == pytest.approx(0.0) and float(augmenter.p.numpy()) == pytest.approx(p, abs=1e-6)
    assert float(augmenter.rt.numpy()) == pytest.approx(0.0, abs=1e-6)  # the pending mean
    assert int(augmenter.count.numpy()) == 1
    assert float(augmenter.sign_sum.numpy()) == pytest.approx(0.0, abs=1e-6)  # 2 * 0.5 - 1


# Config, plan and every backend -------------------------------------------------------------


@pytest.mark.parametrize(
    "value, key, words",
    [
        ({"ops": ["blur"]}, "augment.ops", "unknown op 'blur'"),
        ({"ops": []}, "augment.ops", "non-empty"),
        ({"p": 1.5}, "augment.p", "between 0 and 1"),
        ({"target": 1.0}, "augment.target", "between -1 and 1"),
        ({"speed": 0}, "augment.speed", "at least 1"),
        ({"probability": 1}, "augment.probability", "unknown key"),
    ],
)
def test_bad_augment_sections_name_their_key(value, key, words):
    raw = {"task": "mog2d", "batch_size": 8, "stages": "alternating", "augment": value}
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert error.value.key == key and words in error.value.message


def test_a_task_without_images_refuses_augment():
    raw = {"task": "mog2d", "batch_size": 8, "stages": "alternating", "augment": {}}
    with pytest.raises(ConfigError) as error:
        Trainer(parse_config(raw))
    assert error.value.key == "augment" and "does not augment" in error.value.message


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("augment") / "data.npz"
    np.savez(path, images=RNG.integers(0, 256, (16, 28, 28, 1), np.uint8))
    return str(path)


def config(npz, towers=1, strategy="towers", steps=3, only=None):
    """Three stages (a warm-up without augmentation, alternating updates with the run's
    adaptive augmentation and R1, a joint stage with its own); `only`: just that stage."""
    raw = raw_config(npz, towers, strategy, steps)
    if only is not None:
        raw["stages"] = [s for s in raw["stages"] if s["name"] == only]
    return parse_config(raw)


def raw_config(npz, towers, strategy, steps):
    return {
        "name": "aug",
        "seed": 3,
        "task": "unconditional",
        "data": {"source": "npz", "path": npz, "size": 28, "channels": 1},
        "model": {"latent_dim": 3, "width": 2, "batchnorm": False, "pack": 2},
        "batch_size": 8,
        "devices": {"towers": towers, "strategy": strategy},
        "optimizers": {
            "g": {"type": "sgd", "learning_rate": 0.05},
            "d": {"type": "sgd", "learning_rate": 0.05},
        },
        "augment": {
            "ops": ["color", "translation", "xint", "rotate", "scale", "xfrac"],
            "p": 0.5,
            "target": 0.0,
            "speed": 16,
            "interval": 1,
        },  # fmt: skip
        "stages": [
            {
                "name": "warmup",
                "steps": 1,
                "augment": None,
                "updates": [{"train": "discriminator/*", "loss": "d_loss", "optimizer": "d"}],
            },
            {
                "name": "alternating",
                "steps": steps,
                "updates": [
                    # No R1 here: R1 of augmented reals on two towers is
                    # test_hole_target's; it would double this stage's trace.
                    {"train": "discriminator/*", "loss": "d_loss", "optimizer": "d"},
                    {"train": "generator/*", "loss": "g_loss", "optimizer": "g"},
                ],  # fmt: skip
            },
            {
                "name": "joint",
                "steps": 2,
                "mode": "simultaneous",
                "augment": {"ops": ["translation", "cutout"]},
                "updates": [
                    {"train": "discriminator/*", "loss": "d_loss", "optimizer": "d"},
                    {"train": "generator/*", "loss": "g_loss", "optimizer": "g"},
                ],
            },
        ],
        "samples": None,
        "eval": None,
    }


def train(trainer, accuracies=None):
    """Every step of the run; `(weights, p after each step)`. With `accuracies` (a list),
    each step's discriminator `d_real_accuracy` is appended to it."""
    outputs = run_steps(trainer)
    weights = [*trainer.task.generator.get_weights(), *trainer.task.discriminator.get_weights()]
    ps = [float(o.metrics["augment/p"]) if "augment/p" in o.metrics else None for o in outputs]
    if accuracies is not None:
        accuracies += [float(o.metrics["discriminator/d_real_accuracy"]) for o in outputs]
    return weights, ps


@pytest.fixture(scope="module")
def one_device(npz):
    trainer = Trainer(config(npz))
    initial = [*trainer.task.generator.get_weights(), *trainer.task.discriminator.get_weights()]
    accuracies = []
    weights, ps = train(trainer, accuracies)
    return trainer, initial, weights, ps, accuracies


def test_stages_use_their_own_augmentation_and_plan_says_so(one_device):
    trainer, _, _, ps, accuracies = one_device
    assert ps[0] is None  # the warm-up has augment: null
    # The alternating stage (3 steps, one D update each): interval 1, target 0, speed 16,
    # batch 8, so after each D update p += sign(2 * d_real_accuracy - 1) * 8 / 16 in [0, 1].
    p, expected = 0.5, []
    for accuracy in accuracies[1:4]:
        p = min(max(p + np.sign(2 * accuracy - 1) * 0.5, 0.0), 1.0)
        expected.append(p)
    assert ps[1:4] == pytest.approx(expected, abs=1e-6)
    assert ps[-2:] == [1.0, 1.0]  # the joint stage's own fixed p
    plan = describe_plan(trainer)
    assert "augment: none in this stage" in plan
    assert "augment (augment): color, translation, xint" in plan and "p adaptive from 0.5" in plan
    assert "augment (stages[2].augment): translation, cutout; p 1" in plan
    assert set(trainer.trackables()) >= {"augment_p", "stages_2_augment_p"}


def test_augmentation_changes_training(one_device, npz):
    _, initial, weights, _, _ = one_device
    raw = config(npz).raw
    plain = Trainer(parse_config({**raw, "augment": None, "stages": [
        {k: v for k, v in s.items() if k != "augment"} for s in raw["stages"]]}))  # fmt: skip
    np.testing.assert_array_equal(plain.task.generator.get_weights()[0], initial[0])
    plain_weights, ps = train(plain)
    assert ps == [None] * len(ps)
    pairs = zip(weights, plain_weights, strict=True)
    assert max(float(np.abs(a - b).max()) for a, b in pairs) > 1e-4


@pytest.fixture(scope="module")
def one_device_alternating(npz):
    trainer = Trainer(config(npz, only="alternating"))
    initial = [*trainer.task.generator.get_weights(), *trainer.task.discriminator.get_weights()]
    return trainer, initial, *train(trainer)


@pytest.mark.parametrize("towers, strategy", [(2, "towers"), (2, "mirrored")], ids=str)
def test_towers_and_mirrored_equal_one_device(one_device_alternating, npz, towers, strategy):
    _, initial, weights, ps = one_device_alternating
    assert any(p != 0.5 for p in ps), ps  # the adaptive p moved from its initial 0.5
    trainer = Trainer(config(npz, towers, strategy, only="alternating"))
    other_weights, other_ps = train(trainer)
    assert other_ps == pytest.approx(ps, abs=1e-6)
    moved = max(float(np.abs(w - i).max()) for w, i in zip(weights, initial, strict=True))
    diff = max(float(np.abs(a - b).max()) for a, b in zip(weights, other_weights, strict=True))
    assert moved > 1e-3 and diff < 1e-5, (moved, diff)


def test_augmentation_draws_leave_the_latents_and_batches_as_they_were(npz):
    """Augmentation has its own random stream: a run with it draws the same latents and real
    batches as the same run without it (its ablation changes one thing)."""
    raw = raw_config(npz, 1, "towers", 3)
    raw["stages"] = [s for s in raw["stages"] if s["name"] == "alternating"]
    drawn = []
    for section in (raw["augment"], None):
        trainer = Trainer(parse_config({**raw, "augment": section}))
        draw = trainer.stage_steps[0].draw_batch
        drawn.append([{k: v.numpy() for k, v in draw().items()} for _ in range(2)])
    with_augment, without = drawn
    for a, b in zip(with_augment, without, strict=True):
        assert set(a) - set(b) == {"augment_real", "augment_fake"}
        for key in b:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
