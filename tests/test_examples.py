"""The worked examples under examples/, through the CLI (in this process), run from another
directory: the config's folder goes on the import path, so `swissroll:SwissRoll` and
`unet_generator:generator` resolve without PYTHONPATH."""

import os
import sys
from pathlib import Path

import pytest
from clihelp import inprocess
from toytask import read_checkpoint, variable_key

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def elsewhere(tmp_path, monkeypatch):
    """Run from a folder of no interest, with neither examples/ nor the working directory on
    the import path (`cli.load` must put the config's folder there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    for module in ("swissroll", "unet_generator"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert not any(Path(p, "swissroll.py").exists() for p in sys.path if p)


def stagegan(*args, cwd):
    assert Path.cwd() == cwd
    return inprocess(*args)


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
    assert all(" g_loss=" in line and " d_loss=" in line for line in lines)
    # R1 is lazy (every: 4): it runs, and is logged, on stage steps 0 and 4 only.
    with_r1 = [i for i, line in enumerate(lines) if " r1=" in line]
    assert with_r1 == [0, 4]
    final = run_dir / "checkpoints" / "ckpt-00000010"
    values = read_checkpoint(final)
    assert variable_key("ema:generator/hidden0/kernel") in values
    ema = values[variable_key("ema:generator/out/kernel")]
    live = values[variable_key("generator/out/kernel")]
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
    keys = read_checkpoint(run_dir / "checkpoints" / "ckpt-00000003")
    assert variable_key("generator/e1/kernel") in keys
    assert variable_key("generator/m2/kernel") in keys
