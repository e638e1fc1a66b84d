"""The feature extractors that FID, KID and the realism metrics compare images by:
`load_extractor(spec, key)` gives a callable images [N, S, S, C] in [-1, 1] -> features, for
a spec of `eval.features` / `--features`: the shapes classifier, the self-supervised rotation
net, InceptionV3 (Keras's ImageNet weights, or a local copy), the 2015-12-05 Inception graph of
the FID papers (`load_inception_2015`), or a function of the user's. `check_features` checks
what an extractor returned. `stagegan.evaluation.evaluate.Evaluation` loads and calls them.
"""

import contextlib
import hashlib
import io
import os
import re

import keras
import numpy as np
import tensorflow as tf

from stagegan.config.files import read_bytes
from stagegan.config.objects import call_user
from stagegan.errors import ConfigError, first_line
from stagegan.evaluation import realism
from stagegan.runfolder.pictures import to_uint8

INCEPTION_SIDE = 299

SHAPES = "shapes"
INCEPTION = "inception"
INCEPTION_2015 = "inception2015"
SELFSUP = "selfsup"


def default_features(options):
    """The feature extractor `eval` uses when none is named (the source's `features`): the
    shapes classifier for the built-in `shapes` source (offline, see
    `stagegan.evaluation.shapes_net`), InceptionV3 otherwise."""
    from stagegan.data.sources import SOURCES

    kind = SOURCES.get(options["source"])
    return kind.features if kind is not None else INCEPTION


def describe_features(spec):
    if spec == SHAPES:
        return "shapes_net"
    if spec == INCEPTION:
        return "InceptionV3 (ImageNet)"
    if spec == SELFSUP:
        return "selfsup (rotation net on this run's reference images)"
    if spec.startswith(INCEPTION + ":"):
        return f"InceptionV3 ({spec[len(INCEPTION) + 1 :]})"
    if spec.startswith(INCEPTION_2015 + ":"):
        path, _ = _split_sha256(spec[len(INCEPTION_2015) + 1 :])
        return f"Inception 2015-12-05 pool_3 ({path})"
    return spec


def load_extractor(spec, key, reference_images=None, seed=0):
    """A callable images [N, S, S, C] in [-1, 1] -> features.

    `spec` is one of:
        shapes                   the shapes classifier's 128-d features
                                 (`stagegan.evaluation.shapes_net`)
        selfsup                  the 128-d features of a small network trained here, on
                                 `reference_images` with `seed`, to predict images' rotations
                                 (`stagegan.evaluation.realism.selfsup_extractor`); any image data,
                                 offline, comparable only with the same images and seed
        inception                InceptionV3 with ImageNet weights (downloaded once by Keras)
        inception:PATH           InceptionV3 with the weights file at PATH (an offline copy
                                 of Keras's `..._notop.h5`)
        inception2015:PATH       the TensorFlow Inception graph of 2015-12-05 at PATH
                                 (`classify_image_graph_def.pb`), fed as the papers' FID
                                 code feeds it (`load_inception_2015`); a `#sha256=HEX`
                                 suffix checks the file first
        package.module:function  a function returning a `keras.Model` (or any callable) that
                                 takes images in [-1, 1] at the run's size
    InceptionV3 sees images resized to 299x299, grey repeated to RGB, and gives 2048-d
    average-pooled features.

    Raises:
        ConfigError: on `key` when the extractor does not load.
    """
    if spec == SHAPES:
        from stagegan.evaluation import shapes_net

        return shapes_net.extractor()
    if spec == SELFSUP:
        assert reference_images is not None, "selfsup trains on the real images"
        return realism.selfsup_extractor(reference_images, seed)
    if spec == INCEPTION or spec.startswith(INCEPTION + ":"):
        return _inception(spec[len(INCEPTION) + 1 :] or None, key)
    if spec.startswith(INCEPTION_2015 + ":"):
        path, sha256 = _split_sha256(spec[len(INCEPTION_2015) + 1 :])
        return load_inception_2015(path, key, sha256)
    from stagegan.config.objects import load_object

    builder = load_object(spec, key)
    if not callable(builder):
        raise ConfigError(key, f"{spec} is a {type(builder).__name__}, not a function")
    model = call_user(key, spec, builder)
    if not callable(model):
        raise ConfigError(key, f"{spec} returned {type(model).__name__}, not a callable")
    if isinstance(model, keras.layers.Layer):  # a Keras model (or layer): in inference mode
        return lambda images: model(tf.constant(images, tf.float32), training=False)
    return lambda images: model(tf.constant(images, tf.float32))  # a plain function


def check_features(features, count, key):
    """`features` (what an extractor returned for `count` images) as [count, D] floats.

    Raises:
        ConfigError: on `key` when they are not numbers, or not one row an image.
    """
    try:
        array = np.asarray(features)
    except Exception as e:  # noqa: BLE001 - a user's object that is no array
        raise ConfigError(key, f"features are not an array ({first_line(e)})") from None
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        raise ConfigError(
            key, f"features must be numbers; got an array of {array.dtype} for {count} images"
        )
    if array.ndim == 0 or len(array) != count or array.size == 0:
        shape = list(array.shape)
        raise ConfigError(
            key, f"features must have one row an image: got shape {shape} for {count} images"
        )
    array = array.reshape(count, -1)
    return array if np.issubdtype(array.dtype, np.floating) else array.astype(np.float64)


