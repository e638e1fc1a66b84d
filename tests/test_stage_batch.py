"""A global batch per stage (`stages[i].batch_size`): a stream serves every stage from one
order of images, checked against the folder's permutation computed by hand; each stage's step
draws its own batch; the plan says so; and bad batches are one line naming their key. Resume,
extension, towers, mirrored and two workers across batch changes: `test_progressive.py`."""

import copy

import numpy as np
import pytest
import tensorflow as tf
import yaml
from clihelp import assert_user_error, inprocess
from PIL import Image
from test_progressive import raw_config

from stagegan.config.schema import parse_config
from stagegan.data import sources
from stagegan.training.trainer import Trainer

COUNT = 40


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """40 images of 8x8 whose red level names them: file k is 5 * k."""
    path = tmp_path_factory.mktemp("numbered")
    for k in range(COUNT):
        pixels = np.zeros((8, 8, 3), np.uint8)
        pixels[..., 0], pixels[..., 2] = 5 * k, 255 - 5 * k
        Image.fromarray(pixels).save(path / f"{k:03d}.png")
    return path


def folder_data(folder):
    return {"source": "folder", "path": str(folder), "size": 8, "channels": 3}


def names(batch):
    """The file numbers of a batch of the numbered folder."""
    red = np.asarray(batch["x"])[:, 0, 0, 0].astype(int)
    assert (red % 5 == 0).all()
    return list(red // 5)


def test_a_stream_serves_batches_of_any_multiple_in_the_folder_s_order(folder):
    """Unit 4 (the stages' common divisor): draws of 8, 4, 12, 4 and 16 read the files in
    the order of epoch 0's seeded permutation, then epoch 1's, whatever the batch sizes."""
    seed = 7
    source = sources.ImageSource({**sources.DEFAULTS, **folder_data(folder)}, seed, 16, unit=4)
    rng = tf.random.Generator.from_seed(0)
    drawn = [names(source.draw(size, rng)) for size in (8, 4, 12, 4, 16)]
    assert [len(d) for d in drawn] == [8, 4, 12, 4, 16]
    order = [
        tf.random.experimental.stateless_shuffle(
            tf.range(COUNT, dtype=tf.int64), seed=tf.constant([seed, epoch], tf.int64)
        ).numpy()
        for epoch in (0, 1)
    ]
    expected = list(np.concatenate(order))[:44]
    assert sum(drawn, []) == expected


@pytest.fixture(scope="module")
def staged(folder):
    raw = raw_config(data=folder_data(folder))
    return Trainer(parse_config(raw))


def test_each_stage_draws_its_own_batch(staged):
    """r4 16 images, fade8 4, r8 the run's 8; one staged buffer for each size; the stream
    serves units of 4."""
    trainer = staged
    assert sorted(trainer.stagings) == [4, 8, 16]
    assert trainer.task.source.unit == 4
    sizes = []
    for stage in trainer.config.stages:
        draw, _ = trainer.stage_inputs(stage)
        batch = draw()
        sizes.append(int(batch["x"].shape[0]))
        assert batch["z"].shape[0] == sizes[-1]  # the noise comes in the same number
    assert sizes == [16, 4, 8]


def test_the_plan_shows_each_stage_s_batch(folder, tmp_path):
    raw = raw_config(data=folder_data(folder), devices={"towers": 2})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = inprocess("plan", "--config", path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("stage ")]
    assert lines[0].endswith("mode sequential, batch 16 (8 per tower)"), lines[0]
    assert lines[1].endswith("mode sequential, batch 4 (2 per tower)"), lines[1]
    assert lines[2].endswith("mode sequential"), lines[2]  # the run's batch 8


@pytest.mark.parametrize(
    "stage, changes, words",
    [
        (1, {"batch_size": 6}, ["stages[1].batch_size: 6 does not divide evenly across 4"]),
        (0, {"batch_size": "big"}, ["stages[0].batch_size: "]),
        (0, {"batch_size": 0}, ["stages[0].batch_size: "]),
        (0, {"batch_size": 12}, ["model.mbstd_group: ", "stages[0].batch_size: 3 a replica"]),
        (0, {"batch_size": 2**34}, ["stages[0].batch_size: would need about"]),
    ],
    ids=["not divisible", "not a number", "zero", "mbstd group", "too large for memory"],
)
def test_bad_stage_batches_are_one_line(stage, changes, words, tmp_path):
    raw = raw_config(devices={"towers": 4})
    raw["stages"][stage].update(changes)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    before = sorted(tmp_path.iterdir())
    result = inprocess("train", "--config", path, "--run-dir", tmp_path / "run")
    assert_user_error(result, *words)
    assert sorted(tmp_path.iterdir()) == before


def test_a_started_stage_keeps_its_batch_on_resume(tmp_path):
    from toytask import finished_run

    raw = raw_config([("r4", 2, 4, False), ("r8", 2, 8, True)])
    run = finished_run(tmp_path / "run", copy.deepcopy(raw))
    result = inprocess("train", "--resume", run, "--checkpoint", "2", "--set",
                       "stages[0].batch_size=8")  # fmt: skip
    assert_user_error(result, "stages[0].batch_size")


@pytest.fixture(scope="module")
def streamed_run(folder, tmp_path_factory):
    """The progressive test's run (r4 at batch 16, fade8 at 4, r8 at 8) on the numbered
    folder: a stream of units of 4, staged a step ahead in three buffers."""
    from toytask import finished_run

    raw = raw_config(data=folder_data(folder))
    return finished_run(tmp_path_factory.mktemp("streamed") / "run", raw)


def test_a_streamed_run_resumed_after_a_batch_change_ends_bit_identical(streamed_run, tmp_path):
    """From step 4 (fade8's second step: its stream position and the 16-image batch that r4
    drew ahead are both in the checkpoint)."""
    import shutil

    from toytask import read_checkpoint

    copied = tmp_path / "copy"
    shutil.copytree(streamed_run, copied)
    result = inprocess("train", "--resume", copied, "--checkpoint", "4")
    assert result.returncode == 0, result.stderr
    final = "checkpoints/ckpt-00000008"
    # Everything but the stream's own state (a variant numpy cannot hold): the weights, the
    # optimizers' slots and the three staged buffers.
    expected, got = (
        read_checkpoint(r / final, skip="data_iterator") for r in (streamed_run, copied)
    )
    assert sorted(got) == sorted(expected)
    assert sum(key.startswith("data_staged_b16_") for key in got) == 2  # x and full
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_a_change_that_moves_a_stream_s_unit_is_refused_on_resume(streamed_run, tmp_path):
    """Units of 4 are prefetched in the checkpointed stream: a stage added at batch 2 would
    need units of 2. One line naming the new stage's key; the run folder unchanged."""
    import json
    import shutil

    from test_bad_input import snapshot as files

    copied = tmp_path / "copy"
    shutil.copytree(streamed_run, copied)
    before = files(copied)
    stage = {**raw_config()["stages"][2], "name": "more", "batch_size": 2}
    result = inprocess("train", "--resume", copied, "--set", f"stages[+]={json.dumps(stage)}")
    assert_user_error(result, "stages[3].batch_size: ", "batches of 2", "batches of 4")
    assert files(copied) == before
    stage["batch_size"] = 12  # a multiple of 4 keeps the unit: accepted
    result = inprocess("train", "--resume", copied, "--set", f"stages[+]={json.dumps(stage)}")
    assert result.returncode == 0, result.stderr


def test_resume_knows_which_sources_stream():
    """`run.resume` (free of TensorFlow) names the streamed sources the registry declares."""
    from stagegan.data.sources.base import SOURCES
    from stagegan.run.resume import STREAMED

    assert {name for name, kind in SOURCES.items() if kind.iterated} == set(STREAMED)
