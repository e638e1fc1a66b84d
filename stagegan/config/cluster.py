"""This process's place in a multi-worker cluster (`TF_CONFIG`), and the GPUs this host lets it
use (`host_gpus`), both read without TensorFlow, so the CLI can decide what this process
writes and where it runs before it imports TensorFlow."""

import json
import os
import shutil
import subprocess

from stagegan.errors import ConfigError


def worker_cluster():
    """This process's place in the `TF_CONFIG` cluster: `(task_type, index, chief)`.

    The chief is the `chief` task, or worker 0 when the cluster has no `chief` (TensorFlow's
    rule).

    Raises:
        ConfigError: TF_CONFIG is missing, is not JSON, or lacks the cluster or the task.
    """
    raw = os.environ.get("TF_CONFIG")
    key = "devices.strategy"
    if not raw:
        raise ConfigError(
            key,
            "multi_worker needs TF_CONFIG in the environment of every worker process "
            "(`python -m stagegan launch --workers N ...` sets it for local runs)",
        )
    try:
        spec = json.loads(raw)
        cluster = spec["cluster"]
        task_type, index = spec["task"]["type"], int(spec["task"]["index"])
        members = list(cluster[task_type])
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(key, f"TF_CONFIG is not a usable cluster spec ({error!r})") from None
    if task_type not in ("worker", "chief") or not 0 <= index < len(members):
        raise ConfigError(key, f"TF_CONFIG task {task_type}:{index} is not in the cluster")
    chief = task_type == "chief" or (
        task_type == "worker" and index == 0 and "chief" not in cluster
    )
    return task_type, index, chief


def is_chief(config, run_dir):
    """Whether this process writes the run folder: not so on a non-chief multi-worker worker.
    Multi-worker runs name their folder on every worker (`--run-dir`, or `--resume`)."""
    if config.devices.strategy != "multi_worker":
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
        return int(override)
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listed = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())
