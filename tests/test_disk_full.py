"""A full disk while writing a checkpoint or a sample must not harm the last good checkpoint:
the run stops with one clear error, and resuming from that checkpoint (after freeing space)
ends exactly where the uninterrupted run ends.

Two ways to fill the disk: an OSError injected into the writes (everywhere), and a real tiny
tmpfs (where this process may mount one: root on Linux)."""

import errno
import os
import shutil
import subprocess
import uuid

import numpy as np
import pytest
import tensorflow as tf
from toytask import two_stage_config

from stagegan.config.schema import parse_config
from stagegan.errors import WriteError
from stagegan.run.resume import commit, plan_resume, restore
from stagegan.runfolder.checkpoints import CheckpointStore
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer

RAW = two_stage_config("full", 5, 3, 3, deterministic=True, samples={"every": 2})
FULL = "No space left on device"


def start(run_dir, raw=RAW):
    run_dir.mkdir(parents=True, exist_ok=True)
    config = parse_config(raw)
    (run_dir / "config.yaml").write_text(config.to_yaml())
    return Trainer(config)


def finish(run_dir):
    """Resume the run (space freed) to its end; returns its final weights."""
    import logging

    plan = plan_resume(run_dir)
    trainer = Trainer(plan.config)
    restore(trainer, plan)
    commit(plan, logging.getLogger("test"))
    train(trainer, run_dir)
    return {v.path: v.numpy() for v in trainer.variables}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full") / "run"
    trainer = start(run_dir)
    train(trainer, run_dir)
    return {v.path: v.numpy() for v in trainer.variables}


def assert_same(weights, expected):
    assert sorted(weights) == sorted(expected)
    for path, value in expected.items():
        np.testing.assert_array_equal(weights[path], value, err_msg=path)


def test_checkpoint_write_fails_half_way(tmp_path, monkeypatch, uninterrupted):
    write = tf.train.Checkpoint.write

    def half_then_full(self, prefix, options=None):
        if not prefix.endswith("ckpt-00000004"):
            return write(self, prefix, options)
        write(self, prefix, options)  # then the disk "fills": the data file is cut short
        data = f"{prefix}.data-00000-of-00001"
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 2)
        raise OSError(errno.ENOSPC, FULL, data)

    run_dir = tmp_path / "run"
    trainer = start(run_dir)
    monkeypatch.setattr(tf.train.Checkpoint, "write", half_then_full)
    with pytest.raises(WriteError) as error:
        train(trainer, run_dir)
    assert str(error.value) == (
        f"checkpoint: cannot write checkpoint {run_dir}/checkpoints/ckpt-00000004: {FULL} "
        "(the last good checkpoint is ckpt-00000003, unharmed)"
    )
    store = CheckpointStore(run_dir / "checkpoints", None, 1)
    assert [e["step"] for e in store.entries()] == [1, 2, 3]
    assert not list((run_dir / "checkpoints").glob("ckpt-00000004*"))  # no half checkpoint
    monkeypatch.undo()
    assert_same(finish(run_dir), uninterrupted)


def test_sample_write_fails(tmp_path, monkeypatch, uninterrupted):
    replace = os.replace

    def full_for_pictures(source, target, *args, **kwargs):
        if str(source).endswith(".png.tmp") and "step00000004" in str(target):
            raise OSError(errno.ENOSPC, FULL)
        return replace(source, target, *args, **kwargs)

    run_dir = tmp_path / "run"
    trainer = start(run_dir)
    monkeypatch.setattr(os, "replace", full_for_pictures)  # the one atomic write (rundirs)
    with pytest.raises(WriteError) as error:
        train(trainer, run_dir)
    picture = run_dir / "samples" / "step00000004-joint.png"
    assert str(error.value) == (
        f"{picture}: cannot write: {FULL} (the last good checkpoint is ckpt-00000003; free "
        f"space or fix permissions, then continue with: python -m stagegan train --resume "
        f"{run_dir})"
    )
    assert not list((run_dir / "samples").glob("*.tmp"))  # the half-written file is gone
    monkeypatch.undo()
    assert_same(finish(run_dir), uninterrupted)


def mount_tmpfs(folder, size):
    folder.mkdir()
    try:
        done = subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={size}",
                f"stagegan-{uuid.uuid4().hex[:8]}",
                str(folder),
            ],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_real_full_disk(tmp_path, uninterrupted):
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "72k"):
        pytest.skip("cannot mount a tmpfs here (needs root on Linux)")
    try:
        run_dir = disk / "run"
        trainer = start(
            run_dir, {**RAW, "stages": [RAW["stages"][0], {**RAW["stages"][1], "steps": 40}]}
        )
        with pytest.raises(WriteError, match=FULL):
            train(trainer, run_dir)
        store = CheckpointStore(run_dir / "checkpoints", None, 1)
        entries = store.entries()
        assert entries and all(store.verify(e) is None for e in entries)
        moved = tmp_path / "moved"  # "free space": move the run to a roomier disk
        shutil.copytree(run_dir, moved)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, timeout=30)
    plan = plan_resume(moved)
    resumed = Trainer(plan.config)
    restore(resumed, plan)  # the latest listed checkpoint is whole and restores
    assert resumed.step_count == entries[-1]["step"] > 0
