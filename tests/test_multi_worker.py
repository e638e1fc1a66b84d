"""Multi-worker training with real worker processes on 127.0.0.1: `python -m stagegan launch`
against the plain single-device reference loop, chief-only outputs, resume, and a worker
killed mid-run."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
import zygote
from clihelp import ROOT, stagegan, start_workers, workers
from tensorflow import errors as tf_errors
from test_training import BATCH, LR_D, LR_G, SEED, reference_run
from toytask import ALL_KINDS, optimizers, read_checkpoint, snapshot, toy_config, variable_key

from stagegan.cli import launch as launch_module
from stagegan.cli import main as cli
from stagegan.config.schema import parse_config
from stagegan.run.reading import find_checkpoint
from stagegan.training.trainer import Trainer

RAW = toy_config(
    ALL_KINDS,
    "mw",
    SEED,
    BATCH,
    optimizers=optimizers("sgd", LR_G, LR_D),
    checkpoint={"every": 2, "keep": 10},
    log={"every": 1, "progress": "lines"},
    samples={"every": 5, "count": 4},
)


def weights(prefix, paths):
    values = read_checkpoint(prefix)
    return {path: values[variable_key(path)] for path in paths}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """One 2-worker run through every kind of stage; worker temp folders in its own TMPDIR."""
    folder = tmp_path_factory.mktemp("mw")
    (folder / "run.yaml").write_text(yaml.safe_dump(RAW))
    (folder / "tmp").mkdir()
    run_dir = folder / "run"
    env = {"TMPDIR": str(folder / "tmp")}
    # The launcher forked, its workers fresh interpreters (each its own hash seed): the one
    # multi-worker run whose collectives are built by processes that share nothing.
    args = ["launch", "--workers", "2", "--config", "run.yaml", "--run-dir", str(run_dir)]
    result = stagegan(*args, cwd=folder, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    initial = snapshot(Trainer(parse_config(RAW)))  # the same seed builds the same weights
    return folder, run_dir, result, initial


def test_two_workers_match_the_single_device_reference(launched):
    _, run_dir, _, initial = launched
    final = weights(find_checkpoint(run_dir), initial)
    expected = reference_run(initial)
    diff = max(float(np.max(np.abs(final[p] - expected[p]))) for p in expected)
    moved = max(float(np.max(np.abs(final[p] - initial[p]))) for p in expected)
    print(f"multi_worker x2: max |stagegan - reference| = {diff:.3g}")
    assert moved > 1e-2 and diff <= 1e-5


def test_only_the_chief_writes(launched):
    folder, run_dir, result, _ = launched
    assert sorted(p.name for p in folder.iterdir()) == ["run", "run.yaml", "tmp"]
    assert list((folder / "tmp").iterdir()) == []  # the workers' checkpoint folders are gone
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["devices"]["strategy"] == "multi_worker"
    steps = [json.loads(line)["step"] for line in open(run_dir / "metrics.jsonl")]
    assert steps == list(range(1, 11))  # one record per step: written once, by the chief
    manifest = (run_dir / "samples" / "manifest.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in manifest] == [2, 4, 5, 7, 10]
    # Worker 1 logs warnings only: no per-step lines of its own.
    assert not [line for line in result.stdout.splitlines() if line.startswith("[worker 1] [")]


def test_no_native_log_lines_from_any_worker(launched):
    """TensorFlow's, gRPC's and the coordination service's own lines (about 30 in a 2-worker
    launch) stay off the output of every worker; stagegan's lines stay."""
    _, _, result, _ = launched
    native = re.compile(r"^(\[worker \d+\] )?([IWEF]\d{4} |WARNING: All log messages|To enable)")
    output = (result.stdout + result.stderr).splitlines()
    assert [line for line in output if native.match(line)] == []
    assert result.stderr.strip() == ""
    assert any(line.startswith("[joint] step 10/10") for line in output)


def test_resume_from_an_earlier_checkpoint_gives_the_same_weights(launched, tmp_path, monkeypatch):
    folder, run_dir, _, initial = launched
    before = weights(find_checkpoint(run_dir), initial)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(run_dir), str(copy)], check=True)
    args = ["--resume", str(copy), "--checkpoint", "4"]
    # `launch --workers 2 --resume` checks the run and starts 2 workers with train's
    # arguments as they are; the workers are started below as it starts them.
    started = []
    monkeypatch.setattr(launch_module, "launch", lambda *a: started.append(a[:2]) or 0)
    assert cli.main(["launch", "--workers", "2", *args]) == 0
    assert started == [(2, args)]
    results = workers(*args, cwd=folder, env={"TMPDIR": str(folder / "tmp")})
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-3000:] for r in results]
    after = weights(find_checkpoint(copy), initial)
    for path in before:
        np.testing.assert_allclose(after[path], before[path], atol=1e-6, err_msg=path)
    resumes = [json.loads(line) for line in open(copy / "resume.jsonl")]
    assert [r["step"] for r in resumes] == [4]


