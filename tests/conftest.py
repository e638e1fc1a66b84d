"""Shared test set-up: quiet TensorFlow, and 4 logical CPU devices standing in for GPUs.

The CPU must be split before TensorFlow initialises its devices, so it happens here, at
collection time, before any test module builds a model.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # so `tests/toytask.py` imports as `toytask`

import tensorflow as tf  # noqa: E402

LOGICAL_CPUS = 4
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(LOGICAL_CPUS)]
)
