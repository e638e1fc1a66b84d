"""Parameter-server training with real processes on 127.0.0.1: a chief (`train`, TensorFlow's
`ClusterCoordinator`), workers and parameter servers (`serve`), through `launch --ps` and
started by hand as on several machines. Checked against the plain single-device reference
loop where the schedule is synchronous; a chief killed and restarted against the same
servers; a worker and a parameter server that die."""

import json
import os
import signal
import socket
import sys
import time

import clihelp
import numpy as np
import pytest
import yaml
import zygote
from clihelp import ROOT
from test_multi_worker import RAW, weights
from test_training import reference_run
from toytask import ALL_KINDS, max_diff, snapshot

from stagegan.cli import main as cli
from stagegan.cli.launch import free_ports, ps_tf_config
from stagegan.config.schema import parse_config
from stagegan.run.reading import find_checkpoint
from stagegan.training.trainer import Trainer

SERVERS = {"ps": 1, "worker": 1}


@pytest.fixture(scope="module")
def initial():
    return snapshot(Trainer(parse_config(RAW)))  # the same seed builds the same weights


@pytest.fixture(scope="module")
def expected(initial):
    return reference_run(initial)


def launch(folder, raw, ps, workers, name="run"):
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(raw))
    args = ["--ps", str(ps), "--workers", str(workers)]
    args += ["--config", f"{name}.yaml", "--run-dir", str(folder / name)]
    return clihelp.launch(*args, cwd=folder)


ASYNCHRONOUS = {
    **RAW,
    "log": {"every": 100, "progress": "lines", "tensorboard": False},
    "checkpoint": {"every": 0, "keep": 10},
}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """`launch --ps 2 --workers 2` through every kind of stage, joined only at stage ends
    (no log line, checkpoint or sample dump in between): the steps of a stage interleave."""
    folder = tmp_path_factory.mktemp("ps")
    result = launch(folder, ASYNCHRONOUS, 2, 2)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder, folder / "run", result


def test_asynchronous_steps_keep_the_schedule(launched, initial, expected):
    """Steps within a stage may read weights another worker is about to update (the weights
    differ from the reference), but stages, step counts and checkpoints are exact."""
    _, run_dir, _ = launched
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
    assert [e["step"] for e in index["checkpoints"]] == [2, 4, 7, 10]  # the stage ends
    records = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert [r["step"] for r in records] == [2, 4, 7, 10]
    manifest = (run_dir / "samples" / "manifest.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in manifest] == [2, 4, 5, 7, 10]
    final = weights(find_checkpoint(run_dir), initial)
    assert all(np.isfinite(v).all() for v in final.values())
    assert max_diff(final, initial) > 1e-2
    print(f"asynchronous, 2 workers: max |stagegan - reference| = {max_diff(final, expected):.3g}")


def test_the_chief_writes_the_run_and_every_process_is_quiet(launched):
    folder, run_dir, result = launched
    assert sorted(p.name for p in folder.iterdir()) == ["run", "run.yaml"]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["devices"]["strategy"] == "parameter_server"
    assert result.stderr.strip() == ""  # no TensorFlow warning about the coordinator's work
    lines = result.stdout.splitlines()
    devices = [line for line in lines if line.startswith("devices: ")]
    assert devices[0].startswith("devices: parameter_server: variables on 2 parameter servers")
    for job, count in (("ps", 2), ("worker", 2)):
        for index in range(count):
            assert any(line.startswith(f"[{job} {index}] ") for line in lines)


def start_servers(folder, addresses, counts, *flags):
    processes = []
    for job, count in counts.items():
        for index in range(count):
            env = {**os.environ, "TF_CONFIG": ps_tf_config(addresses, job, index)}
            processes.append(
                zygote.Process(
                    [sys.executable, "-m", "stagegan", "serve", *flags],
                    cwd=folder,
                    env=env,
                    stdout=zygote.DEVNULL,
                    stderr=zygote.PIPE,
                    text=True,
                )
            )
    return processes


def cluster(counts):
    ports = iter(free_ports(1 + sum(counts.values())))
    jobs = {"chief": 1, **counts}
    return {job: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for job, n in jobs.items()}


def chief(folder, addresses, *args, crash=None):
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
        "TF_CONFIG": ps_tf_config(addresses, "chief", 0),
    }
    command = [sys.executable, "-m", "stagegan", *args]
    if crash is not None:
        command = [sys.executable, str(ROOT / "tests" / "crash_run.py"), *crash, "--", *args]
    return zygote.Process(
        command, cwd=folder, env=env, stdout=zygote.PIPE, stderr=zygote.PIPE, text=True
    )


