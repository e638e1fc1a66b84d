"""Replicas: where a stage step's forward and backward passes run, and where their gradients
are averaged. One interface, two implementations:

* `TowerReplicas` (`devices.strategy: towers`), the TF1 `cifar10_multi_gpu_train.py` recipe made
  safe for stages: each tower computes on its own device, on its shard of the batch, and the
  tower gradients are summed on the variable device, where the optimizers apply them.
* `StrategyReplicas` (`mirrored`, `central_storage`, `multi_worker`): the same replica pass
  under `strategy.run`, summed by one batched all-reduce; a second `strategy.run` applies.

Both do the same three things, in `Replicas.compute`:

1. every replica runs `replica_pass` on shard r of the global batch: its loss terms, each
   update's gradients (None where the loss does not reach a variable), and the writes its
   forward pass made to the networks' state, caught in a `keras.StatelessScope`;
2. `contribution` is what replica r adds to the sums: every gradient and loss term, and a
   one-hot [replicas, terms + 1] row of its non-finite values for the NaN guard;
3. the backend sums the contributions over replicas (`sum_contributions`: add_n on the
   variable device, or one all-reduce), `average` divides the sums of gradients and terms by
   the replica count (the one averaging rule of stagegan: the mean over replicas, each
   replica's shard weighing the same), and `Averaged` records come back, one per update.

A variable that no replica gets a gradient for is dropped from its update (the TF1 recipe
crashes there); one that some replicas reach counts as a zero gradient in the others, so the
mean is always over all replicas (the gradient of the mean of the replica losses).

State (BatchNormalization statistics, any non-trainable variable a forward pass writes) comes
from replica 0's shard, and is written only by an update that trains the network it belongs
to, with that update's gradients: a frozen network runs on batch statistics, as in training,
and its writes are discarded (see `UpdatePlan.state`). The state of random number generators
(the seeds of Dropout layers) is not network state: it always advances, so masks differ from
step to step.

Keras 3's TensorFlow optimizer all-reduces (sums) gradients itself when it is called inside a
replica. Ours are already averaged, so `own_gradient_reduction` turns that off for stagegan's
optimizers (the backend tests compare every backend with a plain single-device loop to 1e-5,
which catches an N-fold gradient at once).
"""

from dataclasses import dataclass

import keras
import tensorflow as tf

from stagegan.core.layers import one_pass


@dataclass(frozen=True)
class Averaged:
    """One update's gradients and loss terms, averaged over replicas, at trace time.

    Attributes:
        variables: the update's variables that get a gradient (a property of the traced
            update; the others are `dropped`).
        dropped: the update's variables no replica gets a gradient for.
        gradients: the mean gradients, aligned with `variables`, as this process holds them.
        terms: `{term: mean value}`.
        detail: bool [replicas, terms + 1]: True where each replica's loss term (columns in
            `loss` order) and gradients (last column) were finite.
        payload: what `Replicas.apply` applies (per-replica values under a strategy).
        state: `(variable, value)` pairs: replica 0's writes to the state of the networks
            the update trains.
    """

    variables: tuple
    dropped: tuple
    gradients: tuple
    terms: dict
    detail: tf.Tensor
    payload: object
    state: tuple


class Replicas:
    """The one replica interface. `compute` runs every replica and averages; `apply` applies
    one update's averaged gradients and state writes.

    Args:
        labels: a name per replica, in replica order, for messages.
        variables: the variable device.
        state_variables: `() -> list`, every network's non-trainable variables.
        jit: compile each replica's pass with XLA.
    """

    coordinator = None  # `parameter_server`'s ClusterCoordinator (StrategyReplicas)

    def __init__(self, labels, variables, state_variables, jit=False):
        self.labels = tuple(labels)
        self.count = len(self.labels)
        self.variables = variables
        self.state_variables = state_variables
        self.jit = jit

    def compute(self, plans, batch, compute_terms, guarded, scales=None):
        """Every replica's pass over its shard of `batch` for `plans`, averaged.

        Args:
            plans: the `steps.UpdatePlan`s computed together (one forward pass).
            batch: the global batch (a dict of tensors).
            compute_terms: `(shard, terms) -> {term: float32 scalar}`.
            guarded: check finiteness (else `detail` is all True).
            scales: None, or one loss scale (scalar tensor or None) per plan.

        Returns:
            One `Averaged` per plan.
        """
        state = list(self.state_variables())
        terms = tuple(dict.fromkeys(t for plan in plans for t in plan.reported))
        updates = [(plan.update.loss, plan.variables) for plan in plans]
        forward = lambda shard: compute_terms(shard, terms)
        run = lambda shard, scope: replica_pass(forward, updates, shard, state, scales, scope)
        totals, kept, writes, local = self._run(plans, run, batch, guarded)
        written = {id(v): w for v, w in zip(state, writes, strict=True) if w is not None}
        with tf.device(self.variables):  # random layers' seeds advance whatever is applied
            for variable in state:
                if is_rng_state(variable) and id(variable) in written:
                    variable.assign(local(written[id(variable)]))
        out, totals = [], iter(totals)
        for plan, mask in zip(plans, kept, strict=True):
            grads = [next(totals) for has in mask if has]
            means = {t: next(totals) for t in plan.reported}
            detail = next(totals) if guarded else None
            out.append(
                Averaged(
                    variables=tuple(v for v, has in zip(plan.variables, mask, strict=True) if has),
                    dropped=tuple(
                        v for v, has in zip(plan.variables, mask, strict=True) if not has
                    ),
                    gradients=tuple(local(g) for g in grads),
                    terms={t: local(v) for t, v in means.items()},
                    detail=(
                        tf.equal(local(detail), 0.0)
                        if guarded
                        else tf.ones([self.count, len(plan.terms) + 1], tf.bool)
                    ),
                    payload=grads,
                    state=tuple((v, local(written[id(v)])) for v in plan.state if id(v) in written),
                )
            )
        return out

    def apply(self, plan, averaged):
        """Apply `averaged` with `plan.optimizer`, write the state, run `plan.after_apply`.
        Traced code; returns True (for `tf.cond`)."""
        if averaged.variables:  # else a config error, raised when tracing ends
            self._apply_gradients(plan.optimizer, averaged)
        with tf.device(self.variables):
            for variable, value in averaged.state:
                variable.assign(value)
            if plan.after_apply is not None:
                plan.after_apply()
        return tf.constant(True)

    def _run(self, plans, run, batch, guarded):
        """Run `run(shard, scope) -> (terms, gradients, writes)` on every replica and sum the
        contributions: `(totals, kept, writes, local)`; `local` maps a total to the value
        this process holds."""
        raise NotImplementedError

    def _apply_gradients(self, optimizer, averaged):
        raise NotImplementedError