@pytest.mark.parametrize(
    "args, key",
    [
        (["--workers", "2", "--set", "batch_size=-3"], "batch_size"),
        (["--workers", "0"], "--workers"),
        # the train plan, checked once by launch as train checks it
        (["--workers", "2", "--init-from", "nowhere"], "init.run"),
        (["--workers", "2", "--resume", "nowhere", "--config", "mog_ring"], "--config"),
        # each worker would refuse it: once, here
        (["--workers", "2", "--set", "stages[0].batch_size=3"], "stages[0].batch_size"),
        (["--workers", "2", "--set", "log.every=7"], "STAGEGAN_COLLECTIVE_TIMEOUT"),
    ],
)
def test_launch_checks_its_arguments_before_starting_workers(
    args, key, tmp_path, capfd, monkeypatch
):
    if key == "STAGEGAN_COLLECTIVE_TIMEOUT":
        monkeypatch.setenv(key, "soon")
    os.chdir(tmp_path)
    try:
        status = cli.main(["launch", *args])
    finally:
        os.chdir(ROOT)
    err = capfd.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith(f"stagegan: error: {key}")
    assert list(tmp_path.iterdir()) == []  # no run folder reserved, no worker started


def test_a_killed_worker_stops_the_chief_with_one_line(tmp_path):
    """No launcher: the surviving worker must fail by itself, as on a real cluster."""
    raw = {**RAW, "stages": [{**ALL_KINDS[-1], "steps": 1_000_000}], "samples": None}
    raw["log"] = {"every": 50, "progress": "lines"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    running = start_workers("--config", "run.yaml", "--run-dir", tmp_path / "run", cwd=tmp_path)
    chief, worker = running
    try:
        metrics = tmp_path / "run" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert chief.poll() is None and time.monotonic() < deadline, "no training happened"
            time.sleep(0.2)
        worker.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = chief.communicate(timeout=120)  # bounded: never a hang
        waited = time.monotonic() - killed
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.communicate()
    print(f"the chief stopped {waited:.1f} s after the kill")
    assert chief.returncode == 4
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("stagegan: error: multi_worker: lost contact with worker 1"), last
    assert "the last checkpoint is step " in last and "Traceback" not in stderr
    assert f"--resume {tmp_path / 'run'} " in last


@pytest.mark.parametrize(
    "message, who",
    [
        (  # a collective's call to the dead peer failed
            "Collective ops is aborted by: failed to connect to all addresses\n"
            "Additional GRPC error information from remote target /job:worker/replica:0/task:1"
            " while calling /tensorflow.WorkerService/RecvBuf:\n:{...}",
            "worker 1 (/job:worker/replica:0/task:1)",
        ),
        (  # the coordination service missed its heartbeats first (once in five full suites)
            "Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped"
            " sending heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have crashed. Check"
            " the task logs for an earlier error to debug further.",
            "worker 1 (/job:worker/replica:0/task:1)",
        ),
        ("Error reported from /job:worker/task:3: reset", "worker 3 (/job:worker/task:3)"),
        ("Socket closed", "a worker"),
    ],
)
def test_the_lost_peer_is_named_from_either_of_tensorflows_errors(message, who):
    from stagegan.training.watchdogs import describe_peer_error

    line = describe_peer_error(tf_errors.UnavailableError(None, None, message))
    assert line.startswith(f"lost contact with {who}: ") and "\n" not in line, line


def test_sample_from_a_multi_worker_run_needs_no_cluster(launched, capfd, tmp_path):
    _, run_dir, _, _ = launched
    output = tmp_path / "samples.npy"
    assert "TF_CONFIG" not in os.environ
    assert cli.main(["sample", "--run", str(run_dir), "--num", "6", "--output", str(output)]) == 0
    capfd.readouterr()
    assert np.load(output).shape == (6, 2)


def test_a_step_s_deadline_follows_the_steps_before_within_bounds():
    """At least the timeout T, three times the median step time, at most 3 T; a patient step
    (after extra work somewhere) gets 3 T; a step function's first run is not watched."""
    from stagegan.training.watchdogs import PeerDeadline

    deadline = PeerDeadline(2.0, None)
    deadline.step_started(1)
    assert deadline.watch[2] == 2.0  # no history: T
    deadline.times.extend([1.0, 1.2, 9.0])  # median 1.2
    deadline.step_started(5)
    assert deadline.watch[0] == 5 and deadline.watch[2] == pytest.approx(3.6)
    deadline.step_started(6, patient=True)
    assert deadline.watch[2] == 6.0
    deadline.times.extend([5.0] * 4)
    deadline.step_started(7)
    assert deadline.watch[2] == 6.0  # 15 s capped at 3 T, inside TensorFlow's 4 T
    deadline.step_started(8, watched=False)
    assert deadline.watch is None
    deadline.step_finished()
    assert len(deadline.times) == 8


WAITS = """
import sys
import time
from stagegan.cli.main import import_tensorflow
import_tensorflow()  # as the CLI does: descriptor 2 goes to /dev/null
from stagegan.training import watchdogs
from stagegan.training.watchdogs import PeerDeadline
watchdogs.TEMPORARY.append(sys.argv[1])  # a worker's temporary run folder: removed on the way out
line = lambda number, waited, newest: f"step {number} waited {waited >= 0.5}; {newest}"
with PeerDeadline(0.5, line, "the last checkpoint is step 10") as d:
    d.step_started(12)
    time.sleep(30)
"""


def test_a_step_past_its_deadline_ends_the_process_with_one_line(tmp_path):
    folder = tmp_path / "stagegan-worker-x"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "ckpt-1.index").write_bytes(b"0" * 100)
    began = time.monotonic()
    result = zygote.run(
        [sys.executable, "-c", WAITS, str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 4, result.stderr
    assert result.stderr.strip().splitlines() == [
        "stagegan: error: multi_worker: step 12 waited True; the last checkpoint is step 10"
    ], result.stderr
    assert time.monotonic() - began < 25
    assert not folder.exists()
