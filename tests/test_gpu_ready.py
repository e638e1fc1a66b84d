"""Ready for GPUs, tested on the CPU: the `auto` layout decided from fake lists of GPUs, the
CPU layout unchanged, the one `devices:` line and the GPU warning, each `launch` worker's
environment, the mixed-precision policies (bfloat16 and float16 train on the CPU), the
suite's own CPU pinning, and `benchmarks/gpu.py` on a machine without a GPU."""

import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from test_training import ALL_KINDS, config, run_all
from toytask import snapshot

from stagegan.cli import main as cli
from stagegan.cli.launch import assign_gpus, host_gpus, worker_env
from stagegan.config.resources import builtin_names
from stagegan.config.schema import DEVICES_DEFAULTS, DevicesConfig, load_config
from stagegan.core.placement import Layout, choose_layout, gpu_warning, resolve_placement
from stagegan.core.precision import loss_scaled, policy_of
from stagegan.errors import ConfigError
from stagegan.run.planning import describe_plan
from stagegan.run.runner import announce
from stagegan.training.trainer import Trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU = Layout(("/CPU:0",), "/CPU:0", "towers")  # the layout stagegan always had


def devices(**changes):
    """A `DevicesConfig`: the defaults (all `auto`) with `changes`."""
    return DevicesConfig(**{**DEVICES_DEFAULTS, **changes})


# The `auto` layout, from fake GPU counts --------------------------------------------------


@pytest.mark.parametrize(
    "gpus, batch, expected",
    [
        (0, 64, CPU),
        (1, 64, Layout(("/GPU:0",), "/GPU:0", "towers")),
        (2, 64, Layout(("/GPU:0", "/GPU:1"), "/CPU:0", "mirrored")),
        (8, 64, Layout(tuple(f"/GPU:{i}" for i in range(8)), "/CPU:0", "mirrored")),
        # 64 does not divide across 3 GPUs: the most that divide it.
        (3, 64, Layout(("/GPU:0", "/GPU:1"), "/CPU:0", "mirrored")),
        (3, 7, Layout(("/GPU:0",), "/GPU:0", "towers")),
    ],
)
def test_auto_fits_the_visible_gpus(gpus, batch, expected):
    assert choose_layout(devices(), gpus, batch) == expected


@pytest.mark.parametrize(
    "changes, gpus, expected",
    [
        # What the presets and old run folders say: kept, whatever the machine.
        ({"towers": 1, "variables": "/CPU:0", "strategy": "towers"}, 0, CPU),
        (
            {"towers": 1, "variables": "/CPU:0", "strategy": "towers"},
            2,
            Layout(("/GPU:0",), "/CPU:0", "towers"),
        ),
        ({"towers": 1}, 0, CPU),
        ({"towers": 1}, 4, Layout(("/GPU:0",), "/GPU:0", "towers")),
        # N towers with no GPU: N logical CPUs, as always; towers with several GPUs:
        # variables on the first tower's GPU.
        ({"towers": 4}, 0, Layout(("/CPU:0", "/CPU:1", "/CPU:2", "/CPU:3"), "/CPU:0", "towers")),
        ({"towers": 2, "strategy": "towers"}, 2, Layout(("/GPU:0", "/GPU:1"), "/GPU:0", "towers")),
        (
            {"towers": 2, "strategy": "mirrored"},
            0,
            Layout(("/CPU:0", "/CPU:1"), "/CPU:0", "mirrored"),
        ),
        (
            {"towers": 2, "strategy": "central_storage"},
            2,
            Layout(("/GPU:0", "/GPU:1"), "/CPU:0", "central_storage"),
        ),
        ({"towers": ("gpu:1",), "variables": "/gpu:1"}, 2, Layout(("/GPU:1",), "/GPU:1", "towers")),
        ({"variables": "/CPU:0"}, 1, Layout(("/GPU:0",), "/CPU:0", "towers")),
    ],
)
def test_explicit_settings_do_what_they_say(changes, gpus, expected):
    assert choose_layout(devices(**changes), gpus, 64) == expected


