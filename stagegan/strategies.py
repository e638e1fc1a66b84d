"""The tf.distribute backends: `devices.strategy: mirrored | central_storage | multi_worker`.

The stage step is the same on every backend (see `stagegan.steps`); only the part that runs
the replicas and combines their gradients changes. On these backends, one training step does:

1. draw the global batch, with its random inputs, outside the replicas (on `devices.variables`,
   on every worker alike), exactly as the `towers` backend does;
2. `strategy.run` one replica function: replica r takes shard r of that batch, computes its loss
   terms and each update's gradients (None dropped: the pattern is the same on every replica),
   checks them for finiteness (the NaN guard), and all-reduces, in one batch, the gradients
   scaled by 1/replicas (so the SUM is the mean), the loss terms likewise, and a
   [replicas, terms + 1] count of non-finite values;
3. outside the replicas, the guard decides from the all-reduced flags (every replica and every
   worker sees the same values, so all take the same branch), and a second `strategy.run` hands
   the already-averaged gradients to each update's optimizer.

Keras 3's TensorFlow optimizer all-reduces (sums) gradients itself when it is called inside a
replica. Ours are already averaged, so `own_gradient_reduction` turns that off for stagegan's
optimizers (the backend tests compare every backend with a plain single-device loop to 1e-5,
which catches an N-fold gradient at once).

BatchNormalization follows the `towers` rule: every replica runs inside a `keras.StatelessScope`
and replica 0's writes to non-trainable variables (the moving statistics) are assigned after the
replicas return, so the statistics come from shard 0 alone. Under `multi_worker`, each worker
assigns its own first replica's values; the chief's are the ones checkpointed and sampled from.
"""

import json
import os

import keras
import tensorflow as tf

from stagegan.errors import ConfigError
from stagegan.towers import compiled, finite_flags, split_batch, tower_pass


