"""FID and KID as the papers compute them: the 2015-12-05 Inception graph (`inception2015:PATH`)
loaded from a GraphDef, fed as TTUR's fid.py feeds it, and KID's 100 subsets.

The real `classify_image_graph_def.pb` is not here (offline machines), so the tests build a
small frozen graph with the real one's node names and structure: a JPEG decoder feeding
`ExpandDims` (batch 1, the tensor TTUR feeds), TF1's `ResizeBilinear`, the `(x - 128) / 128`
scaling, a batch normalisation of 2015 (`BatchNormWithGlobalNormalization`, which TensorFlow 2
no longer runs), and `pool_3` (here the normalised resized pixels themselves, so the features
can be checked by hand), followed by a `pool_3/_reshape` that only works at batch 1.
"""

import hashlib
import os
import types

import numpy as np
import pytest
import tensorflow as tf
from clihelp import assert_user_error, inprocess

from stagegan.errors import ConfigError
from stagegan.evaluation import evaluate, metrics
from stagegan.evaluation import features as extractors

SIDE = 4  # the graph resizes to SIDE x SIDE (299 in the real one)
# The batch normalisation's constants, per channel: (y - MEAN) * rsqrt(VARIANCE + EPSILON) *
# GAMMA + BETA, that is (y - MEAN) * SCALE + BETA (powers of two: exact in float32).
MEAN, VARIANCE, EPSILON = [0.0, 0.5, -0.5], [3.0, 0.0, 15.0], 1.0
GAMMA, BETA = [1.0, 2.0, 1.0], [0.25, 0.0, 1.0]
SCALE = np.array([0.5 * 1.0, 1.0 * 2.0, 0.25 * 1.0])


def write_graph(
    path, side=SIDE, input_dtype=tf.float32, names=("ExpandDims", "pool_3"), scale_after=True
):
    """A frozen GraphDef shaped like `classify_image_graph_def.pb`, written to `path`, with
    the shapes of one decoded JPEG recorded (`_output_shapes`)."""
    expand_name, pool_name = names
    graph = tf.Graph()
    with graph.as_default():
        contents = tf.compat.v1.placeholder(tf.string, [], name="DecodeJpeg/contents")
        decoded = tf.io.decode_jpeg(contents, channels=3, name="DecodeJpeg")
        expanded = tf.expand_dims(tf.cast(decoded, input_dtype, name="Cast"), 0, name=expand_name)
        resized = tf.raw_ops.ResizeBilinear(
            images=expanded, size=[side, side], align_corners=False, name="ResizeBilinear"
        )
        scaled = tf.multiply(tf.subtract(resized, 128.0, name="Sub"), 1 / 128, name="Mul")
        for name, values in [
            ("mean", MEAN),
            ("variance", VARIANCE),
            ("beta", BETA),
            ("gamma", GAMMA),
        ]:
            tf.constant(values, tf.float32, name=f"bn/{name}")
        normalised = tf.identity(scaled, name="bn")  # made BatchNormWithGlobalNormalization below
        pool = tf.reshape(normalised, [-1, 1, 1, side * side * 3], name=pool_name)
        tf.reshape(pool, [1, -1], name=f"{pool_name}/_reshape")  # batch 1 only: never fetched
    graph_def = graph.as_graph_def(add_shapes=True)
    # Current TensorFlow refuses to build the op of 2015, but imports it from an old graph.
    graph_def.versions.producer = 5
    (node,) = [node for node in graph_def.node if node.name == "bn"]
    node.op = "BatchNormWithGlobalNormalization"
    del node.input[:]
    node.input.extend(["Mul", "bn/mean", "bn/variance", "bn/beta", "bn/gamma"])
    node.attr["variance_epsilon"].f = EPSILON
    node.attr["scale_after_normalization"].b = scale_after
    path.write_bytes(graph_def.SerializeToString())
    return path


def pixels_of(features, scale=SCALE):
    """The resized pixels [N, SIDE, SIDE, 3] behind the test graph's features."""
    normalised = features.reshape(len(features), SIDE, SIDE, 3)
    return ((normalised - BETA) / scale + MEAN) * 128 + 128


