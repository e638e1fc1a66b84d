"""What a run writes while it trains: sample dumps and their manifest, metrics.jsonl,
TensorBoard events (scalars, pictures, histograms), the loss plot, and the console."""

import json
import struct

import numpy as np
import pytest
import tensorflow as tf
from toytask import toy_config

from stagegan.config.schema import parse_config
from stagegan.runfolder.pictures import TITLE_HEIGHT
from stagegan.runfolder.samples import SampleDumper, load_inputs
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer

SEED = 3
G = {"train": "generator/*", "loss": "g_loss", "optimizer": {"type": "sgd", "learning_rate": 0.1}}
D = {
    "train": "discriminator/*",
    "loss": "d_loss",
    "optimizer": {"type": "sgd", "learning_rate": 0.05},
}
STAGES = [
    {"name": "g_only", "steps": 2, "updates": [G]},
    {"name": "d_only", "steps": 2, "updates": [D]},
    {"name": "joint", "steps": 3, "mode": "simultaneous", "updates": [D, G]},
]


def config(**changes):
    raw = toy_config(
        STAGES,
        "t",
        SEED,
        log={"every": 2, "histograms": 3, "progress": "lines"},
        samples={"every": 2, "count": 16},
        checkpoint={"every": 0},
    )
    return parse_config({**raw, **changes})


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("outputs")
    trainer = Trainer(config())
    train(trainer, run_dir)
    return run_dir, trainer


def events(run_dir):
    """{tag: [(step, kind)]} from the TensorBoard event files."""
    found = {}
    for path in (run_dir / "tensorboard").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                kind = value.metadata.plugin_data.plugin_name
                found.setdefault(value.tag, []).append((event.step, kind))
    return found


def test_manifest_lists_every_dump_with_step_stage_seed_and_ema(run):
    run_dir, _ = run
    lines = (run_dir / "samples" / "manifest.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    # every 2 steps (2, 4, 6) plus every stage end (2, 4, 7); 2 and 4 are both, dumped once
    assert [(r["step"], r["stage"]) for r in records] == [
        (2, "g_only"),
        (4, "d_only"),
        (6, "joint"),
        (7, "joint"),
    ]
    for record in records:
        assert record["seed"] == SEED and record["ema"] is False and record["count"] == 16
        # A scatter under its title strip.
        assert png_size(run_dir / "samples" / record["file"]) == (400, 400 + TITLE_HEIGHT)
    assert records[-1]["file"] == "step00000007-joint.png"


def test_sample_inputs_come_from_the_seed_alone_and_are_saved(run):
    run_dir, _ = run
    inputs, info = load_inputs(run_dir / "samples" / "inputs.npz")
    assert info["seed"] == SEED
    # The seed's own noise stream, untouched by training: the first draw of 16 latents from
    # a philox generator keyed by the seed at counter [0, 1] (the noise stream; written out,
    # not through stagegan's make_generator).
    philox = tf.random.Generator.from_key_counter(key=SEED, counter=[0, 1], alg=1)
    expected = philox.normal([16, 2]).numpy()
    np.testing.assert_array_equal(inputs["z"], expected)


def test_same_checkpoint_and_seed_give_the_same_bytes(run, tmp_path):
    run_dir, _ = run
    trainer = Trainer(config())
    trainer.checkpoint.read(str(run_dir / "checkpoints" / "ckpt-00000007")).expect_partial()
    path, _ = SampleDumper(trainer, tmp_path, trainer.config.samples).dump(7, "joint")
    original = run_dir / "samples" / "step00000007-joint.png"
    assert path.read_bytes() == original.read_bytes()


def test_metrics_jsonl_has_one_record_per_logged_step(run):
    run_dir, _ = run
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["stage"], r["stage_step"]) for r in records] == [
        (2, "g_only", 2),
        (4, "d_only", 2),
        (6, "joint", 2),
        (7, "joint", 3),
    ]
    assert set(records[0]) == {
        "step",
        "stage",
        "stage_step",
        "time",
        "wall_time",
        "examples_per_sec",
        "generator/g_loss",
        "generator/grad_norm",
    }
    assert set(records[-1]) >= {"discriminator/d_loss", "discriminator/grad_norm"}
    assert all(r["examples_per_sec"] > 0 for r in records)
    times = [r["time"] for r in records]
    assert times == sorted(times)


