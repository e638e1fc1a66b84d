"""Placement: where a run computes and where its variables live, resolved once per trainer.

`resolve_placement(devices, batch_size)` turns the `devices:` section into a `Placement`: the
compute devices of this process, a label per replica (of every worker), the variable device,
and the `tf.distribute` strategy (None for `towers`). It checks, once, that the devices exist,
that the global batch divides across the replicas, and that XLA can read the variables.

What `auto` means is decided by one pure function of the visible GPUs, `choose_layout`:

    visible GPUs   towers: auto / 1      variables: auto        strategy: auto
    none           /CPU:0                /CPU:0                 towers
    one            /GPU:0                /GPU:0 (the tower's)   towers
    several        every GPU (auto)      each replica's copy    mirrored

`devices.towers: N` uses N GPUs; with no GPU it splits the CPU into N logical devices (which
must happen before TensorFlow initialises its devices). `auto` is every visible GPU, or one CPU.
"""

import contextlib
import dataclasses
import math
import re
from dataclasses import dataclass

import tensorflow as tf

from stagegan.config.cluster import (
    TF_DEADLINE,
    check_batch_divides,
    collective_timeout,
    host_gpus,
    parameter_server_cluster,
    wait_for_servers,
    worker_cluster,
)
from stagegan.core.replicas import StrategyReplicas, TowerReplicas
from stagegan.errors import ConfigError

PS_DEVICE = "/job:ps/replica:0/task:0/device:CPU:0"  # parameter_server's own state
CHIEF_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"  # and its data


@dataclass(frozen=True)
class Layout:
    """What `choose_layout` decides: device names (`/CPU:0`, `/GPU:1`) and a backend name."""

    towers: tuple
    variables: str
    strategy: str  # towers | mirrored | central_storage


def choose_layout(config, gpus, batch_size):
    """Where a run computes, from its `devices:` section and the visible GPUs alone.

    `auto` means: variables on the first tower's device when the towers backend runs on a
    GPU, else on /CPU:0 (also under mirrored and central_storage, which keep their own copies
    or their parameter device there); strategy `mirrored` over two or more GPU towers, else
    `towers`; towers every visible GPU (the most of them that divide `batch_size`), else
    /CPU:0. So on CPUs `auto` is the layout stagegan always had. Explicit settings stay.

    Args:
        config: a `config.DevicesConfig` (not `multi_worker`).
        gpus: how many GPUs TensorFlow sees (logical GPUs).
        batch_size: the global batch.

    Returns:
        A `Layout`.

    Raises:
        ConfigError: a device name that is not a device, a GPU that is not visible, more
            towers than GPUs.
    """
    towers = config.towers
    if towers == "auto":
        count = max([k for k in range(1, gpus + 1) if batch_size % k == 0], default=0)
        names = [f"/GPU:{i}" for i in range(count)] or ["/CPU:0"]
    elif isinstance(towers, int):
        if gpus and towers > gpus:
            raise ConfigError(
                "devices.towers", f"{towers} towers requested but only {gpus} GPUs are visible"
            )
        names = [f"/{'GPU' if gpus else 'CPU'}:{i}" for i in range(towers)]
    else:
        names = [_normalise(name, "devices.towers") for name in towers]
    strategy = config.strategy
    if strategy == "auto":
        on_gpus = len(names) > 1 and all(name.startswith("/GPU:") for name in names)
        strategy = "mirrored" if on_gpus else "towers"
    if config.variables == "auto":
        first = names[0]
        variables = first if strategy == "towers" and first.startswith("/GPU:") else "/CPU:0"
    else:
        variables = _normalise(config.variables, "devices.variables")
    for key, name in [("devices.towers", n) for n in names] + [("devices.variables", variables)]:
        if name.startswith("/GPU:") and _index(name) >= gpus:
            seen = f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU"
            raise ConfigError(key, f"device {name} does not exist (TensorFlow sees {seen})")
    return Layout(tuple(names), variables, strategy)


def visible_gpus():
    """How many GPUs TensorFlow will show this process (without initialising its devices):
    the visible physical GPUs, each counted as its logical devices."""
    return sum(
        len(tf.config.get_logical_device_configuration(gpu) or [None])
        for gpu in tf.config.get_visible_devices("GPU")
    )


