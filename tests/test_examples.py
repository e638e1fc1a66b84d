"""The worked examples under examples/, through the CLI, run from another directory: the
config's folder is on the import path, so `swissroll:SwissRoll` and `unet_generator:generator`
resolve without PYTHONPATH."""

import os
import subprocess
import sys
from pathlib import Path

import tensorflow as tf

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def stagegan(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "stagegan", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_custom_task_trains_with_lazy_r1_and_ema(tmp_path):
    plan = stagegan("plan", "--config", str(EXAMPLES / "swissroll.yaml"), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    # Two Dense(64) layers and an output layer: 3 kernels and 3 biases.
    assert "ema: generator/ (6 weights), decay 0.99 from step 500" in plan.stdout
    run_dir = tmp_path / "run"
    result = stagegan(
        "train",
        "--config",
        str(EXAMPLES / "swissroll.yaml"),
        "--run-dir",
        str(run_dir),
        "--set",
        "stages[0].steps=2",
        "--set",
        "stages[1].steps=8",
        "--set",
        "ema.start=4",
        "--set",
        "log.every=1",
        "--set",
        "log.tensorboard=false",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("[alternating]")]
    assert len(lines) == 8
    assert all("g/g_loss=" in line and "d/d_loss=" in line for line in lines)
    # R1 is lazy (every: 4): it runs, and is logged, on stage steps 0 and 4 only.
    with_r1 = [i for i, line in enumerate(lines) if "d_r1/r1=" in line]
    assert with_r1 == [0, 4]
    final = run_dir / "checkpoints" / "ckpt-00000010"
    keys = {name for name, _ in tf.train.list_variables(str(final))}
    assert "ema:generator:hidden0:kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys
    ema = tf.train.load_variable(str(final), "ema:generator:out:kernel/.ATTRIBUTES/VARIABLE_VALUE")
    live = tf.train.load_variable(str(final), "generator:out:kernel/.ATTRIBUTES/VARIABLE_VALUE")
    assert ema.shape == live.shape and (ema != live).any()


def test_custom_generator_in_a_builtin_task(tmp_path):
    result = stagegan("plan", "--config", str(EXAMPLES / "completion_unet.yaml"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # The U-Net by hand: e1 3*3*4*16+16, e2 3*3*16*32+32, m1 and m2 3*3*32*32+32 each,
    # d1 4*4*32*16+16, out 3*3*32*3+3 (after the skip connection's 16+16 channels).
    assert "generator/ (12 variables, 32,803 parameters)" in result.stdout
    assert "ema:" not in result.stdout  # the example keeps no average
    run_dir = tmp_path / "run"
    result = stagegan(
        "train",
        "--config",
        str(EXAMPLES / "completion_unet.yaml"),
        "--run-dir",
        str(run_dir),
        "--set",
        "data={source: shapes, size: 16, count: 64}",
        "--set",
        "model.width=4",
        "--set",
        "batch_size=4",
        *[f"--set=stages[{i}].steps=1" for i in range(3)],
        "--set",
        "log.tensorboard=false",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    keys = {
        name for name, _ in tf.train.list_variables(str(run_dir / "checkpoints" / "ckpt-00000003"))
    }
    assert "generator:e1:kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert "generator:m2:kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys
