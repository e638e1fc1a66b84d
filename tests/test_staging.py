"""Real batches staged a step ahead (`stagegan.core.staging`): the same batches in the same order
as drawing them in the step, one batch ahead of the reader and checkpointed with it, the
consumer independent of the read it overlaps, the buffer on the draw device, in-memory sets
gathered on the host, and uint8 converted to float on each tower's own device."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from toytask import network_weights, run_steps

from stagegan.config.schema import parse_config
from stagegan.core.staging import Staging, to_replica_floats
from stagegan.data import sources as data
from stagegan.training.trainer import Trainer

RNG = np.random.default_rng(11)
IMAGES = RNG.integers(0, 256, (12, 8, 8, 1), np.uint8)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    npz = tmp_path_factory.mktemp("staging") / "data.npz"
    np.savez(npz, images=IMAGES)
    big = npz.with_name("big.npz")  # the unconditional task's smallest size
    np.savez(big, images=RNG.integers(0, 256, (8, 28, 28, 1), np.uint8))
    folder = tmp_path_factory.mktemp("folder")
    for i, image in enumerate(IMAGES):
        Image.fromarray(image[..., 0]).save(folder / f"{i:02d}.png")
    return {"npz": str(npz), "folder": str(folder), "big": str(big)}


def options(files, source):
    return {
        "source": source,
        "path": files[source],
        "size": 8,
        "channels": 1,
        **({"cache": "none"} if source == "folder" else {}),
    }


def source_and_rng(files, source, seed=5):
    merged = {**data.DEFAULTS, **options(files, source)}
    return data.ImageSource(merged, seed, 4), tf.random.Generator.from_seed(seed)


@pytest.mark.parametrize("source", ["npz", "folder"])
def test_staged_batches_come_in_the_unstaged_order_one_read_ahead(files, source):
    reference, reference_rng = source_and_rng(files, source)
    expected = [reference.draw(4, reference_rng)["x"].numpy() for _ in range(6)]

    staged_source, rng = source_and_rng(files, source)
    staging = Staging(lambda: staged_source.draw(4, rng), "/CPU:0")
    assert not bool(staging.full.numpy())
    got = [staging.next()["x"].numpy() for _ in range(5)]
    for a, b in zip(got, expected[:5], strict=True):
        np.testing.assert_array_equal(a, b)
    # After 5 steps the buffer holds the 6th batch and the reader has given out 6.
    np.testing.assert_array_equal(staging.buffer["x"].numpy(), expected[5])
    following = staged_source.draw(4, rng)["x"].numpy()
    reference_following = reference.draw(4, reference_rng)["x"].numpy()
    np.testing.assert_array_equal(following, reference_following)


@pytest.mark.parametrize("source", ["npz", "folder"])
def test_the_staged_batch_is_checkpointed_with_the_data_position(files, source, tmp_path):
    reference, reference_rng = source_and_rng(files, source)
    expected = [reference.draw(4, reference_rng)["x"].numpy() for _ in range(7)]

    def build():
        src, rng = source_and_rng(files, source)
        staging = Staging(lambda: src.draw(4, rng), "/CPU:0")
        objects = {**staging.trackables(), **src.trackables(), "rng": rng}
        return staging, tf.train.Checkpoint(**objects)

    staging, checkpoint = build()
    for _ in range(3):
        staging.next()
    path = checkpoint.write(str(tmp_path / "ckpt"))
    resumed, fresh = build()
    fresh.read(path).assert_consumed()
    assert bool(resumed.full.numpy())
    for want in expected[3:6]:
        np.testing.assert_array_equal(resumed.next()["x"].numpy(), want)


def test_the_consumer_does_not_wait_for_the_read_of_the_next_batch(files):
    src, rng = source_and_rng(files, "folder")
    staging = Staging(lambda: src.draw(4, rng), "/CPU:0")
    graph = (
        tf.function(lambda: tf.reduce_sum(tf.cast(staging.next()["x"], tf.float32)))
        .get_concrete_function()
        .graph
    )
    # The sum itself (the function's outputs wait for every stateful op, by design).
    consumer = next(op for op in graph.get_operations() if op.type == "Sum")
    ancestors, todo = set(), [consumer]
    while todo:
        op = todo.pop()
        for parent in [t.op for t in op.inputs] + list(op.control_inputs):
            if parent not in ancestors:
                ancestors.add(parent)
                todo.append(parent)
    reads = [op for op in graph.get_operations() if op.type == "IteratorGetNextAsOptional"]
    assert len(reads) == 1  # the next batch's read (the first step's own read is in the cond)
    assert reads[0] not in ancestors
    assert any(op.type == "If" or op.type == "StatelessIf" for op in ancestors)


def config(files, staged_towers):
    return parse_config(
        {
            "seed": 2,
            "task": "unconditional",
            "data": {"source": "npz", "path": files["big"], "size": 28, "channels": 1},
            "model": {"latent_dim": 3, "width": 2, "batchnorm": False},
            "batch_size": 4,
            "devices": {"towers": staged_towers, "variables": "/CPU:1"},
            "stages": [
                {
                    "name": "alternating",
                    "steps": 3,
                    "updates": [
                        {"train": "discriminator/*", "loss": "d_loss"},
                        {"train": "generator/*", "loss": "g_loss"},
                    ],
                }
            ],
            "samples": None,
            "eval": None,
        }
    )


def run(trainer):
    run_steps(trainer)
    return network_weights(trainer)


def test_a_staged_run_trains_exactly_as_an_unstaged_one_with_data_where_it_belongs(
    files, monkeypatch
):
    towers = ["/CPU:2", "/CPU:3"]
    staged = Trainer(config(files, towers))
    staging = staged.stagings[staged.config.batch_size]
    assert staging.buffer["x"].device.endswith("CPU:1")  # the draw device
    assert staging.buffer["x"].dtype == tf.uint8
    assert staged.task.source.images.device.endswith("CPU:0")  # host memory
    # The uint8 -> float casts of the images are in the towers, each on its own device.
    graph = staged.stage_steps[0].function.get_concrete_function(tf.TensorSpec([], tf.int64))
    casts = [
        op.device
        for op in graph.graph.get_operations()
        if op.type == "Cast" and op.get_attr("SrcT") == tf.uint8
    ]
    assert casts and {c[-5:] for c in casts} == {"CPU:2", "CPU:3"}
    weights = run(staged)

    unstaged_capabilities = type(staged.task).capabilities - {"staged"}
    monkeypatch.setattr(type(staged.task), "capabilities", unstaged_capabilities)
    unstaged = Trainer(config(files, towers))
    assert unstaged.stagings == {}
    for a, b in zip(weights, run(unstaged), strict=True):
        np.testing.assert_array_equal(a, b)


def test_replica_floats_convert_uint8_images_only():
    labels = tf.constant([3], tf.uint8)  # a custom task's uint8 labels stay as they are
    shard = {"x": tf.constant([[0, 255]], tf.uint8), "y": labels, "z": tf.ones([1])}
    out = to_replica_floats(shard)
    np.testing.assert_allclose(out["x"].numpy(), [[-1.0, 1.0]])
    assert out["y"] is labels and out["z"].dtype == tf.float32
    floats = {"x": tf.ones([1, 2])}
    assert to_replica_floats(floats) is floats