@pytest.mark.parametrize(
    "changes, gpus, key, words",
    [
        (
            {"variables": "/GPU:7"},
            0,
            "devices.variables",
            "/GPU:7 does not exist (TensorFlow sees no",
        ),
        (
            {"variables": "/GPU:2"},
            2,
            "devices.variables",
            "/GPU:2 does not exist (TensorFlow sees 2",
        ),
        ({"towers": ("/GPU:1",)}, 1, "devices.towers", "/GPU:1 does not exist"),
        ({"towers": 3}, 2, "devices.towers", "3 towers requested but only 2 GPUs are visible"),
        ({"variables": "gpu-0"}, 1, "devices.variables", "device names look like /CPU:0"),
    ],
)
def test_devices_that_do_not_exist_are_refused(changes, gpus, key, words):
    with pytest.raises(ConfigError) as info:
        choose_layout(devices(**changes), gpus, 64)
    assert info.value.key == key and words in info.value.message


@pytest.mark.parametrize("name", builtin_names("configs"))
def test_every_preset_keeps_its_cpu_layout(name):
    """No preset pins `/CPU:0` any more; on CPUs each still resolves to the one-CPU layout."""
    preset = load_config(name)
    assert preset.devices.variables == "auto"
    assert choose_layout(preset.devices, 0, preset.batch_size) == CPU


def test_the_default_layout_trains_the_same_weights_as_the_explicit_cpu_layout():
    """`auto` (every devices key at its default) on CPUs is today's layout exactly:
    bit-identical weights after an alternating and a joint stage."""
    explicit = {"towers": 1, "variables": "/CPU:0", "strategy": "towers"}
    trained = []
    for chosen in ({}, explicit):
        trainer = Trainer(config(1, ALL_KINDS[2:], devices=chosen))
        assert trainer.placement.towers == ("/CPU:0",) and trainer.placement.variables == "/CPU:0"
        assert trainer.placement.backend == "towers" and trainer.placement.strategy is None
        run_all(trainer)
        trained.append(snapshot(trainer))
    auto, pinned = trained
    assert sorted(auto) == sorted(pinned)
    for path in auto:
        np.testing.assert_array_equal(auto[path], pinned[path], err_msg=path)


# The `devices:` line and the GPU warning -------------------------------------------------


def test_the_devices_line_says_where_everything_runs():
    placement = resolve_placement(devices(), 8)
    assert placement.describe() == (
        "devices: variables on /CPU:0, 1 tower (/CPU:0), data on the host CPU"
    )
    assert placement.warning is None
    mirrored = resolve_placement(devices(towers=2, strategy="mirrored"), 8)
    assert mirrored.backend == "mirrored"
    assert mirrored.describe() == (
        "devices: mirrored: variables copied to each of 2 replicas (/CPU:0, /CPU:1), "
        "data on the host CPU"
    )
    towers = resolve_placement(devices(towers=2), 8)
    assert towers.describe() == (
        "devices: variables on /CPU:0, 2 towers (/CPU:0, /CPU:1), data on the host CPU"
    )


def test_train_says_where_it_runs_in_one_line_and_warns_in_one_more():
    logger, records = logging.getLogger("stagegan"), []
    handler, level = logging.Handler(), logger.level
    handler.emit = records.append
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        announce(resolve_placement(devices(mixed_precision="float16"), 8))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("INFO", "devices: variables on /CPU:0, 1 tower (/CPU:0), data on the host CPU"),
        (
            "WARNING",
            "warning: devices.mixed_precision: float16 is for GPUs and TensorFlow sees none; "
            "computing float16 on the CPU (slow; bfloat16 with devices.jit suits CPUs better)",
        ),
    ]


