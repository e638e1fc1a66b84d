"""Progressive growing (`model.arch: progressive`, `stages[i].resolution` / `fade_in`): alpha's
path and the blends against hand computations, isolation of the blocks a stage does not use,
and exactness: a run resumed in the middle of a transition, a run extended by its remaining
stages, and towers, mirrored replicas and two worker processes against one device, each across
the stages' own batch sizes (`stages[i].batch_size`)."""

import copy
import dataclasses
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
import yaml
from clihelp import assert_user_error, inprocess
from test_run_control import assert_same_checkpoints
from toytask import finished_run, run_steps, snapshot

from stagegan.config.schema import load_config, parse_config
from stagegan.errors import ConfigError
from stagegan.run.reading import find_checkpoint
from stagegan.tasks import progressive
from stagegan.training.trainer import Trainer

# No R1 (the preset's R1 runs at every resolution in test_presets_heavy; R1 on two towers is
# test_hole_target's): it would add a third to every trace here.
UPDATES = [
    {"train": "discriminator/*", "loss": {"d_loss": 1.0}, "optimizer": "d"},
    {"train": "generator/*", "loss": {"g_loss": 1.0}, "optimizer": "g"},
]
STAGES = [  # (name, steps, resolution, fade_in); data.size 8
    ("r4", 2, 4, False),
    ("fade8", 4, 8, True),
    ("r8", 2, None, False),
]
# Each stage's own global batch, as the reference lowers it when the resolution grows: the
# resume, extension, towers, mirrored and two-worker tests below cross two batch changes.
BATCHES = {"r4": 16, "fade8": 4}
# SGD with momentum: Adam (beta_1 0) turns rounding-sized gradients into steps of the full
# learning rate, so towers would agree only to ~lr; momentum keeps slots to check and stays
# linear (towers agree to float32 rounding).
SGD = {"type": "sgd", "learning_rate": 0.01, "momentum": 0.9}


def raw_config(stages=STAGES, **changes):
    stage_list = []
    for name, steps, resolution, fade in stages:
        stage = {"name": name, "steps": steps, "updates": copy.deepcopy(UPDATES)}
        if resolution is not None:
            stage["resolution"] = resolution
        if fade:
            stage["fade_in"] = True
        if name in BATCHES:
            stage["batch_size"] = BATCHES[name]
        stage_list.append(stage)
    raw = {
        "name": "pg",
        "seed": 3,
        "task": "unconditional",
        "deterministic": True,
        "data": {"source": "shapes", "size": 8, "channels": 3, "count": 256},
        "model": {"arch": "progressive", "latent_dim": 8, "width": 4, "mbstd_group": 2},
        "batch_size": 8,
        "optimizers": {"g": SGD, "d": SGD},
        "stages": stage_list,
        "checkpoint": {"every": 2, "keep": 20},
        "log": {"every": 2, "tensorboard": False},  # no histogram variant to trace
        "samples": None,
    }
    raw.update(changes)
    return raw


@pytest.fixture(scope="module")
def trained():
    """One device, every stage, stepped by hand: alpha and the resolution after each step,
    and the weights before and after the first stage."""
    trainer = Trainer(parse_config(raw_config()))
    growth = trainer.task.growth
    initial = snapshot(trainer)
    path = []
    for position in trainer.schedule.positions():
        trainer.step(position)
        path.append((float(growth.alpha.numpy()), int(growth.index.numpy())))
        if trainer.step_count == STAGES[0][1] + STAGES[1][1]:
            after_fade = snapshot(trainer)
        if trainer.step_count == STAGES[0][1]:
            after_first = snapshot(trainer)
            slots = {
                v.path: v.numpy().copy()
                for v in trainer.optimizers["g"].variables + trainer.optimizers["d"].variables
            }
    return trainer, initial, after_first, slots, path, snapshot(trainer), after_fade


def test_alpha_rises_linearly_over_each_transition_by_hand(trained):
    path = trained[4]
    expected = []
    for _, steps, resolution, fade in STAGES:
        index = [4, 8].index(resolution or 8)
        expected += [((k + 1) / steps if fade else 1.0, index) for k in range(steps)]
    assert path == expected  # quarters: exact in float32


