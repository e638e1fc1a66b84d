"""This process's place in a multi-worker cluster (`TF_CONFIG`), and the GPUs this host lets it
use (`host_gpus`), both read without TensorFlow, so the CLI can decide what this process
writes and where it runs before it imports TensorFlow."""

import json
import logging
import os
import shutil
import socket
import subprocess
import time

from stagegan.config.numbers import parse_number
from stagegan.errors import ConfigError, shown


def read_tf_config(strategy="multi_worker"):
    """`TF_CONFIG` as `(cluster, task_type, index)`: the cluster spec (`{job: [address]}`)
    and this process's task in it, checked as a whole (`parse_tf_config`).

    Raises:
        ConfigError: TF_CONFIG is missing (on `devices.strategy`, which asked for it), or is
            not a usable cluster spec (on `TF_CONFIG`).
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        launch = "--ps M --workers N" if strategy == "parameter_server" else "--workers N"
        raise ConfigError(
            "devices.strategy",
            f"{strategy} needs TF_CONFIG in the environment of every process of the cluster "
            f"(`python -m stagegan launch {launch} ...` sets it for local runs)",
        )
    return parse_tf_config(raw)


# What TensorFlow's `TFConfigClusterResolver` reads of TF_CONFIG; anything else is a typo.
TF_CONFIG_KEYS = ("cluster", "task", "rpc_layer", "environment")
TASK_KEYS = ("type", "index", "trial")


def _shown(value, most=60, quoted=True):
    """`value` for a message: its repr (`quoted`) or its text, on one line, cut at `most`."""
    text = repr(value) if quoted else str(value)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= most else f"{text[:most]}... ({len(text):,} characters)"


def parse_tf_config(raw):
    """The text of a `TF_CONFIG` as `(cluster, task_type, index)`, checked as a whole: a JSON
    object of `cluster` (`{job: ["host:port", ...]}`, each job a non-empty list, no address
    twice) and `task` (`type`: a job of the cluster, `index`: an integer naming one of its
    members), and optionally `rpc_layer` and `environment` (strings); no other key.

    Raises:
        ConfigError: on `TF_CONFIG`, naming what is wrong and the value received.
    """
    key = "TF_CONFIG"
    try:
        spec = json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise ConfigError(key, f"is not JSON ({first_line(error)})") from None
    if not isinstance(spec, dict):
        raise ConfigError(
            key, f"must be a JSON object with cluster and task. Received: {_shown(spec)}"
        )
    unknown = sorted(set(spec) - set(TF_CONFIG_KEYS))
    if unknown:
        raise ConfigError(
            key, f"unknown key {_shown(unknown[0])} (it takes {', '.join(TF_CONFIG_KEYS)})"
        )
    for name in ("rpc_layer", "environment"):
        if name in spec and not isinstance(spec[name], str):
            raise ConfigError(key, f"{name} must be a string. Received: {_shown(spec[name])}")
    cluster = _checked_cluster(spec.get("cluster"), key)
    task_type, index = _checked_task(spec.get("task"), cluster, key)
    return cluster, task_type, index


def _checked_cluster(cluster, key):
    """TF_CONFIG's `cluster`: `{job: ["host:port", ...]}`, no address twice."""
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError(
            key,
            f'cluster must be an object {{job: ["host:port", ...]}}. Received: {_shown(cluster)}',
        )
    seen = {}
    for job, members in cluster.items():
        if not isinstance(members, list) or not members or not all(map(_address, members)):
            raise ConfigError(
                key,
                f"cluster's {_shown(job, quoted=False)} must be a non-empty list of host:port "
                f"strings. Received: {_shown(members)}",
            )
        for i, address in enumerate(members):
            if address in seen:
                raise ConfigError(
                    key,
                    f"cluster lists {_shown(address, quoted=False)} twice ({seen[address]} and "
                    f"{_shown(job, quoted=False)} {i})",
                )
            seen[address] = f"{_shown(job, quoted=False)} {i}"
    return cluster


