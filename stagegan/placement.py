"""Placement: where a run computes and where its variables live, resolved once per trainer.

`resolve_placement(devices, batch_size)` turns the `devices:` section into a `Placement`: the
compute devices of this process, a label per replica (of every worker), the variable device,
and the `tf.distribute` strategy (None for `towers`). It checks, once, that the devices exist,
that the global batch divides across the replicas, and that XLA can read the variables.

`devices.towers: N` uses N GPUs; with no GPU it splits the CPU into N logical devices (which
must happen before TensorFlow initialises its devices). `auto` is every visible GPU, or one CPU.
"""

import contextlib
import os
import re
from dataclasses import dataclass

import tensorflow as tf

from stagegan.cluster import worker_cluster
from stagegan.config import check_batch_divides
from stagegan.errors import ConfigError
from stagegan.replicas import StrategyReplicas, TowerReplicas


@dataclass(frozen=True)
class Placement:
    """Where a run computes.

    Attributes:
        towers: this process's compute devices (the towers, or a strategy's local devices).
        labels: a name per replica, of every worker, in replica order (for messages).
        variables: the variable device (where optimizers apply, batches are drawn, the EMA
            and the checkpointed counters live).
        strategy: the `tf.distribute.Strategy`, or None for `towers`.
        jit: compile each replica's pass with XLA.
    """

    towers: tuple
    labels: tuple
    variables: str
    strategy: object = None
    jit: bool = False

    @property
    def replicas(self):
        """How many replicas share the global batch (of every worker)."""
        return len(self.labels)

    def scope(self):
        """Where networks and optimizers create their variables: the strategy's scope, or
        (`towers`) the current device scope."""
        return self.strategy.scope() if self.strategy else contextlib.nullcontext()

    def make_replicas(self, state_variables):
        """The `replicas.Replicas` that run a stage step here."""
        if self.strategy is None:
            return TowerReplicas(self.towers, self.variables, state_variables, self.jit)
        return StrategyReplicas(
            self.strategy, self.labels, self.variables, state_variables, self.jit
        )


def resolve_placement(config, batch_size):
    """The `Placement` of a `config.DevicesConfig`.

    Raises:
        ConfigError: more towers than devices, an unknown device name, a batch that does not
            divide across the replicas, XLA with variables apart from the compute devices,
            `multi_worker` without a usable `TF_CONFIG`.
    """
    variables = _normalise(config.variables, "devices.variables")
    if config.strategy == "multi_worker":
        # Made before anything else initialises TensorFlow's devices (it must be); it uses
        # every local GPU of each worker, or its CPU, as TensorFlow decides.
        strategy = _multi_worker_strategy()
        local = tuple(strategy.extended.worker_devices)
        workers = strategy.num_replicas_in_sync // len(local)
        labels = tuple(
            f"worker {w} {device.split('/device:')[-1]}" for w in range(workers) for device in local
        )
        towers = local
    else:
        towers = _tower_devices(config.towers, variables)
        strategy = _local_strategy(config.strategy, towers, variables)
        labels = towers
    check_batch_divides(batch_size, len(labels))
    placement = Placement(towers, labels, variables, strategy, config.jit)
    _check_jit(config, placement)
    return placement


def _tower_devices(towers, variables):
    gpus = tf.config.list_physical_devices("GPU")
    if towers == "auto":
        names = [f"/GPU:{i}" for i in range(len(gpus))] or ["/CPU:0"]
    elif isinstance(towers, int):
        if gpus:
            if towers > len(gpus):
                raise ConfigError(
                    "devices.towers",
                    f"{towers} towers requested but only {len(gpus)} GPUs are visible",
                )
            names = [f"/GPU:{i}" for i in range(towers)]
        else:
            names = [f"/CPU:{i}" for i in range(towers)]
    else:
        names = [_normalise(name, "devices.towers") for name in towers]
    wanted_cpus = max(
        [_index(name) + 1 for name in names + [variables] if name.startswith("/CPU:")], default=1
    )
    split_cpu(wanted_cpus)
    available = {_normalise(d.name, "devices") for d in tf.config.list_logical_devices()}
    for key, name in [("devices.towers", n) for n in names] + [("devices.variables", variables)]:
        if name not in available:
            raise ConfigError(
                key, f"device {name} does not exist (available: {', '.join(sorted(available))})"
            )
    return tuple(names)


def _local_strategy(name, towers, variables):
    if name == "towers":
        return None
    if name == "mirrored":
        reduce = None  # TensorFlow's choice: NCCL all-reduce between GPUs
        if any(device.startswith("/CPU:") for device in towers):
            # Between CPU devices TensorFlow picks collective ops, whose group keys clash
            # when a process makes a second strategy over a different number of devices.
            reduce = tf.distribute.ReductionToOneDevice(reduce_to_device=variables)
        return tf.distribute.MirroredStrategy(devices=list(towers), cross_device_ops=reduce)
    return tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=list(towers), parameter_device=variables
    )


def _multi_worker_strategy():
    worker_cluster()  # a clear error for a missing or broken TF_CONFIG
    # A collective operation that waits longer than this for a peer fails (a worker that
    # hangs); a dead worker's closed connection fails the others at once.
    timeout = float(os.environ.get("STAGEGAN_COLLECTIVE_TIMEOUT", "300"))
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def _check_jit(config, placement):
    """`devices.jit` compiles each replica's forward and backward pass with XLA, on its
    device. XLA cannot read a variable that lives on another device, so the variables must
    live where the replicas compute."""
    if not config.jit:
        return
    if config.strategy == "central_storage":
        raise ConfigError(
            "devices.jit",
            "XLA cannot read variables kept on another device, and central_storage keeps them "
            "on devices.variables; use devices.strategy: mirrored",
        )
    apart = [t for t in placement.towers if t != placement.variables]
    if config.strategy == "towers" and apart:
        raise ConfigError(
            "devices.jit",
            f"XLA cannot read variables on {placement.variables} from towers on "
            f"{', '.join(apart)}; use devices.strategy: mirrored (variables on every tower's "
            "device), or one tower on the variable device",
        )


def split_cpu(count):
    """Make at least `count` logical CPU devices (`/CPU:0`...), if TensorFlow still allows it.

    Raises:
        ConfigError: when TensorFlow was already initialised with fewer CPU devices.
    """
    if count <= 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu) or [None]
    if len(current) < count:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
            )
        except RuntimeError:
            pass  # already initialised; checked below
    available = len(tf.config.list_logical_devices("CPU"))
    if available < count:
        raise ConfigError(
            "devices.towers",
            f"{count} CPU towers requested, but TensorFlow was already started with {available} "
            "CPU devices in this process",
        )


def _normalise(name, key):
    match = re.fullmatch(r"/?(?:device:)?(CPU|GPU|cpu|gpu):(\d+)", str(name).split("/device:")[-1])
    if not match:
        raise ConfigError(key, f"device names look like /CPU:0 or /GPU:1. Received: {name!r}")
    return f"/{match.group(1).upper()}:{int(match.group(2))}"


def _index(name):
    return int(name.rsplit(":", 1)[1])
