"""Two "machines" on one host: two network namespaces this test creates, joined by a veth
pair, each with its own address on the test's own /24. Processes are started in them with
`TF_CONFIG` as docs/devices.md tells a user with two machines, so every byte between them
crosses that interface (127.0.0.1 is each namespace's own). The processes are forked from
tests/zygote.py's server and join their namespace as `ip netns exec` does (`setns`). Needs
root (`ip netns`), as on CI; skipped with the reason elsewhere. Traffic stays between the
test's own namespaces."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
import zygote
from clihelp import ROOT
from test_multi_worker import RAW, weights
from test_training import reference_run
from toytask import ALL_KINDS, max_diff, snapshot

from stagegan.cli.launch import ps_tf_config
from stagegan.config.schema import parse_config
from stagegan.run.reading import find_checkpoint
from stagegan.training.trainer import Trainer

PORT = 2222  # a fresh namespace has every port free


def ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def network():
    """`{"a": (namespace, address), "b": (...), "links": (veth a, veth b)}`."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create network namespaces")
    tag = f"sg{os.getpid()}"
    a, b, veth_a, veth_b = f"{tag}a", f"{tag}b", f"{tag}va", f"{tag}vb"
    subnet = f"10.231.{os.getpid() % 250 + 1}"
    steps = [
        ("netns", "add", a),
        ("netns", "add", b),
        ("link", "add", veth_a, "type", "veth", "peer", "name", veth_b),
        ("link", "set", veth_a, "netns", a),
        ("link", "set", veth_b, "netns", b),
        ("-n", a, "addr", "add", f"{subnet}.1/24", "dev", veth_a),
        ("-n", b, "addr", "add", f"{subnet}.2/24", "dev", veth_b),
        ("-n", a, "link", "set", veth_a, "up"),
        ("-n", b, "link", "set", veth_b, "up"),
        ("-n", a, "link", "set", "lo", "up"),
        ("-n", b, "link", "set", "lo", "up"),
    ]
    try:
        for step in steps:
            done = ip(*step)
            if done.returncode:
                pytest.skip(f"cannot create network namespaces here: {done.stderr.strip()}")
        yield {"a": (a, f"{subnet}.1"), "b": (b, f"{subnet}.2"), "links": (veth_a, veth_b)}
    finally:
        ip("netns", "del", a)  # the veth pair goes with its namespaces
        ip("netns", "del", b)


def in_namespace(namespace, folder, args, tf_config, extra_env=None):
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
        "TF_CONFIG": tf_config,
        **(extra_env or {}),
    }
    return zygote.Process(
        [sys.executable, "-m", "stagegan", *args],
        cwd=folder,
        env=env,
        stdout=zygote.PIPE,
        stderr=zygote.PIPE,
        text=True,
        netns=namespace,  # as `ip netns exec NAMESPACE COMMAND` runs it
    )


def sent_bytes(network):
    namespace, _ = network["a"]
    stats = ip("-n", namespace, "-s", "-j", "link", "show", network["links"][0])
    return json.loads(stats.stdout)[0]["stats64"]["tx"]["bytes"]


def finish(processes, timeout=240):
    try:
        return [p.communicate(timeout=timeout) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.fixture(scope="module")
def initial():
    return snapshot(Trainer(parse_config(RAW)))


@pytest.fixture(scope="module")
def expected(initial):
    return reference_run(initial)


def multi_worker_config(network, index):
    workers = [f"{network[k][1]}:{PORT}" for k in ("a", "b")]
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def test_multi_worker_across_two_namespaces(network, tmp_path, initial, expected):
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(RAW))
    before = sent_bytes(network)
    args = ["train", "--config", "run.yaml", "--run-dir", str(tmp_path / "run")]
    args += ["--set", "devices.strategy=multi_worker"]
    processes = [
        in_namespace(network[k][0], tmp_path, args, multi_worker_config(network, i))
        for i, k in enumerate(("a", "b"))
    ]
    outputs = finish(processes)
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
    crossed = sent_bytes(network) - before
    final = weights(find_checkpoint(tmp_path / "run"), initial)
    diff = max_diff(final, expected)
    print(f"multi_worker across namespaces: {crossed} bytes crossed, max diff {diff:.3g}")
    assert crossed > 10_000 and diff <= 1e-5


def test_parameter_servers_across_two_namespaces(network, tmp_path, initial, expected):
    """The chief and the parameter server on one "machine", both workers on the other."""
    raw = {**RAW, "devices": {"strategy": "parameter_server"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    (host_a, a), (host_b, b) = network["a"], network["b"]
    cluster = {
        "chief": [f"{a}:{PORT}"],
        "ps": [f"{a}:{PORT + 1}"],
        "worker": [f"{b}:{PORT}", f"{b}:{PORT + 1}"],
    }
    servers = [in_namespace(host_a, tmp_path, ["serve"], ps_tf_config(cluster, "ps", 0))]
    servers += [
        in_namespace(host_b, tmp_path, ["serve"], ps_tf_config(cluster, "worker", i))
        for i in range(2)
    ]
    before = sent_bytes(network)
    args = ["train", "--config", "run.yaml", "--run-dir", str(tmp_path / "run")]
    chief = in_namespace(host_a, tmp_path, args, ps_tf_config(cluster, "chief", 0))
    try:
        _, err = chief.communicate(timeout=240)
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
        finish(servers + [chief])
    assert chief.returncode == 0, err[-3000:]
    crossed = sent_bytes(network) - before
    final = weights(find_checkpoint(tmp_path / "run"), initial)
    diff = max_diff(final, expected)
    print(f"parameter_server across namespaces: {crossed} bytes crossed, max diff {diff:.3g}")
    assert crossed > 10_000 and diff <= 1e-5


def test_a_peer_whose_link_goes_down_stops_the_chief_with_one_line(network, tmp_path):
    raw = {**RAW, "stages": [{**ALL_KINDS[-1], "steps": 1_000_000}], "samples": None}
    raw["log"] = {"every": 20, "progress": "lines", "tensorboard": False}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    args = ["train", "--config", "run.yaml", "--run-dir", str(tmp_path / "run")]
    args += ["--set", "devices.strategy=multi_worker"]
    quick = {"STAGEGAN_COLLECTIVE_TIMEOUT": "5"}
    processes = [
        in_namespace(network[k][0], tmp_path, args, multi_worker_config(network, i), quick)
        for i, k in enumerate(("a", "b"))
    ]
    chief = processes[0]
    metrics = tmp_path / "run" / "metrics.jsonl"
    veth_b = network["links"][1]
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert chief.poll() is None and time.monotonic() < deadline, "no training happened"
            time.sleep(0.2)
        ip("-n", network["b"][0], "link", "set", veth_b, "down")  # the other machine is gone
        cut = time.monotonic()
        _, err = chief.communicate(timeout=120)  # bounded: never a hang
        waited = time.monotonic() - cut
    finally:
        ip("-n", network["b"][0], "link", "set", veth_b, "up")
        finish(processes, timeout=30)
    print(f"the chief stopped {waited:.1f} s after its peer's link went down: {err.strip()}")
    assert chief.returncode == 4, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("stagegan: error: multi_worker: "), last
    assert "a peer that stopped answering" in last, last  # stagegan's deadline, before TF's
    assert "Traceback" not in err