def _checked_task(task, cluster, key):
    """TF_CONFIG's `task` as `(type, index)`: a member of `cluster`."""
    if not isinstance(task, dict):
        raise ConfigError(key, f"task must be an object {{type, index}}. Received: {_shown(task)}")
    unknown = sorted(set(task) - set(TASK_KEYS))
    if unknown:
        raise ConfigError(
            key, f"unknown task key {_shown(unknown[0])} (it takes {', '.join(TASK_KEYS)})"
        )
    task_type, index = task.get("type"), task.get("index")
    if not isinstance(task_type, str) or task_type not in cluster:
        raise ConfigError(
            key,
            "task.type must name a job of the cluster "
            f"({_shown(', '.join(map(str, cluster)), quoted=False)}). "
            f"Received: {_shown(task_type)}",
        )
    if isinstance(index, bool) or not isinstance(index, int):
        raise ConfigError(
            key, f"task.index must be an integer (0, 1, ...). Received: {_shown(index)}"
        )
    members = cluster[task_type]
    if not 0 <= index < len(members):
        raise ConfigError(
            key,
            f"task {_shown(task_type, quoted=False)}:{shown(index)} is not in the cluster (its "
            f"{_shown(task_type, quoted=False)} job lists "
            f"{len(members)}: indices 0 to {len(members) - 1})",
        )
    return task_type, index


def first_line(error):
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def worker_cluster():
    """This process's place in a multi-worker `TF_CONFIG` cluster: `(task_type, index,
    chief)`.

    The chief is the `chief` task, or worker 0 when the cluster has no `chief` (TensorFlow's
    rule).

    Raises:
        ConfigError: TF_CONFIG is missing, is not JSON, or lacks the cluster or the task.
    """
    cluster, task_type, index = read_tf_config()
    collective_timeout()  # checked with the cluster, before anything is written
    unknown = sorted(set(cluster) - {"chief", "worker"})
    if unknown:
        raise ConfigError(
            "TF_CONFIG",
            f"a multi_worker cluster has jobs chief and worker, not {', '.join(unknown)}",
        )
    if len(cluster.get("chief", [])) > 1:
        raise ConfigError(
            "TF_CONFIG", f"a cluster has at most one chief; it lists {len(cluster['chief'])}"
        )
    chief = task_type == "chief" or (
        task_type == "worker" and index == 0 and "chief" not in cluster
    )
    return task_type, index, chief


# A multi-worker step may wait at most PATIENCE timeouts for a peer (`watchdogs.PeerDeadline`);
# TensorFlow's own collective deadline is past that (TF_DEADLINE timeouts), so stagegan acts
# first (`placement._multi_worker_strategy`).
PATIENCE = 3
TF_DEADLINE = 4


def collective_timeout():
    """Seconds a multi-worker step may wait for a peer that stopped answering
    (`STAGEGAN_COLLECTIVE_TIMEOUT`, default 300; 0: no deadline): the training loop's
    `PeerDeadline` stops the run then. A dead worker's closed connection fails the others at
    once."""
    text = os.environ.get("STAGEGAN_COLLECTIVE_TIMEOUT", "300")
    what = "a number of seconds, 0 or more (0: no deadline)"
    try:
        timeout = parse_number(text, "STAGEGAN_COLLECTIVE_TIMEOUT", minimum=0, what=what)
    except ConfigError:
        raise ConfigError("STAGEGAN_COLLECTIVE_TIMEOUT", f"must be {what}; got {text!r}") from None
    return timeout


def parameter_server_cluster():
    """A parameter-server `TF_CONFIG` cluster, checked: `(cluster, task_type, index)`.

    It has one `chief` (the coordinator: `train`), one or more `worker`s and `ps`s (servers:
    `python -m stagegan serve`), and no other job.

    Raises:
        ConfigError: TF_CONFIG is missing or broken, or the cluster lacks one of its jobs.
    """
    cluster, task_type, index = read_tf_config("parameter_server")
    key = "TF_CONFIG"
    unknown = sorted(set(cluster) - {"chief", "worker", "ps"})
    if unknown:
        raise ConfigError(
            key, f"a parameter_server cluster has jobs chief, worker and ps, not {unknown}"
        )
    needs = (("chief", "exactly one"), ("worker", "at least one"), ("ps", "at least one"))
    for job, wanted in needs:
        count = len(cluster.get(job, []))
        if count == 0 or (job == "chief" and count != 1):
            raise ConfigError(
                key,
                f"a parameter_server cluster needs {wanted} {job} task; TF_CONFIG lists {count}",
            )
    return cluster, task_type, index


# Seconds the chief of a parameter_server run waits for its servers to answer.
SERVER_WAIT_VARIABLE = "STAGEGAN_SERVER_WAIT"


