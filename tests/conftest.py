"""Shared test set-up: quiet TensorFlow, the CPU only, and 4 logical CPU devices standing in
for GPUs.

The suite runs on the CPU on any machine, so its numeric comparisons hold on a GPU host too:
GPUs are hidden (`CUDA_VISIBLE_DEVICES=""` for this process and every `stagegan` subprocess
it starts, and `set_visible_devices`) and TF32 matmuls are off. The CPU must be split before
TensorFlow initialises its devices, so it happens here, at collection time, before any test
module builds a model.
"""

import gc
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# XLA's CPU code generation without LLVM's optimisations: the `devices.jit` tests check what
# compiles and what it computes, not how fast; it halves their compile time (22 s -> 10 s).
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before TensorFlow loads CUDA; inherited by subprocesses
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # so `tests/toytask.py` imports as `toytask`

import tensorflow as tf  # noqa: E402

tf.config.set_visible_devices([], "GPU")  # should CUDA already have been loaded
tf.config.experimental.enable_tensor_float_32_execution(False)

LOGICAL_CPUS = 4
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(LOGICAL_CPUS)]
)

# Test speed, not behaviour: Grappler's graph rewrites are skipped in the test processes
# (they cost about half a second on every new step function and change no result the tests
# look at; runs in real `python -m stagegan` subprocesses keep them).
tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})

# Test speed, not behaviour: graph ops are created without their Python stacks (see
# tests/opstacks.py; the forked processes skip them too, fresh subprocesses keep them).
from opstacks import skip_op_stacks  # noqa: E402

skip_op_stacks()

# The slowest files first, so that two pytest-xdist workers (`--dist loadfile
# --no-loadscope-reorder`) finish together: measured seconds on 2 cores, largest first
# (`--durations=0`, summed per file).
SLOWEST_FIRST = [
    "test_resume.py",
    "test_progressive.py",
    "test_sample_eval.py",
    "test_parameter_server.py",
    "test_presets_heavy.py",
    "test_multi_worker.py",
    "test_namespaces.py",
    "test_augment.py",
    "test_offline_realism.py",
    "test_conditional.py",
    "test_presets.py",
    "test_run_control.py",
    "test_stage_batch.py",
    "test_training.py",
    "test_completion.py",
    "test_regularisers.py",
    "test_channels.py",
    "test_cli.py",
    "test_resnet.py",
    "test_hole_target.py",
    "test_guard.py",
    "test_bad_input.py",
    "test_strategies.py",
    "test_memorisation.py",
    "test_data.py",
    "test_examples.py",
    "test_packing.py",
    "test_speed_options.py",
    "test_prepare.py",
    "test_outputs.py",
    "test_keep_best.py",
    "test_clusters.py",
    "test_staging.py",
    "test_disk_full.py",
    "test_api.py",
    "test_ema.py",
    "test_realism.py",
    "test_readable_logs.py",
    "test_warm_start.py",
    "test_gpu_ready.py",
    "test_holdout.py",
]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))


@pytest.fixture(autouse=True, scope="module")
def _freeze_what_survives():
    """After each test module, leave what survived it out of Python's later full garbage
    collections (`gc.freeze`): those scan every tracked object, and a pytest worker ends
    up holding millions, because each traced step function stays alive for good (it
    registers a gradient function globally through `tf.custom_gradient`, which
    `ReplicaContext.all_reduce` and Keras' optimizers use; tensorflow/tensorflow#97697).
    Late in a worker, one test's collections cost up to 28 s (a k-means test), and a
    fuzz test's 40 s. Freeing those graphs instead (dropping the registered functions)
    costs more: 2 to 6 s of deallocation per module."""
    yield
    gc.freeze()


gc.freeze()  # TensorFlow's and Keras' half a million import-time objects: never garbage
