"""Exact resume through real processes and real kills, and the pieces of resuming in process.

The crash chain: one deterministic run (2 towers, 3 stages, 12 steps; a packed, spectrally
normalised discriminator and a scheduled learning rate) is killed five times at chosen moments
(`tests/crash_run.py`) and resumed after each; it must end bit-identical to the same run never
interrupted, which runs beside it.
"""

import json
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml
import zygote
from clihelp import ROOT, TINY, stagegan
from toytask import D, G, finished_run, read_checkpoint, toy_config, variable_key

from stagegan.config.schema import load_config, parse_config, resumable_keys
from stagegan.errors import ConfigError
from stagegan.run.resume import check_changes, commit, drop_records_after, plan_resume, restore
from stagegan.runfolder.checkpoints import CheckpointStore
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer

CONFIG = [
    "--config",
    "mog_ring",
    *TINY,
    "--set",
    "deterministic=true",
    "--set",
    "devices.towers=2",
    "--set",
    "eval=null",
    "--set",
    "ema={decay: 0.9}",
    "--set",
    "log.tensorboard=false",  # saves a trace per stage and process; purging is tested below
    # Packing, spectral norm (its power-iteration vectors are state) and a schedule.
    "--set",
    "model={latent_dim: 4, hidden: 16, layers: 1, pack: 2, spectral_norm: true}",
    "--set",
    "optimizers.g.learning_rate={schedule: cosine, initial: 0.001, steps: 10, warmup: 2}",
]
# (how, global step): in order along one run; checkpoints every 2 steps and at stage ends 3, 7, 12.
KILLS = [
    ("after-index", 3),  # right after stage 1's end checkpoint: resume at a stage boundary
    ("after-step", 5),  # mid stage 2, two steps past the last checkpoint
    ("mid-write", 7),  # while stage 2's end checkpoint is being written
    ("before-index", 10),  # checkpoint 10 written but not yet listed
    ("sigterm", 11),  # a graceful stop: checkpoint 11, exit 143
]
TIME_FIELDS = ("time", "wall_time", "examples_per_sec")
# A bare environment (no inherited TF_* settings), on the CPU as the rest of the suite.
MINIMAL_ENV = {
    "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
    "PATH": "/usr/bin:/bin",
    "CUDA_VISIBLE_DEVICES": "",
}


def crash(how, step, *args):
    return zygote.run(
        [sys.executable, str(ROOT / "tests" / "crash_run.py"), how, str(step), "--", *args],
        cwd=ROOT,
        env=MINIMAL_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    base = tmp_path_factory.mktemp("resume")
    reference = zygote.Process(
        [sys.executable, "-m", "stagegan", "train", "--run-dir", str(base / "ref"), *CONFIG],
        cwd=ROOT,
        env=MINIMAL_ENV,
        stdout=zygote.DEVNULL,
        stderr=zygote.PIPE,
        text=True,
    )
    run = base / "run"
    results = []
    for how, step in KILLS:
        args = (
            ["train", "--run-dir", str(run), *CONFIG]
            if not results
            else ["train", "--resume", str(run)]
        )
        results.append(crash(how, step, *args))
    results.append(stagegan("train", "--resume", str(run)))
    _, errors = reference.communicate(timeout=300)
    assert reference.returncode == 0, errors
    return base / "ref", run, results


tensors = read_checkpoint


def records(path, drop=TIME_FIELDS):
    lines = path.read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in lines]


def test_each_kill_stopped_the_process_where_asked(chain):
    _, run, results = chain
    codes = [r.returncode for r in results]
    assert codes == [-9, -9, -9, -9, 143, 0], [r.stderr[-2000:] for r in results]
    assert "SIGTERM at step 11: checkpoint" in results[4].stdout
    assert f"continue with: python -m stagegan train --resume {run}" in results[4].stdout
    assert "Traceback" not in results[4].stderr + results[5].stderr


def test_every_resume_started_from_the_last_complete_checkpoint(chain):
    _, run, _ = chain
    resumes = records(run / "resume.jsonl", drop=())
    assert [r["step"] for r in resumes] == [3, 4, 6, 8, 11]
    assert [r["checkpoint"] for r in resumes][-1] == "ckpt-00000011"
    # The files of checkpoint 10, written but never listed, were removed before going on.
    assert resumes[3]["removed"] == ["ckpt-00000010.data-00000-of-00001", "ckpt-00000010.index"]
    assert all(r["changes"] == {} and r["superseded"] == [] for r in resumes)