def test_a_gpu_nobody_has_is_a_config_error_before_anything_is_written(tmp_path, capfd):
    raw = config(1, ALL_KINDS[:1], devices={"variables": "/GPU:7"})
    with pytest.raises(ConfigError, match="devices.variables: device /GPU:7 does not exist"):
        resolve_placement(raw.devices, raw.batch_size)
    run_dir = str(tmp_path / "run")
    args = ["--config", "mog_ring", "--run-dir", run_dir, "--set", "devices.variables=/GPU:7"]
    status = cli.main(["train", *args])
    err = capfd.readouterr().err
    assert status == 2
    assert err.startswith("stagegan: error: devices.variables: device /GPU:7 does not exist")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_the_gpu_warning():
    default, float16 = devices(), devices(mixed_precision="float16")
    assert gpu_warning(default, gpus=1, driver_gpus=0) is None
    assert gpu_warning(float16, gpus=1, driver_gpus=0) is None
    assert gpu_warning(default, gpus=0, driver_gpus=0) is None  # a CPU machine: nothing to say
    assert "float16 is for GPUs and TensorFlow sees none" in gpu_warning(float16, 0, 0)
    # A GPU the driver shows but TensorFlow cannot use (a broken CUDA install).
    broken = gpu_warning(default, gpus=0, driver_gpus=2)
    assert broken.startswith("this machine has 2 NVIDIA GPUs but TensorFlow sees none")
    assert "\n" not in broken


# `launch`: each worker's environment ------------------------------------------------------