def _inception(path, key):
    import keras

    hint = (
        f"set {key} to inception:/path/to/inception_v3_weights_tf_dim_ordering_tf_kernels_"
        "notop.h5 (a local copy), or to package.module:function naming a Keras feature "
        "extractor that maps images in [-1, 1] to features"
    )
    hint += _eval_off_hint(key)
    if path is not None and not os.path.isfile(path):
        raise ConfigError(key, f"no weights file {path}; {hint}")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # keras prints "Downloading ..."
            model = keras.applications.InceptionV3(
                include_top=False,
                pooling="avg",
                weights=path or "imagenet",
                input_shape=(INCEPTION_SIDE, INCEPTION_SIDE, 3),
            )
    except Exception as e:  # noqa: BLE001 - offline, blocked or corrupt download: one message
        what = (
            f"{path} does not hold InceptionV3 weights ({type(e).__name__})"
            if path
            else "FID/KID need InceptionV3's ImageNet weights, which could not be downloaded "
            "(offline?)"
        )
        raise ConfigError(key, f"{what}; {hint}") from None

    def extract(images):
        images = tf.constant(images, tf.float32)
        if images.shape[-1] == 1:
            images = tf.repeat(images, 3, axis=-1)
        images = tf.image.resize(images, [INCEPTION_SIDE, INCEPTION_SIDE])
        return model(images, training=False)  # InceptionV3 expects [-1, 1]

    return extract


def _eval_off_hint(key):
    return ", or turn evaluation off with eval: null" if key == "eval.features" else ""


# The Inception graph of the FID papers ------------------------------------------------------

INCEPTION_2015_URL = "http://download.tensorflow.org/models/image/imagenet/inception-2015-12-05.tgz"
# Node names in `classify_image_graph_def.pb`: TTUR's fid.py imports the graph under
# `FID_Inception_Net/` and feeds `ExpandDims:0` (the decoded JPEG, float, [N, H, W, 3] in
# 0..255), so the graph's own ResizeBilinear (TF1: no half-pixel centres) takes it to 299.
INCEPTION_2015_SCOPE = "FID_Inception_Net"
INCEPTION_2015_INPUT = "ExpandDims"
INCEPTION_2015_OUTPUT = "pool_3"  # [N, 1, 1, 2048]
INCEPTION_2015_FEATURES = 2048
INCEPTION_2015_MAX_BYTES = 256 << 20  # the real graph file is 95.7 MB
_SHA256_SUFFIX = re.compile(r"#sha256=([^#]*)$")


def _split_sha256(text):
    """`PATH#sha256=HEX` -> `(PATH, HEX)`; plain `PATH` -> `(PATH, None)`."""
    match = _SHA256_SUFFIX.search(text)
    if match is None:
        return text, None
    return text[: match.start()], match.group(1).lower()


def upgrade_graph_def(graph_def):
    """A copy of a 2015 `graph_def` that TensorFlow 2's function runtime runs, at any batch size:

    * each `BatchNormWithGlobalNormalization` node (an op removed from GraphDef version 9 on,
      which a TF1 session of the old graph's version still ran) becomes the same arithmetic in
      current ops, in the kernel's order: `(t - m) * (rsqrt(v + eps) * gamma) + beta`
      (`* gamma` only with `scale_after_normalization`); the last op keeps the node's name,
      so its consumers stay connected;
    * recorded `_output_shapes` (batch 1, from one decoded JPEG) are dropped, so the shapes
      follow from the images fed.
    """
    new = tf.compat.v1.GraphDef()
    new.versions.CopyFrom(graph_def.versions)
    new.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.op != "BatchNormWithGlobalNormalization":
            copy = new.node.add()
            copy.CopyFrom(node)
            if "_output_shapes" in copy.attr:
                del copy.attr["_output_shapes"]
            continue
        t, mean, variance, beta, gamma = [i for i in node.input if not i.startswith("^")]
        controls = [i for i in node.input if i.startswith("^")]
        dtype = tf.dtypes.as_dtype(node.attr["T"].type)
        epsilon = _add_node(new, node, "_epsilon", "Const", [])
        del epsilon.attr["T"]
        epsilon.attr["dtype"].type = dtype.as_datatype_enum
        epsilon.attr["value"].tensor.CopyFrom(
            tf.make_tensor_proto(node.attr["variance_epsilon"].f, dtype)
        )
        shifted = _add_node(new, node, "_variance", "Add", [variance, epsilon.name])
        scale = _add_node(new, node, "_rsqrt", "Rsqrt", [shifted.name])
        if node.attr["scale_after_normalization"].b:
            scale = _add_node(new, node, "_scale", "Mul", [scale.name, gamma])
        centred = _add_node(new, node, "_centred", "Sub", [t, mean])
        scaled = _add_node(new, node, "_scaled", "Mul", [centred.name, scale.name])
        _add_node(new, node, None, "Add", [scaled.name, beta, *controls])
    return new