@pytest.fixture(autouse=True)
def stand_in_width(monkeypatch):
    """The stand-in graph's `pool_3` has SIDE * SIDE * 3 features where the real one has 2048:
    the loader checks the width it is told (a test below keeps the real one)."""
    monkeypatch.setattr(extractors, "INCEPTION_2015_FEATURES", SIDE * SIDE * 3)


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    return write_graph(tmp_path_factory.mktemp("inception2015") / "graph.pb")


# Rounding and resizing, by hand ---------------------------------------------------------------


def test_images_in_minus_one_to_one_become_the_uint8_levels_stylegan2_ada_feeds():
    # x * 127.5 + 128, clipped to [0, 255], truncated.
    x = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, -1.3, 1.2, 0.999], np.float32).reshape(1, 2, 4, 1)
    pixels = extractors.to_uint8(x)
    assert pixels.dtype == np.uint8 and pixels.shape == (1, 2, 4, 3)  # grey repeated to RGB
    for channel in range(3):
        np.testing.assert_array_equal(
            pixels[0, ..., channel].ravel(), [0, 64, 128, 191, 255, 0, 255, 255]
        )
    # Real images, read as u / 127.5 - 1 (stagegan.data.sources), come back to their bytes.
    levels = np.arange(256, dtype=np.uint8)
    scaled = tf.cast(levels, tf.float32).numpy() / 127.5 - 1.0
    np.testing.assert_array_equal(
        extractors.to_uint8(scaled.reshape(1, 16, 16, 1))[..., 0].ravel(), levels
    )


# A grey 2x3 image, in [-1, 1], and its uint8 levels (by the rule above):
#   [[-1,   1,  -0.5],      [[  0, 255,  64],
#    [ 0.5, 0, -1.2]]   ->   [191, 128,   0]]
GREY = np.array([[-1.0, 1.0, -0.5], [0.5, 0.0, -1.2]], np.float32)[None, ..., None]
# TF1's bilinear resize (align_corners=False, no half-pixel centres) to 4x4 samples output
# pixel i at input position i * in / out, clamped to the last pixel. Width 3 -> 4 (positions
# 0, 0.75, 1.5, 2.25): row [a, b, c] -> [a, a + 0.75 (b - a), b + 0.5 (c - b), c]. Height
# 2 -> 4 (0, 0.5, 1, 1.5): rows r0, (r0 + r1) / 2, r1, r1.
#   row 0: [0, 191.25, 159.5, 64];  row 1: [191, 143.75, 64, 0]
GREY_RESIZED = np.array(
    [
        [0.0, 191.25, 159.5, 64.0],
        [95.5, 167.5, 111.75, 32.0],
        [191.0, 143.75, 64.0, 0.0],
        [191.0, 143.75, 64.0, 0.0],
    ]
)
# (TF2's default, with half-pixel centres, gives [0, 159.375, 183.375, 64] in row 0.)


def legacy_bilinear(pixels, side):
    """TF1's bilinear resize of [N, H, W, C] to [N, side, side, C], in numpy (the rule above)."""

    def along(x, axis):
        size = x.shape[axis]
        position = np.arange(side) * size / side
        low = np.floor(position).astype(int)
        high = np.minimum(low + 1, size - 1)
        shape = [1] * x.ndim
        shape[axis] = side
        weight = (position - low).reshape(shape)
        return np.take(x, low, axis) * (1 - weight) + np.take(x, high, axis) * weight

    return along(along(pixels.astype(np.float64), 1), 2)


def test_the_numpy_reference_resize_is_the_hand_computed_one():
    pixels = extractors.to_uint8(GREY)
    np.testing.assert_array_equal(legacy_bilinear(pixels, SIDE)[0, ..., 1], GREY_RESIZED)


def test_the_graph_gets_uint8_levels_and_resizes_them_itself(graph_file):
    extract = extractors.load_extractor(f"inception2015:{graph_file}", "--features")
    features = extract(GREY)
    assert features.shape == (1, SIDE * SIDE * 3)
    pixels = pixels_of(features)[0]
    for channel in range(3):
        np.testing.assert_allclose(pixels[..., channel], GREY_RESIZED, atol=1e-4)