def test_host_gpus_are_counted_without_tensorflow():
    assert host_gpus({"STAGEGAN_GPU_COUNT": "4"}) == ["0", "1", "2", "3"]
    assert host_gpus({"STAGEGAN_GPU_COUNT": "0"}) == []
    # CUDA_VISIBLE_DEVICES narrows them, as CUDA reads it ("" or -1: none).
    visible = {"STAGEGAN_GPU_COUNT": "4", "CUDA_VISIBLE_DEVICES": "2,3"}
    assert host_gpus(visible) == ["2", "3"]
    assert host_gpus({"STAGEGAN_GPU_COUNT": "4", "CUDA_VISIBLE_DEVICES": ""}) == []
    assert host_gpus({"STAGEGAN_GPU_COUNT": "4", "CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert host_gpus({"STAGEGAN_GPU_COUNT": "4", "CUDA_VISIBLE_DEVICES": "1,-1,2"}) == ["1"]
    assert host_gpus() == []  # this suite hides the GPUs (conftest)


def test_each_worker_gets_its_own_gpus_and_memory_growth():
    addresses = ["127.0.0.1:1", "127.0.0.1:2"]
    launcher = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    gpus = assign_gpus(2, 2, ["4", "5", "6", "7"])
    assert gpus == [["4", "5"], ["6", "7"]]
    envs = [worker_env(launcher, addresses, i, gpus) for i in range(2)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["4,5", "6,7"]
    assert all(e["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and e["PATH"] == "/bin" for e in envs)
    assert [e["TF_CONFIG"] for e in envs] == [
        '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", '
        f'"index": {i}}}}}'
        for i in range(2)
    ]
    # By default the visible GPUs are shared out evenly; 0: CPU workers on a GPU host.
    assert assign_gpus(2, None, ["0", "1", "2"]) == [["0"], ["1"]]
    assert assign_gpus(3, None, [str(i) for i in range(6)]) == [["0", "1"], ["2", "3"], ["4", "5"]]
    cpu_only = worker_env({}, addresses, 1, assign_gpus(2, 0, ["0", "1"]))
    assert cpu_only["CUDA_VISIBLE_DEVICES"] == ""


def test_without_gpus_the_workers_get_the_launchers_environment():
    launcher = {"PATH": "/bin", "HOME": "/home/u"}
    gpus = assign_gpus(2, None, [])
    assert gpus is None
    env = worker_env(launcher, ["127.0.0.1:1", "127.0.0.1:2"], 1, gpus)
    assert set(env) == {"PATH", "HOME", "TF_CONFIG"}
    assert env["PATH"] == "/bin" and env["HOME"] == "/home/u"


@pytest.mark.parametrize(
    "count, args, words",
    [
        ("4", ["--gpus-per-worker", "-1"], "--gpus-per-worker: must be 0 or more. Received: -1"),
        ("0", ["--gpus-per-worker", "1"], "2 workers with 1 GPU each need 2 GPUs, but only 0 GPUs"),
        ("3", ["--gpus-per-worker", "2"], "need 4 GPUs, but only 3 GPUs visible"),
        ("1", [], "2 workers but only 1 GPU visible; pass --gpus-per-worker 0"),
    ],
)
def test_launch_refuses_gpus_it_does_not_have(count, args, words, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("STAGEGAN_GPU_COUNT", count)
    status = cli.main(["launch", "--workers", "2", *args, "--config", "mog_ring"])
    err = capfd.readouterr().err
    assert status == 2 and words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no run folder reserved


# Mixed precision ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, towers, policy, scaled",
    [
        (False, ("/GPU:0",), None, False),
        ("float16", ("/GPU:0",), "mixed_float16", True),
        ("float16", ("/CPU:0",), "mixed_float16", True),
        ("bfloat16", ("/GPU:0",), "mixed_bfloat16", False),
        ("bfloat16", ("/CPU:0",), "mixed_bfloat16", False),
        # `true` keeps its meaning (and its loss scales, so old runs resume).
        (True, ("/GPU:0", "/GPU:1"), "mixed_float16", True),
        (True, ("/CPU:0",), "mixed_bfloat16", True),
    ],
)
def test_the_precision_policy(setting, towers, policy, scaled):
    assert policy_of(setting, towers) == policy
    assert loss_scaled(setting, policy) == scaled


@pytest.mark.parametrize("value", ["float8", "fp16", 1, 0, None, "true"])
def test_an_unknown_precision_is_refused(value):
    with pytest.raises(ConfigError) as info:
        config(1, ALL_KINDS[:1], devices={"mixed_precision": value})
    assert info.value.key == "devices.mixed_precision"
    assert "must be float16, bfloat16 or false" in info.value.message


@pytest.fixture(scope="module")
def trained_16_bit():
    """The toy task through an alternating and a joint stage, in each 16-bit policy."""
    trained = {}
    for kind in ("bfloat16", "float16"):
        trainer = Trainer(config(1, ALL_KINDS[2:], devices={"mixed_precision": kind}))
        run_all(trainer)
        trained[kind] = trainer
    return trained


def test_bfloat16_trains_on_the_cpu_without_a_loss_scale(trained_16_bit):
    trainer = trained_16_bit["bfloat16"]
    layer = trainer.networks["generator"].layers[-1]
    assert layer.compute_dtype == "bfloat16" and layer.variable_dtype == "float32"
    assert trainer.loss_scales == {}
    assert not any(name.startswith("loss_scale") for name in trainer.trackables())
    assert trainer.step_count == 6
    assert all(np.all(np.isfinite(v.numpy())) for v in trainer.variables)


def test_float16_trains_on_the_cpu_with_a_loss_scale(trained_16_bit):
    """Keras 3 computes float16 on the CPU too (slowly), so the GPU's path runs here."""
    trainer = trained_16_bit["float16"]
    layer = trainer.networks["generator"].layers[-1]
    assert layer.compute_dtype == "float16" and layer.variable_dtype == "float32"
    scales = {
        k: (float(v.scale.numpy()), int(v.good.numpy())) for k, v in trainer.loss_scales.items()
    }
    # g: every 2nd of 3 alternating steps, then 3 joint; d: 3 + 3. None overflowed.
    assert scales == {"g": (2.0**15, 5), "d": (2.0**15, 6)}
    assert all(np.all(np.isfinite(v.numpy())) for v in trainer.variables)
    plan = describe_plan(trainer).splitlines()
    assert plan[1] == "devices: variables on /CPU:0, 1 tower (/CPU:0), data on the host CPU"
    assert plan[2].startswith("warning: devices.mixed_precision: float16 is for GPUs")
    assert plan[3].endswith(", mixed precision (mixed_float16, loss scaling)")


# The suite itself, and benchmarks/gpu.py --------------------------------------------------


def test_the_suite_runs_on_the_cpu_without_tf32():
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert tf.config.get_visible_devices("GPU") == []
    assert not tf.config.experimental.tensor_float_32_execution_enabled()


def test_the_gpu_benchmark_says_it_found_no_gpu_and_exits_0():
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "no GPU" in result.stdout
    assert time.perf_counter() - began < 10  # it does not import TensorFlow to find out