def test_tensorboard_holds_scalars_pictures_and_histograms(run):
    run_dir, trainer = run
    found = events(run_dir)
    assert found["generator/g_loss"] == [(2, "scalars"), (6, "scalars"), (7, "scalars")]
    assert [step for step, _ in found["samples"]] == [2, 4, 6, 7]
    assert {kind for _, kind in found["samples"]} == {"images"}
    # Histograms every 3 steps (3, 6) and at stage ends (2, 4, 7), grouped by stage.
    kernel = "weights/generator/hidden/kernel"
    assert [s for s, _ in found[f"g_only/{kernel}"]] == [2]
    assert [s for s, _ in found[f"d_only/{kernel}"]] == [3, 4]
    assert [s for s, _ in found[f"joint/{kernel}"]] == [6, 7]
    assert [s for s, _ in found["joint/gradients/generator/generator/hidden/kernel"]] == [6, 7]
    assert [s for s, _ in found["d_only/gradients/discriminator/discriminator/out/bias"]] == [3, 4]
    assert "d_only/gradients/generator/generator/hidden/kernel" not in found
    assert {kind for _, kind in found[f"joint/{kernel}"]} == {"histograms"}


def test_histogram_gradients_are_the_ones_applied():
    trainer = Trainer(config())
    position = next(iter(trainer.schedule.positions(0)))
    before = {v.path: v.numpy() for v in trainer.variables}
    output = trainer.step(position, with_gradients=True)
    after = {v.path: v.numpy() for v in trainer.variables}
    gradients = {k: v.numpy() for k, v in output.gradients.items()}
    assert sorted(gradients) == sorted(
        f"generator/{p}" for p in before if p.startswith("generator/")
    )
    for name, gradient in gradients.items():
        path = name.split("/", 1)[1]
        np.testing.assert_allclose(after[path], before[path] - 0.1 * gradient, rtol=1e-6)
    assert trainer.stage_steps[0].trace_count == 1  # the plain variant, traced by trace()
    assert trainer.stage_steps[0].gradient_trace_count == 1


def test_loss_plot_is_a_png_of_the_documented_size(run):
    run_dir, _ = run
    # Two loss curves (g_loss, d_loss): one row of two 6 x 3 inch panels at 100 dpi.
    assert png_size(run_dir / "plots" / "losses.png") == (1200, 300)


def test_progress_bar_mode_shows_stage_steps_and_losses(tmp_path, capsys):
    trainer = Trainer(config(log={"every": 1, "progress": "bar"}, samples=None))
    train(trainer, tmp_path)
    out = capsys.readouterr().out
    assert "[joint] 3/3" in out and "| d_loss " in out and " g_loss " in out
    assert "left, run 0:00:0" in out
    assert not (tmp_path / "samples").exists()


def test_ema_samples_are_marked_in_the_manifest(tmp_path):
    trainer = Trainer(config(ema={"decay": 0.5}, stages=STAGES[:1]))
    train(trainer, tmp_path)
    lines = (tmp_path / "samples" / "manifest.jsonl").read_text().splitlines()
    assert [json.loads(x)["ema"] for x in lines] == [True]


def test_pictures_and_evaluations_share_one_quantisation():
    from stagegan.evaluation import features
    from stagegan.runfolder import pictures

    assert features.to_uint8 is pictures.to_uint8
    x = np.array([-3.0, -1.0, -1.0 + 0.5 / 127.5, 0.0, 1.0, 1.2], np.float32).reshape(1, 6, 1, 1)
    # x * 127.5 + 128 truncated: halves go up (1.0 -> 1), the ends clip.
    assert pictures.to_uint8(x)[0, :, 0, 0].tolist() == [0, 0, 1, 128, 255, 255]
    levels = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    back = pictures.to_uint8(levels.astype(np.float32) / 127.5 - 1.0)
    np.testing.assert_array_equal(back[..., 0], levels[..., 0])