class TowerReplicas(Replicas):
    """The `towers` backend: one replica per device, run one after another in the step.

    Args:
        devices: the tower device names.
        variables, state_variables, jit: see `Replicas`.
    """

    def __init__(self, devices, variables, state_variables, jit=False):
        super().__init__(devices, variables, state_variables, jit)
        self.devices = tuple(devices)

    def _run(self, plans, run, batch, guarded):
        shards = split_batch(batch, self.count)
        # All towers run in one StatelessScope, so stateful random layers (Dropout) draw
        # different masks on every tower; under XLA each compiled tower needs its own.
        shared = keras.StatelessScope()
        passes = []
        for shard, device in zip(shards, self.devices, strict=True):
            scope = keras.StatelessScope() if self.jit else shared
            with tf.device(device):
                passes.append(compiled(run, self.jit)(shard, scope))
        kept = kept_gradients([gradients for _, gradients, _ in passes], plans)
        parts = []
        for index, ((terms, gradients, _), device) in enumerate(
            zip(passes, self.devices, strict=True)
        ):
            with tf.device(device):
                parts.append(
                    contribution(plans, terms, gradients, kept, index, self.count, guarded)
                )
        with tf.device(self.variables):
            totals = average(sum_contributions(parts), plans, kept, self.count, guarded)
        return totals, kept, passes[0][2], lambda value: value

    def _apply_gradients(self, optimizer, averaged):
        with tf.device(self.variables):
            optimizer.apply_gradients(zip(averaged.gradients, averaged.variables, strict=True))


class StrategyReplicas(Replicas):
    """The `tf.distribute` backends: the replicas of `strategy` (of every worker).

    Under `multi_worker` each worker writes its own first replica's state; the chief's is the
    one checkpointed and sampled from. Under `parameter_server` (`coordinator` given) the
    step function runs whole on one worker at a time: `StageStep` schedules it there.
    """

    def __init__(self, strategy, labels, variables, state_variables, jit=False, coordinator=None):
        super().__init__(labels, variables, state_variables, jit)
        self.strategy = strategy
        self.coordinator = coordinator

    def _run(self, plans, run, batch, guarded):
        count, found = self.count, {}

        def replica(shard):
            context = tf.distribute.get_replica_context()
            index = int(tf.get_static_value(context.replica_id_in_sync_group))
            terms, gradients, writes = compiled(run, self.jit)(shard, keras.StatelessScope())
            found["kept"] = kept = kept_gradients([gradients], plans)
            found["written"] = [w is not None for w in writes]
            parts = contribution(plans, terms, gradients, kept, index, count, guarded)
            totals = context.all_reduce(tf.distribute.ReduceOp.SUM, parts)
            return average(totals, plans, kept, count, guarded), [
                w for w in writes if w is not None
            ]

        # Each replica gets its own shard (on its device), not the whole batch to slice.
        shards = split_batch(batch, count)
        per_replica = self.strategy.experimental_distribute_values_from_function(
            lambda context: shards[context.replica_id_in_sync_group]
        )
        totals, writes = self.strategy.run(replica, args=(per_replica,))
        writes = iter(writes)
        writes = [next(writes) if wrote else None for wrote in found["written"]]
        local = lambda value: self.strategy.experimental_local_results(value)[0]
        return list(totals), found["kept"], writes, local

    def _apply_gradients(self, optimizer, averaged):
        variables = averaged.variables
        self.strategy.run(
            lambda grads: optimizer.apply_gradients(zip(grads, variables, strict=True)),
            args=(averaged.payload,),
        )