def test_the_first_stage_leaves_the_blocks_above_4px_and_their_slots_alone(trained):
    trainer, initial, after_first, slots = trained[:4]
    moved = {p for p in initial if not np.array_equal(initial[p], after_first[p])}
    low = {p for p in initial if "8" not in p.split("/")[1]}
    assert moved == low  # every 4 px layer trained, nothing else
    high = [name for name in slots if "8_" in name or "rgb8" in name]
    assert len(high) == 12  # the momentum of every 8 px weight: still zero
    for name in high:
        assert not slots[name].any(), name
    final = trained[5]
    changed = {p for p in initial if not np.array_equal(initial[p], final[p])}
    assert changed == set(initial)  # by the end every block has trained


def test_reals_are_area_downsampled_and_blended_by_hand(trained):
    trainer = trained[0]
    task, growth = trainer.task, trainer.task.growth
    x = np.random.default_rng(0).uniform(-1, 1, (2, 8, 8, 3)).astype(np.float32)
    by_stage = {s.name: s for s in trainer.config.stages}
    x4 = x.reshape(2, 4, 2, 4, 2, 3).mean(axis=(2, 4))  # the mean of each 2x2 block
    try:
        task.context.stage = by_stage["r4"]
        np.testing.assert_allclose(growth.reals(x), x4, atol=1e-6)
        task.context.stage = by_stage["fade8"]
        growth.alpha.assign(0.25)
        blended = 0.75 * x4.repeat(2, axis=1).repeat(2, axis=2) + 0.25 * x
        np.testing.assert_allclose(growth.reals(x), blended, atol=1e-6)
    finally:
        task.context.stage = None
        growth.alpha.assign(1.0)


def test_the_networks_blend_the_two_resolutions_by_alpha(trained):
    trainer = trained[0]
    task, growth = trainer.task, trainer.task.growth
    G, D = task.generator, task.discriminator
    by_stage = {s.name: s for s in trainer.config.stages}
    z = tf.random.stateless_normal([4, 8], seed=[1, 2])
    x8 = tf.random.stateless_uniform([4, 8, 8, 3], seed=[3, 4], minval=-1, maxval=1)

    def at(stage, alpha=1.0, x=x8):
        task.context.stage = by_stage[stage]
        growth.alpha.assign(alpha)
        return G(z).numpy(), D(x).numpy()

    try:
        g4, d4 = at("r4", x=tf.nn.avg_pool2d(x8, 2, 2, "VALID"))
        g8, d8 = at("r8")
        g_fade, _ = at("fade8", 0.3)
        old = g4.repeat(2, axis=1).repeat(2, axis=2)
        np.testing.assert_allclose(g_fade, 0.7 * old + 0.3 * g8, atol=1e-5)
        _, d_one = at("fade8", 1.0)
        np.testing.assert_allclose(d_one, d8, atol=1e-5)  # alpha 1: the 8 px path alone
        _, d_zero = at("fade8", 0.0)
        np.testing.assert_allclose(d_zero, d4, atol=1e-5)  # alpha 0: the 4 px path alone
        # Outside a stage step: the variables' resolution and alpha, upsampled, clipped.
        task.context.stage = None
        growth.alpha.assign(0.3)
        growth.index.assign(0)
        np.testing.assert_allclose(G(z).numpy(), np.clip(old, -1, 1), atol=1e-5)
        growth.index.assign(1)
        expected = np.clip(0.7 * old + 0.3 * g8, -1, 1)
        np.testing.assert_allclose(G(z).numpy(), expected, atol=1e-5)
    finally:
        task.context.stage = None
        growth.index.assign(1)
        growth.alpha.assign(1.0)


def test_parameter_counts_by_hand_match_the_built_networks(trained):
    task = trained[0].task
    for scope in ("generator", "discriminator"):
        built = sum(int(np.prod(v.shape)) for v in task.networks[scope].trainable_variables)
        assert progressive.parameter_count(task, scope) == built


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    return finished_run(tmp_path_factory.mktemp("pg") / "full", raw_config())


def test_a_run_resumed_mid_transition_ends_bit_identical(full_run, tmp_path):
    copied = tmp_path / "copy"
    shutil.copytree(full_run, copied)
    result = inprocess("train", "--resume", copied, "--checkpoint", "4")  # fade8's 2nd step
    assert result.returncode == 0, result.stderr
    final = "checkpoints/ckpt-00000008"
    assert_same_checkpoints(full_run / final, copied / final)


def test_a_run_extended_by_its_next_resolutions_matches_the_whole_schedule(full_run, tmp_path):
    short = finished_run(tmp_path / "short", raw_config(STAGES[:2]))
    rest = raw_config()["stages"][2:]
    sets = [a for s in rest for a in ("--set", f"stages[+]={json.dumps(s)}")]
    result = inprocess("train", "--resume", short, *sets)
    assert result.returncode == 0, result.stderr
    final = "checkpoints/ckpt-00000008"
    assert_same_checkpoints(full_run / final, short / final)


@pytest.mark.parametrize("towers, strategy", [(2, "towers"), (2, "mirrored")], ids=str)
def test_towers_and_mirrored_train_what_one_device_does(trained, towers, strategy):
    """To the end of the transition (the stages with both resolutions and the blends)."""
    raw = raw_config(STAGES[:2], devices={"towers": towers, "strategy": strategy})
    trainer = Trainer(parse_config(raw))
    run_steps(trainer)
    final, other = trained[6], snapshot(trainer)
    diff = max(float(np.abs(final[p] - other[p]).max()) for p in final)
    moved = max(float(np.abs(final[p] - trained[1][p]).max()) for p in final)
    assert moved > 1e-3 and diff < 1e-5, (moved, diff)


@pytest.mark.parametrize(
    "change, key",
    [
        ({"model": {"arch": "dcgan", "width": 4}}, "stages[0].resolution"),
        ({"stages": [{"resolution": 12}]}, "stages[0].resolution"),
        ({"stages": [{"resolution": 4, "fade_in": True}]}, "stages[0].fade_in"),
        ({"stages": [{"fade_in": True}]}, "stages[0].fade_in"),
        ({"model": {"arch": "progressive", "width": 4, "mbstd_group": 3}}, "model.mbstd_group"),
        ({"model": {"arch": "progressive", "width": 4, "pack": 2}}, "model.pack"),
        ({"model": {"arch": "dcgan", "width": 4, "equalised_lr": False}}, "model.equalised_lr"),
    ],
)
def test_bad_progressive_settings_are_one_line(change, key, tmp_path):
    raw = raw_config([("only", 2, 4, False)])
    if "stages" in change:
        stage = raw["stages"][0]
        stage.pop("resolution")
        stage.update(change["stages"][0])
    else:
        raw["model"] = change["model"]
        if change["model"]["arch"] == "dcgan":
            raw["data"]["size"] = 28
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = inprocess("plan", "--config", path)
    assert_user_error(result, key)
    assert result.stderr.startswith(f"stagegan: error: {key}"), result.stderr


def test_the_64px_schedule_is_the_measured_one_on_the_presets_updates():
    """stages/progressive64.yaml, the schedule benchmarks/results/progressive.md measured at 64 px
    (`benchmarks/progressive.py --to 64 --steps 400,300,...`): 4 px for 400 steps, then a
    transition and a stage of 300 per doubling, on pggan_folder's updates and optimizers."""
    config = load_config("pggan_folder", ["data.size=64", "stages=progressive64"])
    got = [(s.name, s.steps, s.resolution, s.fade_in) for s in config.stages]
    assert got == [
        ("r4", 400, 4, False),
        ("fade8", 300, 8, True), ("r8", 300, 8, False),
        ("fade16", 300, 16, True), ("r16", 300, 16, False),
        ("fade32", 300, 32, True), ("r32", 300, 32, False),
        ("fade64", 300, 64, True), ("r64", 300, 64, False),
    ]  # fmt: skip
    preset = load_config("pggan_folder")
    unkeyed = lambda stage: [dataclasses.replace(u, key=None) for u in stage.updates]
    for stage in config.stages:
        assert unkeyed(stage) == unkeyed(preset.stages[0])
    assert config.optimizers == preset.optimizers
    progressive.check_stages(config.stages, 64)
    with pytest.raises(ConfigError, match="resolution"):  # a 32 px run has no 64 px blocks
        progressive.check_stages(load_config("pggan_folder", ["stages=progressive64"]).stages, 32)


