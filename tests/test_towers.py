"""Towers: the averaging rule, batch splitting, BatchNormalization across towers, devices."""

from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan.config.schema import DevicesConfig
from stagegan.core.placement import resolve_placement
from stagegan.core.replicas import (
    TowerReplicas,
    average,
    contribution,
    kept_gradients,
    split_batch,
    sum_contributions,
)
from stagegan.errors import ConfigError


def averaged(replica_grads, variables):
    """The averaging rule, as TowerReplicas runs it: contributions, summed, averaged."""
    plan = SimpleNamespace(variables=variables, terms=(), reported=())
    kept = kept_gradients([[grads] for grads in replica_grads], [plan])
    count = len(replica_grads)
    parts = [
        contribution([plan], {}, [grads], kept, index, count, guarded=False)
        for index, grads in enumerate(replica_grads)
    ]
    return kept[0], average(sum_contributions(parts), [plan], kept, count, guarded=False)


def test_average_drops_none_and_means_over_towers():
    v = [tf.Variable(0.0), tf.Variable(0.0), tf.Variable(0.0)]
    tower_grads = [
        [tf.constant(1.0), None, tf.constant(3.0)],
        [tf.constant(3.0), None, tf.constant(6.0)],
    ]
    kept, means = averaged(tower_grads, v)
    assert [float(g) for g in means] == [2.0, 4.5]
    assert kept == [True, False, True]


def test_average_counts_a_missing_tower_gradient_as_zero():
    v = [tf.Variable(0.0)]
    kept, means = averaged([[None], [tf.constant(4.0)]], v)
    assert float(means[0]) == 2.0 and kept == [True]


def test_average_densifies_indexed_slices():
    v = tf.Variable(tf.zeros([3, 2]))
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1]), tf.constant([3, 2]))
    _, means = averaged([[slices], [tf.zeros([3, 2])]], [v])
    np.testing.assert_array_equal(means[0].numpy(), [[0, 0], [0.5, 0.5], [0, 0]])


def test_split_batch_splits_every_tensor_evenly():
    batch = {"x": tf.reshape(tf.range(8.0), [4, 2]), "z": tf.range(4)}
    shards = split_batch(batch, 2)
    np.testing.assert_array_equal(shards[1]["x"].numpy(), [[4, 5], [6, 7]])
    np.testing.assert_array_equal(shards[1]["z"].numpy(), [2, 3])


def test_batchnorm_statistics_come_from_the_first_tower_only_and_only_when_applied():
    with keras.name_scope("discriminator"):
        x_in = keras.Input((3,))
        bn = keras.layers.BatchNormalization(momentum=0.9)
        model = keras.Model(x_in, keras.layers.Dense(1)(bn(x_in)))
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32) + np.arange(8)[:, None]
    replicas = TowerReplicas(["/CPU:0", "/CPU:1"], "/CPU:0", lambda: model.non_trainable_variables)
    plan = SimpleNamespace(
        update=SimpleNamespace(loss=(("l", 1.0),)),
        terms=("l",),
        reported=("l",),
        variables=tuple(model.trainable_variables),
        state=tuple(model.non_trainable_variables),
        optimizer=keras.optimizers.SGD(0.0),
        after_apply=None,
    )
    plan.optimizer.build(plan.variables)
    terms = lambda shard, names: {"l": tf.reduce_mean(model(shard["x"], training=True))}

    @tf.function
    def step(apply):
        (averaged,) = replicas.compute([plan], {"x": tf.constant(x)}, terms, guarded=True)
        if apply:
            replicas.apply(plan, averaged)
        return averaged.gradients, averaged.detail

    grads, detail = step(False)
    assert len(grads) == len(plan.variables) and bool(np.all(detail))
    # Computing alone writes nothing: state changes with the update's application only.
    np.testing.assert_array_equal(bn.moving_mean.numpy(), np.zeros(3))
    step(True)
    # Hand computation: moving = 0.9 * initial + 0.1 * batch statistic of tower 0's half.
    first = x[:4]
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.1 * first.mean(0), rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), 0.9 + 0.1 * first.var(0), rtol=1e-5)
    # Not the whole batch's statistic, and not updated twice:
    assert not np.allclose(bn.moving_mean.numpy(), 0.1 * x.mean(0), rtol=1e-3)


def devices(towers, strategy="towers"):
    return DevicesConfig(towers, "/CPU:0", strategy, jit=False, mixed_precision=False)


def test_devices_resolve_to_logical_cpus_and_check_the_batch():
    placement = resolve_placement(devices(4), batch_size=8)
    assert placement.towers == ("/CPU:0", "/CPU:1", "/CPU:2", "/CPU:3")
    assert placement.labels == placement.towers and placement.replicas == 4
    listed = resolve_placement(devices(("/cpu:1", "CPU:2")), 4)
    assert listed.towers == ("/CPU:1", "/CPU:2")
    assert resolve_placement(devices("auto"), 3).towers == ("/CPU:0",)
    with pytest.raises(ConfigError, match="batch_size: 6 does not divide evenly across 4"):
        resolve_placement(devices(4), batch_size=6)
    with pytest.raises(ConfigError, match="batch_size: 6 does not divide evenly across 4"):
        resolve_placement(devices(4, "mirrored"), batch_size=6)
    with pytest.raises(ConfigError, match="devices.towers: device /GPU:0 does not exist"):
        resolve_placement(devices(("/GPU:0",)), 4)
    with pytest.raises(ConfigError, match="already started with 4 CPU devices"):
        resolve_placement(devices(6), 6)


def test_dropout_seeds_advance_on_every_pass_even_in_a_frozen_network():
    """A random layer's seed is not network state: it advances with every pass (one draw,
    tower 0's), even when no update trains its network, so masks differ from step to step."""
    with keras.name_scope("discriminator"):
        x_in = keras.Input((3,))
        model = keras.Model(x_in, keras.layers.Dense(1)(keras.layers.Dropout(0.5, seed=1)(x_in)))
    (seed,) = [v for v in model.non_trainable_variables if v.name == "seed_generator_state"]
    replicas = TowerReplicas(["/CPU:0", "/CPU:1"], "/CPU:0", lambda: model.non_trainable_variables)
    plan = SimpleNamespace(
        update=SimpleNamespace(loss=(("l", 1.0),)),
        terms=("l",),
        reported=("l",),
        variables=tuple(model.trainable_variables),
        state=(),  # frozen: no state of its own may change
    )
    terms = lambda shard, names: {"l": tf.reduce_mean(model(shard["x"], training=True))}

    @tf.function
    def step():
        (averaged,) = replicas.compute([plan], {"x": tf.ones([8, 3])}, terms, guarded=False)
        return averaged.terms["l"]

    start = seed.numpy().copy()
    first = float(step())
    np.testing.assert_array_equal(seed.numpy() - start, [0, 1])  # one draw per pass
    second = float(step())
    np.testing.assert_array_equal(seed.numpy() - start, [0, 2])
    assert first != second  # a new mask