def test_killed_run_ends_bit_identical_to_uninterrupted_run(chain):
    reference, run, _ = chain
    for step in (3, 7, 12):  # stage ends: written by different processes in the two runs
        name = f"checkpoints/ckpt-{step:08d}"
        expected, actual = tensors(reference / name), tensors(run / name)
        assert sorted(actual) == sorted(expected)
        assert len(expected) > 40  # weights, both optimizers' slots, EMA, random streams
        assert any("discriminator:hidden0:u" in key for key in expected)  # spectral norm state
        for key, value in expected.items():
            np.testing.assert_array_equal(actual[key], value, err_msg=f"{name}: {key}")


def test_logs_and_samples_read_as_one_uninterrupted_run(chain):
    reference, run, _ = chain
    assert records(run / "metrics.jsonl") == records(reference / "metrics.jsonl")
    manifest = "samples/manifest.jsonl"
    assert records(run / manifest) == records(reference / manifest)
    for record in records(reference / manifest):
        name = f"samples/{record['file']}"
        assert (run / name).read_bytes() == (reference / name).read_bytes(), name


def test_no_leftovers_and_index_matches_files(chain):
    _, run, _ = chain
    store = CheckpointStore(run / "checkpoints", None, 1)
    listed = {e["prefix"] for e in store.entries()}
    assert [e["step"] for e in store.entries()] == [3, 7, 11, 12]
    for path in (run / "checkpoints").iterdir():
        if path.name != "index.json":
            assert path.name.split(".")[0] in listed, path.name
    assert all(store.verify(e) is None for e in store.entries())


# In process: the pieces -------------------------------------------------------------------

TOY = toy_config(
    [
        {"name": "d", "steps": 3, "updates": [D]},
        {"name": "joint", "steps": 4, "mode": "simultaneous", "updates": [D, G]},
    ],
    "toy",
    3,
    deterministic=True,
    optimizers={"g": {"type": "adam", "learning_rate": 0.01}, "d": "sgd"},
    checkpoint={"every": 2, "keep": 5},
    log={"every": 1, "tensorboard": False},
    samples=None,
)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """A finished 7-step toy run folder, made in process; tests copy it."""
    return finished_run(tmp_path_factory.mktemp("toy") / "run", TOY)