def _add_node(graph_def, like, suffix, op, inputs):
    """A node `op(inputs)` added to `graph_def`, named `like.name/suffix` (or `like.name`),
    on `like`'s device and of its type `T`."""
    node = graph_def.node.add(name=f"{like.name}/{suffix}" if suffix else like.name, op=op)
    node.input.extend(inputs)
    node.device = like.device
    node.attr["T"].CopyFrom(like.attr["T"])
    return node


def load_inception_2015(path, key, sha256=None):
    """The `pool_3` features of the 2015-12-05 TensorFlow Inception graph, as TTUR's fid.py
    (the reference FID), stylegan2-ada's metrics and clean-fid's `legacy_tensorflow` mode
    compute them.

    Images are quantised to uint8 (`to_uint8`) and fed, as float values in 0..255 at their
    own size, to the graph's `ExpandDims:0`; the graph resizes them to 299x299 itself with
    TF1's bilinear resize (`align_corners=False`, no half-pixel centres) and scales them to
    [-1, 1]. No TensorFlow session: the GraphDef is imported into a
    `tf.compat.v1.wrap_function` and pruned to `pool_3:0`.

    Args:
        path: the `classify_image_graph_def.pb` file (inside `INCEPTION_2015_URL`).
        key: the flag or config key that named it (for errors).
        sha256: the file's expected SHA-256 (hex), or None not to check.

    Returns:
        A callable images [N, H, W, C] in [-1, 1] -> features [N, 2048] (numpy).

    Raises:
        ConfigError: on `key` when the file is missing, unreadable, not the expected one (by
            `sha256`), not a GraphDef, lacks `ExpandDims` or `pool_3`, or does not run.
    """
    hint = (
        f"set {key} to {INCEPTION_2015}:/path/to/classify_image_graph_def.pb, the file in "
        f"{INCEPTION_2015_URL}{_eval_off_hint(key)}"
    )
    if sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ConfigError(key, f"#sha256= takes 64 hex digits. Received: {sha256!r}")
    if not os.path.exists(path):
        raise ConfigError(key, f"no graph file {path}; {hint}")
    try:  # the real file is 95.7 MB: anything far larger is refused before it is read
        data = read_bytes(path, key, INCEPTION_2015_MAX_BYTES, what="graph file")
    except ConfigError as e:
        raise ConfigError(key, f"{e.message}; {hint}") from None
    if sha256 is not None and (found := hashlib.sha256(data).hexdigest()) != sha256:
        raise ConfigError(
            key, f"{path} has sha256 {found}, not the {sha256} given (another or damaged file)"
        )
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, or anything: one message
        raise ConfigError(
            key, f"{path} is not a TensorFlow GraphDef ({type(e).__name__}); {hint}"
        ) from None
    names = {node.name for node in graph_def.node}
    missing = [n for n in (INCEPTION_2015_INPUT, INCEPTION_2015_OUTPUT) if n not in names]
    if missing:
        raise ConfigError(
            key,
            f"{path} has no {' and no '.join(n + ':0' for n in missing)}: not the Inception "
            f"graph of 2015-12-05; {hint}",
        )
    try:
        graph_def = upgrade_graph_def(graph_def)
    except Exception as e:  # noqa: BLE001 - a malformed node: one message
        raise ConfigError(
            key, f"{path} has a malformed batch normalisation node ({type(e).__name__}); {hint}"
        ) from None

    def import_graph(images):
        (features,) = tf.compat.v1.import_graph_def(
            graph_def,
            input_map={f"{INCEPTION_2015_INPUT}:0": images},
            return_elements=[f"{INCEPTION_2015_OUTPUT}:0"],
            name=INCEPTION_2015_SCOPE,
        )
        return features

    try:
        imported = tf.compat.v1.wrap_function(
            import_graph, [tf.TensorSpec([None, None, None, 3], tf.float32)]
        )
        # Pruned to pool_3, so the graph's JPEG decoder (and its unfed input) never runs.
        run = imported.prune(imported.inputs[0], imported.outputs[0])
        probe = run(tf.zeros([2, 8, 8, 3]))  # fails here, not in the middle of an evaluation
    except Exception as e:  # noqa: BLE001 - unknown ops, wrong dtypes or shapes: one message
        raise ConfigError(
            key,
            f"{path} does not import or run as the Inception graph ({type(e).__name__}); {hint}",
        ) from None
    if not probe.dtype.is_floating or probe.shape.num_elements() != 2 * INCEPTION_2015_FEATURES:
        raise ConfigError(
            key,
            f"{path}'s {INCEPTION_2015_OUTPUT}:0 gives {probe.dtype.name} {probe.shape.as_list()} "
            f"for 2 images, not [2, 1, 1, {INCEPTION_2015_FEATURES}] floats: not the Inception "
            f"graph of 2015-12-05; {hint}",
        )

    def extract(images):
        pixels = tf.constant(to_uint8(images), tf.float32)
        features = run(pixels).numpy()
        return features.reshape(len(features), -1)

    return extract