def is_rng_state(variable):
    """Whether `variable` is the state of a Keras `SeedGenerator` (Dropout's masks): not
    network state (see the module doc)."""
    return variable.name == "seed_generator_state"


def own_gradient_reduction(optimizer):
    """Stop `optimizer` all-reducing gradients inside a replica: stagegan hands it gradients
    that are already averaged over replicas (see the module doc)."""
    optimizer._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)


def replica_pass(compute_terms, updates, shard, state, scales=None, scope=None):
    """One replica's forward and backward pass: `(terms, gradients, writes)`.

    `gradients[k]` is aligned with update k's variables (None where its loss does not reach a
    variable). With `scales`, update k's loss is multiplied by `scales[k]` before
    differentiating and its gradients divided by it again (mixed precision's loss scaling,
    which keeps small float16 gradients from underflowing); gradients come back as float32.
    The forward pass runs in `scope` (a `keras.StatelessScope`); `writes` are its values of
    the `state` variables, None where it wrote none.
    """
    scales = scales or [None] * len(updates)
    scope = scope or keras.StatelessScope()
    with tf.GradientTape(persistent=len(updates) > 1) as tape:
        with scope, one_pass():
            terms = compute_terms(shard)
            writes = [scope.get_current_value(v) for v in state]
        losses = [weighted_loss(terms, weights) for weights, _ in updates]
        losses = [
            loss if scale is None else loss * scale
            for loss, scale in zip(losses, scales, strict=True)
        ]
    gradients = []
    for loss, (_, variables), scale in zip(losses, updates, scales, strict=True):
        grads = tape.gradient(loss, variables)
        if scale is not None:
            grads = [
                None if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32) / scale
                for g in grads
            ]
        gradients.append(grads)
    del tape
    return terms, gradients, writes


def kept_gradients(replica_gradients, plans):
    """Per plan, a bool per variable: whether any replica got a gradient for it."""
    return [
        [
            any(grads[k][j] is not None for grads in replica_gradients)
            for j in range(len(p.variables))
        ]
        for k, p in enumerate(plans)
    ]


def contribution(plans, terms, gradients, kept, index, count, guarded):
    """What replica `index` adds to the sums over replicas, in every backend. Per plan: each
    kept gradient (zeros where this replica has none; IndexedSlices made dense) and each loss
    term, then (guarded) a one-hot [replicas, terms + 1] row counting this replica's
    non-finite terms and gradients."""
    parts = []
    for k, plan in enumerate(plans):
        grads = [
            tf.zeros_like(variable) if g is None else tf.convert_to_tensor(g)
            for g, variable, has in zip(gradients[k], plan.variables, kept[k], strict=True)
            if has
        ]
        parts += grads
        parts += [terms[t] for t in plan.reported]
        if guarded:
            bad = tf.cast(tf.logical_not(finite_flags(terms, plan.terms, grads)), tf.float32)
            parts.append(tf.one_hot(index, count)[:, None] * bad[None, :])
    return parts


def sum_contributions(parts):
    """The towers' sum of their `contribution`s, value by value (the strategies' is one
    all-reduce)."""
    return [
        column[0] if len(column) == 1 else tf.add_n(column) for column in zip(*parts, strict=True)
    ]


def average(totals, plans, kept, count, guarded):
    """The averaging rule of every backend: the sums of the replicas' gradients and loss
    terms (laid out as `contribution` packs them) divided by the replica count; the guard's
    rows stay counts."""
    if count == 1:
        return list(totals)
    out, values = [], iter(totals)
    for plan, mask in zip(plans, kept, strict=True):
        out += [next(values) / count for _ in range(sum(mask) + len(plan.reported))]
        if guarded:
            out.append(next(values))
    return out


def split_batch(batch, count):
    """Split every tensor of a batch (a dict) along axis 0 into `count` equal shards."""
    if count == 1:
        return [batch]
    pieces = {key: tf.split(value, count, axis=0) for key, value in batch.items()}
    return [{key: pieces[key][i] for key in batch} for i in range(count)]


def compiled(function, jit):
    """`function` compiled with XLA when `jit` (a fresh `tf.function` per call site, traced
    once inside the stage step's own single trace), else `function` itself."""
    if not jit:
        return function
    return tf.function(function, jit_compile=True, autograph=False)


def finite_flags(terms, names, gradients):
    """One replica's finiteness, a bool vector: each loss term in `names`, then all of
    `gradients` together."""
    flags = [tf.math.is_finite(terms[name]) for name in names]
    checks = [tf.reduce_all(tf.math.is_finite(g)) for g in gradients]
    flags.append(tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True))
    return tf.stack(flags)


def weighted_loss(terms, weights):
    """The weighted sum of named loss terms."""
    total = None
    for term, weight in weights:
        value = terms[term] if weight == 1.0 else weight * terms[term]
        total = value if total is None else total + value
    return total