def copy_run(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


def test_safe_changes_pass_and_others_are_refused():
    old = parse_config(TOY)
    change = lambda **raw: check_changes(old, parse_config({**TOY, **raw}), step=4)
    assert change() == {}
    lr = {**TOY["optimizers"], "g": {"type": "adam", "learning_rate": 0.002}}
    assert change(optimizers=lr) == {"optimizers.g.learning_rate": (0.01, 0.002)}
    assert change(log={"every": 5, "tensorboard": False}) == {"log.every": (1, 5)}
    later = [TOY["stages"][0], {**TOY["stages"][1], "steps": 9}]
    # At step 4 the joint stage (steps 3..6) has run 1 step: it may grow, not shrink below 2.
    assert change(stages=later) == {"stages[1].steps": (4, 9)}
    assert check_changes(old, parse_config({**TOY, "stages": later}), step=3) == {
        "stages[1].steps": (4, 9)  # at step 3 the joint stage is not yet reached
    }
    with pytest.raises(ConfigError, match=r"stages\[1\]\.steps: cannot be below 2 on resume"):
        change(stages=[TOY["stages"][0], {**TOY["stages"][1], "steps": 1}])
    with pytest.raises(
        ConfigError,
        match=r"stages\[0\]\.steps: cannot change on resume: stage 'd' is finished and a later",
    ):
        change(stages=[{**TOY["stages"][0], "steps": 5}, TOY["stages"][1]])
    with pytest.raises(
        ConfigError, match=r"^batch_size: cannot change on resume \(safe to change: learning"
    ):
        change(batch_size=16)
    with pytest.raises(ConfigError, match=r"^optimizers\.d: cannot change"):
        change(optimizers={**TOY["optimizers"], "d": {"type": "adam"}})


def test_resume_rules_are_the_records_field_metadata():
    # The keys the earlier hand-written patterns allowed, field by field.
    assert set(resumable_keys()) == {
        "devices.towers",
        "devices.variables",
        "devices.strategy",
        "devices.jit",
        "checkpoint.every",
        "log.every",
        "log.histograms",
        "log.console",
        "samples.every",
        "eval.every",
        "eval.count",
        "eval.features",
        "eval.batch_size",
        "eval.metrics",
    }
    old = parse_config(TOY)
    change = lambda **raw: check_changes(old, parse_config({**TOY, **raw}), step=4)
    devices = {**TOY.get("devices", {}), "towers": ["/CPU:0", "/CPU:1"], "jit": True}
    assert set(change(devices=devices)) == {"devices.towers", "devices.jit"}
    assert set(change(eval={"every": 2, "count": 8})) == {"eval"}  # turned on
    for section, value in (
        ("devices", {**TOY.get("devices", {}), "mixed_precision": "bfloat16"}),
        ("log", {**TOY["log"], "tensorboard": True}),
        ("samples", {"every": 500, "count": 4}),
        ("guard", {"policy": "stop"}),
    ):
        with pytest.raises(ConfigError, match=r"cannot change on resume \(safe to change"):
            change(**{section: value})


def test_accepted_change_is_applied_and_recorded(toy_run, tmp_path):
    import logging

    run_dir = copy_run(toy_run, tmp_path / "run")
    plan = plan_resume(run_dir, ["optimizers.g.learning_rate=0.5", "log.every=3"], checkpoint="4")
    trainer = Trainer(plan.config)
    restore(trainer, plan)
    assert trainer.step_count == 4
    assert float(trainer.optimizers["g"].learning_rate) == 0.5  # not the checkpoint's 0.01
    commit(plan, logging.getLogger("test"))
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["optimizers"]["g"]["learning_rate"] == 0.5 and saved["log"]["every"] == 3
    record = json.loads((run_dir / "resume.jsonl").read_text())
    assert record["changes"] == {
        "optimizers.g.learning_rate": {"from": 0.01, "to": 0.5},
        "log.every": {"from": 1, "to": 3},
    }
    # Resuming from 4 moved the later checkpoints aside and dropped the later log records.
    assert record["superseded"] == ["ckpt-00000006", "ckpt-00000007"]
    assert sorted(p.name for p in (run_dir / "checkpoints" / "superseded").iterdir()) == [
        "ckpt-00000006.data-00000-of-00001",
        "ckpt-00000006.index",
        "ckpt-00000007.data-00000-of-00001",
        "ckpt-00000007.index",
    ]
    assert [r["step"] for r in records(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]


def test_resume_restores_optimizer_slots_rngs_and_counters(toy_run):
    plan = plan_resume(toy_run, checkpoint=str(toy_run / "checkpoints" / "ckpt-00000006.index"))
    assert plan.step == 6 and plan.checkpoint_key == "--checkpoint"  # a path works as a step
    trainer = Trainer(plan.config)
    restore(trainer, plan)
    expected = tensors(toy_run / "checkpoints" / "ckpt-00000006")
    assert int(trainer.optimizers["g"].iterations) == 3  # joint steps 4, 5, 6
    assert int(trainer.optimizers["d"].iterations) == 6
    state = trainer.rngs.noise.state.numpy()
    np.testing.assert_array_equal(
        state, expected["rng_noise/_state_var/.ATTRIBUTES/VARIABLE_VALUE"]
    )
    moments = [v for v in trainer.optimizers["g"].variables if "momentum" in v.path]
    assert moments and any(np.abs(v.numpy()).sum() > 0 for v in moments)


def test_a_run_restored_to_sample_holds_its_weights_and_no_optimizer_slots(toy_run):
    """`restore_run` (sample, eval, export) reads the networks and leaves Adam's slots, twice
    the networks' memory, unmade."""
    from stagegan.run.reading import restore_run

    trainer, path = restore_run(toy_run)
    assert path.endswith("ckpt-00000007")
    expected = tensors(path)
    for variable in trainer.variables:
        np.testing.assert_array_equal(variable.numpy(), expected[variable_key(variable.path)])
    adam = trainer.optimizers["g"]
    assert int(adam.iterations) == 4  # the joint stage's steps: what exists is read
    assert len(adam.variables) == 2  # the step count and rate: no slots
    slots = [key for key in expected if key.startswith("optimizer_g/_variables/")]
    assert len(slots) == 2 * len(trainer.task.generator.trainable_variables)


def test_truncated_latest_checkpoint_is_named_and_never_skipped_silently(toy_run, tmp_path):
    run_dir = copy_run(toy_run, tmp_path / "run")
    data = run_dir / "checkpoints" / "ckpt-00000007.data-00000-of-00001"
    size = data.stat().st_size
    data.write_bytes(data.read_bytes()[:100])
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError) as error:
        plan_resume(run_dir)
    assert str(error.value) == (
        f"--resume: the latest checkpoint {run_dir}/checkpoints/ckpt-00000007 is damaged: "
        f"ckpt-00000007.data-00000-of-00001 is 100 bytes, {size} when written (truncated or "
        "corrupt); to use the previous good one, pass --checkpoint 6"
    )
    assert plan_resume(run_dir, checkpoint="6").step == 6  # only when asked
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_corrupt_bytes_of_same_size_fail_the_restore(toy_run, tmp_path):
    run_dir = copy_run(toy_run, tmp_path / "run")
    data = run_dir / "checkpoints" / "ckpt-00000007.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    plan = plan_resume(run_dir)  # sizes match: only TensorFlow's checksums can tell
    with pytest.raises(ConfigError, match=r"^--resume: cannot restore .*ckpt-00000007: "):
        restore(Trainer(plan.config), plan)


def test_clean_up_removes_temp_folders_and_unlisted_files(toy_run, tmp_path):
    run_dir = copy_run(toy_run, tmp_path / "run")
    folder = run_dir / "checkpoints"
    (folder / "ckpt-00000009_temp").mkdir()
    (folder / "ckpt-00000009_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    (folder / "ckpt-00000008.index").write_bytes(b"half")
    store = CheckpointStore(folder, None, 1)
    assert store.clean_up() == ["ckpt-00000008.index", "ckpt-00000009_temp"]
    assert [e["step"] for e in store.entries()] == [2, 3, 4, 6, 7]
    assert all(store.verify(e) is None for e in store.entries())


def test_drop_records_after_keeps_earlier_and_skips_torn_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"ste')
    assert drop_records_after(path, 2) == [{"step": 3}]
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_resume_without_checkpoint_starts_from_step_zero(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(load_config("mog_ring").to_yaml())
    plan = plan_resume(run_dir)
    assert plan.entry is None and plan.step == 0


def test_tensorboard_drops_what_the_killed_process_wrote_after_the_checkpoint(tmp_path):
    import time

    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator

    from stagegan.runfolder.logs import tensorboard_session_start

    def write(steps, value):
        writer = tf.summary.create_file_writer(str(tmp_path))
        with writer.as_default():
            for step in steps:
                tf.summary.scalar("loss", value, step=step)
        writer.close()

    tensorboard_session_start(tmp_path, 0)  # as a new run does
    write(range(1, 7), 1.0)  # the killed process got to step 6; its checkpoint was at 3
    time.sleep(1.1)  # event file names hold the second they were made
    tensorboard_session_start(tmp_path, 4)  # as `resume.commit` does
    write(range(4, 6), 2.0)  # the resumed process
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    seen = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events.Tensors("loss")]
    assert seen == [(1, 1.0), (2, 1.0), (3, 1.0), (4, 2.0), (5, 2.0)]


def test_ctrl_c_finishes_the_step_writes_a_checkpoint_and_says_how_to_resume(tmp_path, caplog):
    import logging
    import os
    import signal

    from stagegan.errors import Interrupted

    trainer = Trainer(parse_config({**TOY, "checkpoint": {"every": 0, "keep": 1}}))
    step = trainer.step

    def step_then_ctrl_c(position, with_gradients=False, check=True):
        metrics = step(position, with_gradients, check)
        if position.global_step == 4:  # mid joint stage, no checkpoint due
            os.kill(os.getpid(), signal.SIGINT)
        return metrics

    trainer.step = step_then_ctrl_c
    previous = signal.getsignal(signal.SIGINT)
    with caplog.at_level(logging.INFO, logger="stagegan"), pytest.raises(Interrupted) as stop:
        train(trainer, tmp_path)
    assert stop.value.status == 130 and trainer.step_count == 5
    assert signal.getsignal(signal.SIGINT) is previous  # handlers restored
    entries = CheckpointStore(tmp_path / "checkpoints", None, 1).entries()
    assert [(e["step"], e["tags"]) for e in entries] == [(3, ["stage_end:d"]), (5, ["interrupted"])]
    assert (
        f"SIGINT at step 5: checkpoint {tmp_path}/checkpoints/ckpt-00000005 written; "
        in caplog.text
    )
    assert f"continue with: python -m stagegan train --resume {tmp_path}" in caplog.text


def test_a_second_process_cannot_train_into_a_locked_run(tmp_path):
    import os

    from stagegan.runfolder.dirs import lock_run_dir

    held = lock_run_dir(tmp_path, "--resume")
    try:
        with pytest.raises(
            ConfigError, match=rf"in use by another stagegan process \(pid {os.getpid()}\)"
        ):
            lock_run_dir(tmp_path, "--resume")
    finally:
        held.close()
    lock_run_dir(tmp_path).close()  # free again once the holder is gone


def test_resuming_a_finished_run_does_nothing(toy_run, capsys):
    from stagegan.cli import main as cli

    before = sorted(p.name for p in toy_run.rglob("*"))
    assert cli.main(["train", "--resume", str(toy_run)]) == 0
    assert "already finished at step 7; nothing to do" in capsys.readouterr().out
    assert sorted(p.name for p in toy_run.rglob("*")) == before


# The crash chain on a streaming folder -----------------------------------------------------

# Mid-epoch (3 batches an epoch); a graceful stop is the main chain's.
FOLDER_KILLS = [("after-step", 5)]


@pytest.fixture(scope="module")
def folder_chain(tmp_path_factory):
    """A class-conditional run on a streamed folder (3 classes, 25 files, one unreadable),
    killed mid-epoch and resumed, beside the same run never interrupted."""
    base = tmp_path_factory.mktemp("folder_resume")
    rng = np.random.default_rng(0)
    for index in range(24):
        folder = base / "images" / "abc"[index % 3]
        folder.mkdir(parents=True, exist_ok=True)
        side = (28, 40)[index % 2]
        image = rng.integers(0, 256, (side, side + 4 * (index % 3), 1), np.uint8)
        (folder / f"{index}.png").write_bytes(tf.io.encode_png(image).numpy())
    (base / "images" / "b" / "broken.png").write_bytes(b"\x89PNG cut short")
    config = [
        "--config", "cdcgan_folder", "--set", f"data.path={base / 'images'}",
        "--set", "data.size=28", "--set", "data.cache=none", "--set", "batch_size=8",
        "--set", "model.latent_dim=4", "--set", "model.width=4",
        "--set", "model.batchnorm=false", "--set", "model.pack=2",
        "--set", "stages[0].steps=6", "--set", "stages[1].steps=4",
        "--set", "checkpoint={every: 2, keep: 10}", "--set", "samples=null",
        "--set", "log={every: 1, tensorboard: false}", "--set", "deterministic=true",
        # adaptive augmentation: p and its running sums must resume exactly too
        "--set", "augment={ops: [translation, cutout, xint, rotate, aniso], p: 0.3, "
        "target: 0.0, speed: 64, interval: 3}",
    ]  # fmt: skip
    env = MINIMAL_ENV
    reference = zygote.Process(
        [sys.executable, "-m", "stagegan", "train", "--run-dir", str(base / "ref"), *config],
        cwd=ROOT, env=env, stdout=zygote.PIPE, stderr=zygote.PIPE, text=True,
    )  # fmt: skip
    run, results = base / "run", []
    for how, step in FOLDER_KILLS:
        args = ["train", "--resume", str(run)] if results else ["train", "--run-dir", str(run)]
        results.append(crash(how, step, *args, *([] if results else config)))
    results.append(stagegan("train", "--resume", str(run)))
    output, errors = reference.communicate(timeout=300)
    assert reference.returncode == 0, errors
    return base / "ref", run, results, output + errors


def test_a_streamed_folder_resumes_bit_identical(folder_chain):
    reference, run, results, reference_output = folder_chain
    assert [r.returncode for r in results] == [-9, 0], [r.stderr[-2000:] for r in results]
    assert [r["step"] for r in records(run / "resume.jsonl", drop=())] == [4]
    assert records(run / "metrics.jsonl") == records(reference / "metrics.jsonl")
    p = [r["augment/p"] for r in records(reference / "metrics.jsonl")]
    assert len(set(p)) > 2, p  # the adaptive p moved during the run
    for step in (6, 10):
        name = f"checkpoints/ckpt-{step:08d}"
        keys = tf.train.load_checkpoint(str(reference / name)).get_variable_to_shape_map()
        assert any(key.startswith("data_iterator") for key in keys)  # a variant: not read
        expected, actual = (
            read_checkpoint(path, skip="data_iterator") for path in (reference / name, run / name)
        )
        assert sorted(actual) == sorted(expected)
        assert len(expected) > 40
        for key, value in expected.items():
            np.testing.assert_array_equal(actual[key], value, err_msg=f"{name}: {key}")
    # The unreadable file was skipped with one warning naming it, never a traceback.
    assert reference_output.count("skipped unreadable image") == 1
    assert "broken.png" in reference_output and "Traceback" not in reference_output