def test_export_serves_the_generator_at_its_resolution_and_refuses_keras(full_run, tmp_path):
    from stagegan.run.reading import restore_run

    result = inprocess("export", "--run", full_run, "--output", tmp_path / "sm", "--format",
                       "savedmodel")  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "sm/export.json").read_text())
    assert record["inputs"] == {"z": {"shape": [None, 8], "dtype": "float32"}}
    assert record["output"] == {"shape": [None, 8, 8, 3], "dtype": "uint8"}
    served = tf.saved_model.load(str(tmp_path / "sm/saved_model"))
    z = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    trainer = restore_run(full_run)[0]
    images = trainer.task.generator(z).numpy()
    expected = np.clip(np.round((images + 1) * 127.5), 0, 255)
    assert np.abs(served.serve(z).numpy().astype(float) - expected).max() <= 1
    refused = inprocess(
        "export", "--run", full_run, "--output", tmp_path / "k", "--format", "keras"
    )
    assert_user_error(refused, "--format")
    assert "savedmodel or tflite" in refused.stderr and not (tmp_path / "k").exists()


def test_two_worker_processes_train_the_transition_as_one_device_does(trained, tmp_path):
    """Two worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy): each worker sets alpha
    from the same stage step; the weights end as one device's."""
    from clihelp import workers
    from toytask import read_checkpoint, variable_key

    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw_config(STAGES[:2])))
    (tmp_path / "tmp").mkdir()
    args = ["--config", "run.yaml", "--run-dir", tmp_path / "run"]
    results = workers(*args, cwd=tmp_path, env={"TMPDIR": str(tmp_path / "tmp")})
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-3000:] for r in results]
    values = read_checkpoint(tmp_path / "run/checkpoints/ckpt-00000006")
    expected = trained[6]
    diff = max(float(np.abs(values[variable_key(p)] - expected[p]).max()) for p in expected)
    assert diff < 1e-5, diff
    assert float(values["growth_alpha/.ATTRIBUTES/VARIABLE_VALUE"]) == 1.0


def test_a_conditional_run_grows_and_samples_the_asked_class(tmp_path):
    """`model.conditional` with progressive growing: every stage trains on labelled data, the
    generator's output and the discriminator's projection depend on the class at every
    resolution, and `sample --class` draws from the finished run."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 64)
    images = labels[:, None, None, None] * 100 + rng.integers(0, 30, (64, 8, 8, 3))
    np.savez(tmp_path / "three.npz", x=images.astype(np.uint8), y=labels.astype(np.int64))
    data = {"source": "npz", "path": str(tmp_path / "three.npz"), "key": "x", "labels": "y"}
    raw = raw_config(data={**data, "size": 8, "channels": 3})
    raw["model"] = {**raw["model"], "conditional": True}
    run_dir = finished_run(tmp_path / "run", raw)
    trainer = Trainer(parse_config(raw))
    trainer.checkpoint.read(str(find_checkpoint(run_dir))).expect_partial()
    task, z = trainer.task, tf.random.stateless_normal([2, 8], [1, 2])
    for index in range(2):  # 4 px, 8 px
        task.growth.index.assign(index)
        one, two = (
            task.generator([z, tf.constant([k, k])], training=False).numpy() for k in (0, 2)
        )
        assert np.abs(one - two).max() > 1e-4
        scores = [
            task.discriminator([tf.constant(one), tf.constant([[k], [k]])], training=False)
            for k in (0, 2)
        ]
        assert np.abs(scores[0].numpy() - scores[1].numpy()).max() > 1e-6
    out = tmp_path / "two.npy"
    result = inprocess("sample", "--run", run_dir, "--num", "4", "--class", "2", "--output", out)
    assert result.returncode == 0, result.stderr
    assert np.load(out).shape == (4, 8, 8, 3)