def wait_for_servers(cluster, timeout=None, poll=0.5):
    """Wait until every worker and parameter server of `cluster` accepts connections.

    TensorFlow's coordinator waits for a missing server forever, silently; this says what it
    waits for, once, and gives up after `timeout` seconds (`STAGEGAN_SERVER_WAIT`, 300).

    Raises:
        ConfigError: a server still not answering at the deadline.
    """
    if timeout is None:
        raw = os.environ.get(SERVER_WAIT_VARIABLE, "300")
        what = "a number of seconds, 0 or more"
        try:
            timeout = parse_number(raw, SERVER_WAIT_VARIABLE, minimum=0, what=what)
        except ConfigError:
            raise ConfigError(SERVER_WAIT_VARIABLE, f"must be {what}. Received: {raw!r}") from None
    tasks = [(job, i, a) for job in ("ps", "worker") for i, a in enumerate(cluster[job])]
    deadline, said = time.monotonic() + timeout, False
    while True:
        missing = [(job, i, a) for job, i, a in tasks if not answers(a)]
        if not missing:
            return
        named = ", ".join(f"{_job(job)} {i} ({a})" for job, i, a in missing)
        if time.monotonic() > deadline:
            raise ConfigError(
                "devices.strategy",
                f"parameter_server: no answer from {named} after {timeout:g} s; start each with "
                "`python -m stagegan serve` and its TF_CONFIG (or use `launch --ps M --workers N`)",
            )
        if not said:
            logging.getLogger("stagegan").info("waiting for %s to answer", named)
            said = True
        time.sleep(poll)


def _address(member):
    """Whether `member` reads as `host:port`."""
    if not isinstance(member, str) or ":" not in member:
        return False
    host, port = member.rsplit(":", 1)
    digits = port.isascii() and port.isdigit() and len(port) <= 5
    return bool(host) and digits and 0 < int(port) < 65536


def _job(job):
    return "parameter server" if job == "ps" else job


def answers(address, timeout=1.0):
    """Whether something accepts TCP connections at `address` (`host:port`)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def is_chief(config, run_dir):
    """Whether this process writes the run folder: not so on a non-chief multi-worker worker.
    Multi-worker runs name their folder on every worker (`--run-dir`, or `--resume`)."""
    if config.devices.strategy == "parameter_server":
        _, task_type, index = parameter_server_cluster()
        if task_type != "chief":
            raise ConfigError(
                "devices.strategy",
                f"this process is {task_type} {index} of a parameter_server cluster (TF_CONFIG); "
                "train runs on the chief only: start the workers and parameter servers with "
                "`python -m stagegan serve`",
            )
        return True
    if config.devices.strategy != "multi_worker":
        if os.environ.get("TF_CONFIG"):
            logging.getLogger("stagegan").warning(
                "TF_CONFIG: set, but devices.strategy is %s, which trains in this process "
                "alone and does not read it (multi_worker and parameter_server do)",
                config.devices.strategy,
            )
        return True
    _, _, chief = worker_cluster()
    if run_dir is None:
        raise ConfigError(
            "--run-dir",
            "a multi_worker run needs --run-dir (the same folder on every worker; "
            "`python -m stagegan launch` picks one)",
        )
    return chief


# The number of GPUs `host_gpus` reports instead of asking `nvidia-smi` (for tests).
GPU_COUNT_VARIABLE = "STAGEGAN_GPU_COUNT"


def host_gpus(environ=None):
    """The ids of the NVIDIA GPUs this process may use, found without TensorFlow: the GPUs
    `nvidia-smi -L` lists (or `STAGEGAN_GPU_COUNT` says), narrowed by `CUDA_VISIBLE_DEVICES`
    when it is set ("" or -1: none). Returns a list of strings (CUDA's ids)."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = []
        for item in visible.split(","):  # as CUDA reads it: up to the first invalid id
            item = item.strip()
            if not item or item.startswith("-"):
                break
            ids.append(item)
        if not ids:
            return []
    count = _gpu_count(environ)
    if visible is None:
        return [str(i) for i in range(count)]
    return ids if count else []


def _gpu_count(environ):
    override = environ.get(GPU_COUNT_VARIABLE)
    if override is not None:
        return parse_number(override, GPU_COUNT_VARIABLE, integer=True, minimum=0, maximum=4096)
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listed = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


def check_batch_divides(batch_size, replicas):
    """The global batch is split evenly across replicas; anything else is a config error.
    The one divisibility check: `placement` runs it on the resolved replicas, and `launch`
    on its worker count (each worker holds at least one replica) before any worker starts.
    `batch_size`: an int, or `{config key: global batch}` (`RunConfig.batch_sizes`)."""
    sizes = batch_size if isinstance(batch_size, dict) else {"batch_size": batch_size}
    for key, size in sizes.items():
        if size % replicas:
            raise ConfigError(
                key,
                f"{size} does not divide evenly across {replicas} towers "
                f"(use a multiple of {replicas})",
            )
