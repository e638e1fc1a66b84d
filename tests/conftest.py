"""Shared test set-up: quiet TensorFlow, and 4 logical CPU devices standing in for GPUs.

The CPU must be split before TensorFlow initialises its devices, so it happens here, at
collection time, before any test module builds a model.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# XLA's CPU code generation without LLVM's optimisations: the `devices.jit` tests check what
# compiles and what it computes, not how fast; it halves their compile time (22 s -> 10 s).
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # so `tests/toytask.py` imports as `toytask`

import tensorflow as tf  # noqa: E402

LOGICAL_CPUS = 4
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(LOGICAL_CPUS)]
)

# Test speed, not behaviour: Grappler's graph rewrites are skipped in the test processes
# (they cost about half a second on every new step function and change no result the tests
# look at; runs in real `python -m stagegan` subprocesses keep them).
tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


# The slowest files first, so that two pytest-xdist workers (`--dist loadfile
# --no-loadscope-reorder`) finish together: measured seconds on 2 cores, largest first.
SLOWEST_FIRST = [
    "test_resume.py",
    "test_sample_eval.py",
    "test_presets.py",
    "test_multi_worker.py",
    "test_run_control.py",
    "test_offline_realism.py",
    "test_conditional.py",
    "test_completion.py",
    "test_augment.py",
    "test_training.py",
    "test_guard.py",
    "test_cli.py",
    "test_towers.py",
    "test_packing.py",
    "test_prepare.py",
    "test_strategies.py",
    "test_speed_options.py",
    "test_examples.py",
    "test_data.py",
    "test_bad_input.py",
    "test_disk_full.py",
    "test_api.py",
]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))
