"""Shared helpers of the CLI tests: a tiny run's overrides, a real `python -m stagegan`
process, and the one-line-error check."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import zygote

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = f"{ROOT}:{ROOT / 'tests'}"  # stagegan and the tests' modules, in any process
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


def stagegan(*args, cwd=ROOT, env=None, fresh=False):
    """`python -m stagegan ARGS` in a real process: forked from tests/zygote.py's server, which
    has TensorFlow imported already, or with `fresh` a new interpreter (`subprocess`)."""
    environ = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    return (subprocess.run if fresh else zygote.run)(
        [sys.executable, "-m", "stagegan", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def start_workers(*args, cwd, env=None, count=2):
    """`stagegan train ARGS` as `count` multi-worker processes on 127.0.0.1, started as `launch
    --workers` starts them (its `TF_CONFIG` per process, `devices.strategy=multi_worker` unless
    they resume) but forked from tests/zygote.py's server; `launch` itself:
    tests/test_multi_worker.py. The running processes (`zygote.Process`), chief first."""
    from stagegan.cli.launch import free_ports, tf_config

    addresses = [f"127.0.0.1:{port}" for port in free_ports(count)]
    command = [sys.executable, "-m", "stagegan", "train", *map(str, args)]
    if "--resume" not in command:
        command += ["--set", "devices.strategy=multi_worker"]
    environ = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    return [
        zygote.Process(
            command,
            cwd=cwd,
            env={**environ, "TF_CONFIG": tf_config(addresses, index)},
            stdout=zygote.PIPE,
            stderr=zygote.PIPE,
            text=True,
        )
        for index in range(count)
    ]


def workers(*args, cwd, env=None, count=2):
    """`start_workers`, finished: their `subprocess.CompletedProcess`es, chief first."""
    processes = start_workers(*args, cwd=cwd, env=env, count=count)
    try:
        return [
            subprocess.CompletedProcess(p.args, p.wait(timeout=300), *p.communicate())
            for p in processes
        ]
    finally:
        for process in processes:
            process.kill()


def inprocess(*args):
    """`stagegan ARGS` run in this process (no TensorFlow import to pay): where a test needs
    no fresh process, only the command's result."""
    import io
    import types

    from stagegan.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main([str(a) for a in args])
    return types.SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def launch(*args, cwd, env=None):
    """`stagegan launch ARGS` run in this process, in `cwd` with `env` added to the
    environment, its processes forked from tests/zygote.py's server (`zygote.Popen`): real
    processes on 127.0.0.1, as `launch` starts them, without a TensorFlow import each. The
    launcher's own checks of its arguments: tests/test_multi_worker.py. Returns the status
    and what the launcher and its processes wrote (`stdout`, `stderr`), as `stagegan()`."""
    import tempfile
    import types

    import pytest

    from stagegan.cli import launch as launch_module
    from stagegan.cli import main as cli

    patched = types.SimpleNamespace(**{**vars(subprocess), "Popen": zygote.Popen})
    with contextlib.ExitStack() as stack:
        streams = [
            stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8")) for _ in range(2)
        ]
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setattr(launch_module, "subprocess", patched)
        for name, value in {"PYTHONPATH": PYTHONPATH, **(env or {})}.items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        with (
            _descriptors_to(streams),  # the chief's: it writes to 1 and 2
            contextlib.redirect_stdout(streams[0]),  # the launcher's own lines
            contextlib.redirect_stderr(streams[1]),
        ):
            status = cli.main(["launch", *map(str, args)])
        out, err = [(s.flush(), s.seek(0), s.read())[2] for s in streams]
    return types.SimpleNamespace(returncode=status, stdout=out, stderr=err)


@contextlib.contextmanager
def _descriptors_to(streams):
    """Descriptors 1 and 2 pointed at the files `streams`, restored whatever happens."""
    saved = [os.dup(1), os.dup(2)]
    try:
        for fd, stream in enumerate(streams, start=1):
            os.dup2(stream.fileno(), fd)
        yield
    finally:
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)


def assert_user_error(result, *words):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("stagegan: error: "), lines[0]
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