def gpu_warning(config, gpus, driver_gpus):
    """One line when GPUs were asked for but TensorFlow sees none, else None.

    Args:
        config: a `config.DevicesConfig`.
        gpus: how many GPUs TensorFlow sees.
        driver_gpus: how many NVIDIA GPUs the driver shows this process (`cluster.host_gpus`:
            `nvidia-smi`, narrowed by `CUDA_VISIBLE_DEVICES`), so that a broken CUDA install
            is not silent; 0 when they are hidden on purpose.
    """
    if gpus:
        return None
    if driver_gpus:
        return (
            f"this machine has {driver_gpus} NVIDIA GPU{'s' if driver_gpus > 1 else ''} but "
            "TensorFlow sees none (CPU-only TensorFlow, or CUDA libraries it cannot load: "
            "pip install 'tensorflow[and-cuda]'); training on the CPU"
        )
    if config.mixed_precision == "float16":
        return (
            "devices.mixed_precision: float16 is for GPUs and TensorFlow sees none; "
            "computing float16 on the CPU (slow; bfloat16 with devices.jit suits CPUs better)"
        )
    return None


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
        backend: the resolved `devices.strategy` (never `auto`).
        warning: `gpu_warning`'s line, or None.
        coordinator: `parameter_server`'s `tf.distribute.coordinator.ClusterCoordinator`,
            which schedules every step on a worker; None for the other backends.
        workers, servers: how many workers the coordinator schedules on, and how many
            parameter servers hold the variables (`parameter_server`).
    """

    towers: tuple
    labels: tuple
    variables: str
    strategy: object = None
    jit: bool = False
    backend: str = "towers"
    warning: object = None
    coordinator: object = None
    workers: int = 1  # `parameter_server`'s worker tasks
    servers: int = 0  # and its parameter servers

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
            self.strategy, self.labels, self.variables, state_variables, self.jit, self.coordinator
        )

    def describe(self):
        """The one line `train` and `plan` print, e.g. `devices: variables on /CPU:0,
        1 tower (/CPU:0), data on the host CPU`."""
        count = len(self.labels)
        plural = "s" if count > 1 else ""
        listed = f"({', '.join(self.labels)})"
        if self.backend == "parameter_server":
            workers, servers = self.workers, self.servers
            return (
                f"devices: parameter_server: variables on {servers} parameter server"
                f"{'s' if servers > 1 else ''}, each step on one of {workers} worker"
                f"{'s' if workers > 1 else ''} (asynchronous between log, checkpoint and "
                "stage boundaries), data read on the chief, batches drawn on /job:ps/task:0"
            )
        if self.backend in ("mirrored", "multi_worker"):
            where = f"{self.backend}: variables copied to each of {count} replicas {listed}"
        elif self.backend == "central_storage":
            where = (
                f"central_storage: variables on {self.variables}, {count} replica{plural} {listed}"
            )
        else:
            where = f"variables on {self.variables}, {count} tower{plural} {listed}"
        # Batches (and their random inputs) are drawn on the variable device; tf.data
        # sources read and decode on the host CPU, and an image task's batches are staged a
        # step ahead on the variable device (stagegan.core.staging).
        if self.variables.startswith("/CPU:"):
            data = "data on the host CPU"
        else:
            data = f"data read on the host CPU, batches staged a step ahead on {self.variables}"
        return f"devices: {where}, {data}"


def resolve_placement(config, batch_size):
    """The `Placement` of a `config.DevicesConfig` (`auto`: see `choose_layout`) for global
    batches `batch_size` (an int, or `{config key: global batch}`: `RunConfig.batch_sizes`).

    Raises:
        ConfigError: more towers than devices, an unknown device name, a batch that does not
            divide across the replicas, XLA with variables apart from the compute devices,
            `multi_worker` without a usable `TF_CONFIG`.
    """
    gpus = visible_gpus()
    # GPUs TensorFlow found but was told to hide (`set_visible_devices`) are hidden on purpose.
    found = gpus or tf.config.list_physical_devices("GPU")
    warning = gpu_warning(config, gpus, 0 if found else len(host_gpus()))
    if config.strategy == "multi_worker":
        variables = (
            "/CPU:0"
            if config.variables == "auto"
            else _normalise(config.variables, "devices.variables")
        )
        # Made before anything else initialises TensorFlow's devices (it must be); it uses
        # every local GPU of each worker, or its CPU, as TensorFlow decides.
        strategy = _multi_worker_strategy()
        local = tuple(strategy.extended.worker_devices)
        workers = strategy.num_replicas_in_sync // len(local)
        labels = tuple(
            f"worker {w} {device.split('/device:')[-1]}" for w in range(workers) for device in local
        )
        towers, backend = local, "multi_worker"
    elif config.strategy == "parameter_server":
        strategy, coordinator, cluster = _parameter_server_strategy()
        # Each step runs whole on one worker, which the coordinator picks; the run's own
        # state (counters, random streams, the EMA, an in-memory data set) lives on the
        # first parameter server, where the optimizers apply.
        variables = PS_DEVICE
        towers, labels, backend = ("/CPU:0",), ("worker",), "parameter_server"
    else:
        sizes = batch_size.values() if isinstance(batch_size, dict) else [batch_size]
        layout = choose_layout(config, gpus, math.gcd(*sizes))
        towers, variables, backend = layout.towers, layout.variables, layout.strategy
        _check_devices_exist(towers, variables)
        strategy = _local_strategy(backend, towers, variables)
        labels = towers
    check_batch_divides(batch_size, len(labels))
    placement = Placement(towers, labels, variables, strategy, config.jit, backend, warning)
    if backend == "parameter_server":
        placement = dataclasses.replace(
            placement,
            coordinator=coordinator,
            workers=len(cluster["worker"]),
            servers=len(cluster["ps"]),
        )
    _check_jit(placement)
    return placement


def _check_devices_exist(names, variables):
    """Split the CPU as far as the names need, then check every name is a device."""
    wanted_cpus = max(
        [_index(name) + 1 for name in [*names, variables] if name.startswith("/CPU:")], default=1
    )
    split_cpu(wanted_cpus)
    available = {_normalise(d.name, "devices") for d in tf.config.list_logical_devices()}
    for key, name in [("devices.towers", n) for n in names] + [("devices.variables", variables)]:
        if name not in available:
            raise ConfigError(
                key, f"device {name} does not exist (available: {', '.join(sorted(available))})"
            )


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
    # TensorFlow's own deadline is past the longest of stagegan's (`watchdogs.PeerDeadline`): when
    # a peer stops answering, the loop ends the process first. TensorFlow's abort of a
    # collective whose receive from the silent peer is still pending can free the
    # operation's cancellation manager before that receive's gRPC call completes, which then
    # dies by SIGSEGV (`CancellationManager::DeregisterCallback` from `CancellableCall`, TF
    # 2.21; seen under CPU load, 1 run in 3). It stays the deadline of what the loop does not
    # watch: a step function's first run (it traces) and a checkpoint's collectives.
    timeout = TF_DEADLINE * collective_timeout() or None  # 0: none
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def _parameter_server_strategy():
    """TensorFlow's `ParameterServerStrategy` over the `TF_CONFIG` cluster (this process is
    its chief), the `ClusterCoordinator` that schedules steps on its workers, and the
    cluster (`{job: [address]}`)."""
    cluster, _, _ = parameter_server_cluster()  # a clear error for a broken TF_CONFIG
    wait_for_servers(cluster)  # TensorFlow would wait for a missing one forever, silently
    tf.get_logger().addFilter(_expected_on_the_coordinator)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    try:
        strategy = tf.distribute.ParameterServerStrategy(resolver)
    except tf.errors.OpError as error:  # its own address: the port is taken
        raise ConfigError(
            "TF_CONFIG",
            f"the chief cannot serve at {cluster['chief'][0]}: "
            f"{str(error).strip().splitlines()[0]}",
        ) from None
    return strategy, tf.distribute.coordinator.ClusterCoordinator(strategy), cluster


def _expected_on_the_coordinator(record):
    """TensorFlow's warnings about what the coordinator does by design: trace each stage's
    step before scheduling it (to find None gradients), and save checkpoints of variables
    that live on the parameter servers (its saver traces each save again)."""
    text = record.getMessage()
    return not (
        "invoked without using `ClusterCoordinator.schedule`" in text
        or ("MultiDeviceSaver" in text and "retracing" in text)
    )


def _check_jit(placement):
    """`devices.jit` compiles each replica's forward and backward pass with XLA, on its
    device. XLA cannot read a variable that lives on another device, so the variables must
    live where the replicas compute."""
    if not placement.jit:
        return
    if placement.backend == "central_storage":
        raise ConfigError(
            "devices.jit",
            "XLA cannot read variables kept on another device, and central_storage keeps them "
            "on devices.variables; use devices.strategy: mirrored",
        )
    apart = [t for t in placement.towers if t != placement.variables]
    if placement.backend == "towers" and apart:
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
