"""Shared helpers of the CLI tests: a tiny run's overrides, a real `python -m stagegan`
subprocess, and the one-line-error check."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--set",
    "stages=three_phase",
    "--set",
    "batch_size=32",
    "--set",
    "model={latent_dim: 4, hidden: 16, layers: 1}",
    "--set",
    "stages[0].steps=3",
    "--set",
    "stages[1].steps=4",
    "--set",
    "stages[1].updates[0].repeat=2",
    "--set",
    "stages[2].steps=5",
    "--set",
    "checkpoint={every: 2, keep: 1}",
    "--set",
    "log.every=2",
    "--set",
    "log.tensorboard=false",  # TensorBoard output: tests/test_outputs.py
]


def stagegan(*args, cwd=ROOT, env=None):
    environ = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "stagegan", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def inprocess(*args):
    """`stagegan ARGS` run in this process (no TensorFlow import to pay): where a test needs
    no fresh process, only the command's result."""
    import contextlib
    import io
    import types

    from stagegan.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main([str(a) for a in args])
    return types.SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def assert_user_error(result, *words):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("stagegan: error: "), lines[0]
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