def test_batches_of_colour_images_through_an_evaluation(graph_file):
    # More than one image per call although the graph's ExpandDims says batch 1, in
    # `batch_size` chunks, and the features named in the result.
    # Images whose uint8 levels are known by construction: x * 127.5 + 128 = level + u, with
    # u in [0.1, 0.4], truncates to the level (and x stays inside [-1, 1]).
    rng = np.random.default_rng(0)
    levels = rng.integers(1, 256, size=(5, 3, 5, 3))
    images = ((levels - 128 + rng.uniform(0.1, 0.4, levels.shape)) / 127.5).astype(np.float32)
    task = types.SimpleNamespace(name="stub", data={}, metrics=())
    trainer = types.SimpleNamespace(task=task, ema=None, added_metrics=())
    spec = f"inception2015:{graph_file}"
    run = evaluate.Evaluation(trainer, None, count=5, features=spec, batch_size=2)
    expected = legacy_bilinear(levels, SIDE)
    features = run.features(images)
    assert features.shape == (5, SIDE * SIDE * 3)
    np.testing.assert_allclose(pixels_of(features), expected, atol=1e-3)
    assert run.features_name == f"Inception 2015-12-05 pool_3 ({graph_file})"


def test_the_2015_batch_norm_and_the_batch_1_shapes_are_upgraded(graph_file, tmp_path):
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph_file.read_bytes())
    assert any("_output_shapes" in node.attr for node in graph_def.node)
    upgraded = extractors.upgrade_graph_def(graph_def)
    assert not any("_output_shapes" in node.attr for node in upgraded.node)
    assert {node.op for node in graph_def.node} - {node.op for node in upgraded.node} == {
        "BatchNormWithGlobalNormalization"
    }
    assert [n.op for n in upgraded.node if n.name == "bn"] == ["Add"]  # consumers keep it
    # Without scale_after_normalization, gamma is left out: the scale is rsqrt(v + eps).
    plain = write_graph(tmp_path / "plain.pb", scale_after=False)
    features = extractors.load_extractor(f"inception2015:{plain}", "--features")(GREY)
    pixels = pixels_of(features, scale=np.array([0.5, 1.0, 0.25]))[0]
    for channel in range(3):
        np.testing.assert_allclose(pixels[..., channel], GREY_RESIZED, atol=1e-4)


def test_a_matching_sha256_loads(graph_file):
    digest = hashlib.sha256(graph_file.read_bytes()).hexdigest()
    extract = extractors.load_extractor(f"inception2015:{graph_file}#sha256={digest}", "x")
    assert extract(GREY).shape == (1, SIDE * SIDE * 3)


# Bad files ------------------------------------------------------------------------------------


def test_bad_graph_files_name_the_flag_and_what_is_wrong(graph_file, tmp_path):
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"not a graph \xff\x00\x13")
    empty = tmp_path / "empty.pb"
    empty.write_bytes(b"")
    renamed = write_graph(tmp_path / "renamed.pb", names=("Input", "pool_3"))
    integer = write_graph(tmp_path / "integer.pb", input_dtype=tf.int32)  # ExpandDims: int32
    cases = [  # (the spec's path, the message, whether it says where the file comes from)
        (tmp_path / "missing.pb", "no graph file", True),
        (garbage, "is not a TensorFlow GraphDef", True),
        (empty, "has no ExpandDims:0 and no pool_3:0", True),
        (renamed, "has no ExpandDims:0: not the Inception graph", True),
        (integer, "does not import or run", True),
        (f"{graph_file}#sha256=abc", "64 hex digits", False),
        (f"{graph_file}#sha256={'0' * 64}", "has sha256 [0-9a-f]{64}, not the 0000", False),
    ]
    huge = tmp_path / "huge.pb"  # sparse: refused by its size, before a byte is read
    with open(huge, "wb") as f:
        f.truncate(extractors.INCEPTION_2015_MAX_BYTES + 1)
    fifo = tmp_path / "fifo.pb"
    os.mkfifo(fifo)  # would block the read if opened as a file
    cases += [
        (huge, "is larger than 256 MiB, the limit", True),
        (fifo, "is not a regular file", True),
    ]
    for path, words, hinted in cases:
        with pytest.raises(ConfigError, match=words) as caught:
            extractors.load_extractor(f"inception2015:{path}", "--features")
        assert caught.value.key == "--features"
        assert "\n" not in str(caught.value)
        assert ("inception-2015-12-05.tgz" in str(caught.value)) == hinted
        assert "eval: null" not in str(caught.value)  # that hint is for the config key
    with pytest.raises(ConfigError, match="eval: null") as caught:
        extractors.load_extractor(f"inception2015:{garbage}", "eval.features")
    assert caught.value.key == "eval.features"


def test_a_graph_with_the_names_but_not_2048_features_is_refused(graph_file, monkeypatch):
    """Node names are not enough: `pool_3` must give [N, 1, 1, 2048] floats (here the real
    width, which the stand-in's 48 features are not)."""
    monkeypatch.setattr(extractors, "INCEPTION_2015_FEATURES", 2048)
    with pytest.raises(ConfigError) as caught:
        extractors.load_extractor(f"inception2015:{graph_file}", "--features")
    assert caught.value.key == "--features"
    assert "pool_3:0 gives float32 [2, 1, 1, 48] for 2 images, not [2, 1, 1, 2048]" in str(
        caught.value
    )


def test_a_bad_graph_in_the_config_stops_train_with_one_line(tmp_path):
    garbage = tmp_path / "graph.pb"
    garbage.write_bytes(b"\x08\x96\x01 not a graph")
    (tmp_path / "runs").mkdir()
    result = inprocess(
        "train", "--config", "wgan_gp_shapes", "--run-dir", str(tmp_path / "runs" / "run"),
        "--set", "model.width=4", "--set", "data.count=64", "--set", "batch_size=8",
        "--set", f'eval={{every: 0, features: "inception2015:{garbage}"}}',
    )  # fmt: skip
    assert_user_error(result, "eval.features", str(garbage), "GraphDef", "eval: null")
    assert list((tmp_path / "runs").iterdir()) == []  # stopped before the run folder


# KID ------------------------------------------------------------------------------------------


def plain_kid(x, y):
    """One subset's KID as stylegan2-ada's kernel_inception_distance.py writes it."""
    n, m = x.shape[1], len(x)
    a = (x @ x.T / n + 1) ** 3 + (y @ y.T / n + 1) ** 3
    b = (x @ y.T / n + 1) ** 3
    return ((a.sum() - np.diag(a).sum()) / (m - 1) - b.sum() * 2 / m) / m


@pytest.mark.parametrize(("sizes", "subset"), [((2500, 3000), 1000), ((30, 50), 15)])
def test_kid_takes_100_subsets_of_min_1000_and_half_the_smaller_set(sizes, subset, monkeypatch):
    seen = []
    monkeypatch.setattr(
        metrics, "polynomial_mmd", lambda a, b: seen.append((len(a), len(b))) or 0.0
    )
    rng = np.random.default_rng(1)
    metrics.kernel_inception_distance(
        rng.normal(size=(sizes[0], 2)), rng.normal(size=(sizes[1], 2))
    )
    assert seen == [(subset, subset)] * 100


def test_kid_by_default_is_the_plain_numpy_kid_over_100_seeded_subsets():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(40, 3)), rng.normal(0.3, 1.0, size=(50, 3))
    mean, std = metrics.kernel_inception_distance(a, b, seed=7)
    draws = np.random.default_rng(7)  # the same draws, in the same order: a's, then b's
    values = []
    for _ in range(100):
        x = a[draws.choice(40, 20, replace=False)]
        y = b[draws.choice(50, 20, replace=False)]
        values.append(plain_kid(x, y))
    assert (mean, std) == pytest.approx((np.mean(values), np.std(values)), rel=1e-9)
    assert metrics.kernel_inception_distance(a, b, seed=7) == (mean, std)
    assert metrics.kernel_inception_distance(a, b, seed=8)[0] != mean