def stop(processes):
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_a_killed_chief_resumes_against_the_same_servers(tmp_path, initial, expected):
    """2 parameter servers and a worker started by hand, as on several machines, and a log
    line after every step (so a join: synchronous steps). The chief is killed right after
    checkpoint 4 is listed and started again with train --resume: the servers it finds
    still hold the old variables, which the restore overwrites. The run ends equal to the
    plain single-device reference loop. (Two workers sharing the steps: `launched` and
    test_namespaces; one worker here saves a process, a TensorFlow import and a trace.)"""
    raw = {**RAW, "devices": {"strategy": "parameter_server"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    counts = {"ps": 2, "worker": 1}
    addresses = cluster(counts)
    servers = start_servers(tmp_path, addresses, counts)
    run_dir = tmp_path / "run"
    try:
        args = ["train", "--config", "run.yaml", "--run-dir", str(run_dir)]
        first = chief(tmp_path, addresses, *args, crash=["after-index", "4"])
        first.communicate(timeout=240)
        assert first.returncode == -signal.SIGKILL
        second = chief(tmp_path, addresses, "train", "--resume", str(run_dir))
        _, err = second.communicate(timeout=240)
        assert second.returncode == 0, err[-3000:]
        assert [s.poll() for s in servers] == [None] * 3  # they served both chiefs
    finally:
        stop(servers)
    resumes = [json.loads(line) for line in open(run_dir / "resume.jsonl")]
    assert [r["step"] for r in resumes] == [4]
    steps = [json.loads(line)["step"] for line in open(run_dir / "metrics.jsonl")]
    assert steps == list(range(1, 11))
    final = weights(find_checkpoint(run_dir), initial)
    diff, moved = max_diff(final, expected), max_diff(final, initial)
    print(f"parameter_server 2 ps x 2 workers, resumed: max |stagegan - reference| = {diff:.3g}")
    assert moved > 1e-2 and diff <= 1e-5


def long_run(tmp_path, every=20):
    raw = {**RAW, "stages": [{**ALL_KINDS[-1], "steps": 1_000_000}], "samples": None}
    raw["log"] = {"every": every, "progress": "lines", "tensorboard": False}
    raw["checkpoint"] = {"every": 0, "keep": 3}
    raw["devices"] = {"strategy": "parameter_server"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    return ["train", "--config", "run.yaml", "--run-dir", str(tmp_path / "run")]


def wait_for_lines(path, count, process, timeout=120):
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().count("\n") >= count):
        assert process.poll() is None and time.monotonic() < deadline, "no training happened"
        time.sleep(0.2)


def test_a_dead_worker_costs_nothing_and_a_dead_parameter_server_stops_the_chief(tmp_path):
    """TensorFlow's coordinator runs a lost worker's step again on another worker: the run
    goes on. A lost parameter server takes variables with it: the chief stops, one line.
    The worker left (`serve --stop-when-chief-gone 2`) then stops by itself."""
    counts = {"ps": 1, "worker": 2}
    addresses = cluster(counts)
    servers = start_servers(tmp_path, addresses, counts, "--stop-when-chief-gone", "2")
    process = chief(tmp_path, addresses, *long_run(tmp_path))
    metrics = tmp_path / "run" / "metrics.jsonl"
    try:
        wait_for_lines(metrics, 2, process)
        servers[2].send_signal(signal.SIGKILL)  # worker 1
        lines = metrics.read_text().count("\n")
        wait_for_lines(metrics, lines + 3, process)  # training goes on without it
        servers[0].send_signal(signal.SIGKILL)  # the parameter server
        killed = time.monotonic()
        _, stderr = process.communicate(timeout=180)  # bounded: never a hang
        waited = time.monotonic() - killed
        assert servers[1].wait(timeout=60) == 0  # worker 0: the chief has gone
    finally:
        stop([*servers, process])
    print(f"the chief stopped {waited:.1f} s after the parameter server was killed")
    assert process.returncode == 4, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("stagegan: error: parameter_server: lost contact with "), last
    assert "Traceback" not in stderr and f"--resume {tmp_path / 'run'} " in last


@pytest.mark.parametrize(
    "args, key",
    [
        (["--ps", "-1", "--workers", "1"], "--ps"),
        (["--ps", "1", "--workers", "1", "--set", "devices.jit=true"], "devices.jit"),
        (["--ps", "1", "--workers", "1", "--set", "devices.towers=2"], "devices.towers"),
    ],
)
def test_launch_checks_its_arguments_before_starting_servers(args, key, tmp_path, capfd):
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(RAW))
    os.chdir(tmp_path)
    try:
        status = cli.main(["launch", *args, "--config", "run.yaml"])
    finally:
        os.chdir(ROOT)
    err = capfd.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith(f"stagegan: error: {key}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]


@pytest.mark.parametrize(
    "tf_config, words",
    [
        (None, "parameter_server needs TF_CONFIG"),
        (
            {
                "cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                "task": {"type": "chief", "index": 0},
            },
            "at least one ps task",
        ),
        (
            {
                "cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]},
                "task": {"type": "worker", "index": 0},
            },
            "stagegan serve",
        ),
        (
            {
                "cluster": {"chief": ["a:1"], "worker": "b:1", "ps": ["c:1"]},
                "task": {"type": "chief", "index": 0},
            },
            "list of host:port strings",
        ),
    ],
)
def test_train_needs_a_parameter_server_cluster_and_the_chief(tf_config, words, tmp_path, capfd):
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(RAW))
    env = {"TF_CONFIG": json.dumps(tf_config)} if tf_config else {}
    old = os.environ.pop("TF_CONFIG", None)
    os.environ.update(env)
    os.chdir(tmp_path)
    try:
        args = ["train", "--config", "run.yaml", "--set", "devices.strategy=parameter_server"]
        status = cli.main(args)
    finally:
        os.chdir(ROOT)
        os.environ.pop("TF_CONFIG", None)
        if old is not None:
            os.environ["TF_CONFIG"] = old
    err = capfd.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and words in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]