def make_strategy(name, towers, variables):
    """The `tf.distribute.Strategy` of `devices.strategy` (None for `towers`).

    Args:
        name: `devices.strategy`.
        towers: the resolved tower device names (the replicas' devices).
        variables: the variable device (central_storage keeps the variables there).

    Raises:
        ConfigError: `multi_worker` without a usable `TF_CONFIG`.
    """
    if name == "towers":
        return None
    if name == "mirrored":
        reduce = None  # TensorFlow's choice: NCCL all-reduce between GPUs
        if any(device.startswith("/CPU:") for device in towers):
            # Between CPU devices TensorFlow picks collective ops, whose group keys clash
            # when a process makes a second strategy over a different number of devices.
            reduce = tf.distribute.ReductionToOneDevice(reduce_to_device=variables)
        return tf.distribute.MirroredStrategy(devices=list(towers), cross_device_ops=reduce)
    if name == "central_storage":
        return tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=list(towers), parameter_device=variables
        )
    worker_cluster()  # a clear error for a missing or broken TF_CONFIG
    # A collective operation that waits longer than this for a peer fails (a worker that
    # hangs); a dead worker's closed connection fails the others at once.
    timeout = float(os.environ.get("STAGEGAN_COLLECTIVE_TIMEOUT", "300"))
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def worker_cluster():
    """This process's place in the `TF_CONFIG` cluster: `(task_type, index, chief)`.

    The chief is the `chief` task, or worker 0 when the cluster has no `chief` (TensorFlow's
    rule). Read without TensorFlow, so the CLI can decide what this process writes first.

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


def replica_devices(strategy, towers):
    """A name per replica, in replica order, for messages (`guard`, `plan`)."""
    if strategy is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return tuple(towers)
    local = strategy.extended.worker_devices
    workers = strategy.num_replicas_in_sync // len(local)
    return tuple(
        f"worker {w} {device.split('/device:')[-1]}" for w in range(workers) for device in local
    )


def own_gradient_reduction(optimizer):
    """Stop `optimizer` all-reducing gradients inside a replica: stagegan hands it gradients
    that are already averaged over replicas (see the module doc)."""
    optimizer._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)


class StrategyReplicas:
    """Runs a stage step's replicas under a `tf.distribute.Strategy`.

    Args:
        strategy: the strategy.
        state_variables: `() -> list`, the networks' non-trainable variables, whose writes
            (BatchNormalization statistics) are taken from replica 0.
    """

    def __init__(self, strategy, state_variables, jit=False):
        self.strategy = strategy
        self.jit = jit
        self.count = strategy.num_replicas_in_sync
        self.state_variables = state_variables
        self._kept = {}  # trace time: update name -> which variables got a gradient

    def compute(self, plans, batch, compute_terms, guarded, scales=None):
        """Every replica's forward pass and gradients for `plans`, all-reduced.

        Returns:
            One dict per plan: `gradients` (the averaged gradients as this process's first
            replica holds them, aligned with the plan's variables, None where no replica got
            one), `terms` (the averaged loss terms), `detail` (bool [replicas, terms + 1],
            True where finite), and `payload` (the per-replica averaged gradients, for `apply`).
        """
        needed = tuple(dict.fromkeys(t for plan in plans for t in plan.terms))
        updates = [(plan.update.loss, plan.variables) for plan in plans]
        state = list(self.state_variables())
        count = self.count
        written_mask = []

        def replica(batch):
            context = tf.distribute.get_replica_context()
            index = int(tf.get_static_value(context.replica_id_in_sync_group))
            shard = split_batch(batch, count)[index]

            def forward_backward(shard):
                with keras.StatelessScope() as scope:
                    terms, gradients = tower_pass(
                        lambda shard: compute_terms(shard, needed), updates, shard, scales
                    )
                    writes = [scope.get_current_value(v) for v in state]
                return terms, gradients, writes

            terms, gradients, writes = compiled(forward_backward, self.jit)(shard)
            written_mask[:] = [w is not None for w in writes]
            flat, rows = [], []
            for plan, grads in zip(plans, gradients, strict=True):
                self._kept[plan.update.name] = [g is not None for g in grads]
                kept = [tf.convert_to_tensor(g) for g in grads if g is not None]
                flat += [g / count for g in kept]
                flat += [terms[t] / count for t in plan.terms]
                if guarded:
                    finite = finite_flags(terms, plan.terms, kept)
                    bad = tf.cast(tf.logical_not(finite), tf.float32)
                    rows.append(tf.one_hot(index, count)[:, None] * bad[None, :])
            reduced = list(context.all_reduce(tf.distribute.ReduceOp.SUM, flat + rows))
            out = []
            for plan, grads in zip(plans, gradients, strict=True):
                kept = sum(g is not None for g in grads)
                mean_grads, reduced = reduced[:kept], reduced[kept:]
                mean_terms, reduced = reduced[: len(plan.terms)], reduced[len(plan.terms) :]
                out.append({"gradients": mean_grads, "terms": mean_terms})
            details = [tf.equal(bad, 0.0) for bad in reduced]
            return out, details, [w for w in writes if w is not None]

        per_replica = self.strategy.run(replica, args=(batch,))
        local = lambda value: self.strategy.experimental_local_results(value)[0]
        out, details, writes = per_replica
        written = [v for v, wrote in zip(state, written_mask, strict=True) if wrote]
        for variable, value in zip(written, writes, strict=True):
            variable.assign(local(value))  # replica 0's statistics (see the module doc)
        results = []
        for k, plan in enumerate(plans):
            mean = iter(out[k]["gradients"])
            results.append(
                {
                    "gradients": [
                        local(next(mean)) if kept else None for kept in self._kept[plan.update.name]
                    ],
                    "terms": {
                        t: local(v) for t, v in zip(plan.terms, out[k]["terms"], strict=True)
                    },
                    "detail": (
                        local(details[k])
                        if guarded
                        else tf.ones([count, len(plan.terms) + 1], tf.bool)
                    ),
                    "payload": out[k]["gradients"],
                }
            )
        return results

    def apply(self, plan, payload, condition=None):
        """Apply the averaged gradients `payload` with `plan.optimizer` in every replica,
        only if `condition` (a bool scalar, the same on every replica and worker) holds."""
        kept = self._kept[plan.update.name]
        variables = [v for v, has in zip(plan.variables, kept, strict=True) if has]
        if not variables:
            return  # the update is a config error, raised when tracing ends

        def run():
            self.strategy.run(
                lambda grads: plan.optimizer.apply_gradients(zip(grads, variables, strict=True)),
                args=(payload,),
            )
            if plan.after_apply is not None:
                plan.after_apply()  # cross-replica: the same value into every copy
            return tf.constant(True)

        if condition is None:
            run()
        else:
            tf.cond(condition, run, lambda: tf.constant(False))