def test_serve_refuses_the_chief(capfd, monkeypatch):
    spec = {"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]}}
    monkeypatch.setenv("TF_CONFIG", json.dumps({**spec, "task": {"type": "chief", "index": 0}}))
    assert cli.main(["serve"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "stagegan: error: TF_CONFIG: this process is the chief"
    )


@pytest.mark.parametrize("wait, words", [("1", "no answer from parameter server 0"), ("x", "x")])
def test_a_chief_without_servers_says_so_and_stops(wait, words, tmp_path, capfd, monkeypatch):
    """TensorFlow's coordinator would wait for them forever without a word. The preset's
    `devices.towers: 1` is what a parameter-server step uses: accepted."""
    addresses = cluster(SERVERS)  # free ports: nothing answers there
    monkeypatch.setenv("TF_CONFIG", ps_tf_config(addresses, "chief", 0))
    monkeypatch.setenv("STAGEGAN_SERVER_WAIT", wait)
    monkeypatch.chdir(tmp_path)
    args = ["train", "--config", "mog_ring", "--set", "devices.strategy=parameter_server"]
    assert cli.main(args) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_serve_on_a_taken_port_is_one_line(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        addresses = {**cluster(SERVERS), "worker": [f"127.0.0.1:{taken.getsockname()[1]}"]}
        env = {**os.environ, "TF_CONFIG": ps_tf_config(addresses, "worker", 0)}
        result = zygote.run(
            [sys.executable, "-m", "stagegan", "serve"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        taken.close()
    err = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(err) == 1, result.stderr[-2000:]
    assert err[0].startswith("stagegan: error: TF_CONFIG: cannot serve worker 0 at 127.0.0.1:")
