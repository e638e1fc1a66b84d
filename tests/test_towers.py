"""Towers: the averaging rule, batch splitting, BatchNormalization across towers, devices."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan.config import DevicesConfig
from stagegan.errors import ConfigError
from stagegan.towers import average_gradients, resolve_devices, split_batch, tower_gradients


def test_average_drops_none_and_means_over_towers():
    v = [tf.Variable(0.0), tf.Variable(0.0), tf.Variable(0.0)]
    tower_grads = [
        [tf.constant(1.0), None, tf.constant(3.0)],
        [tf.constant(3.0), None, tf.constant(6.0)],
    ]
    pairs, dropped = average_gradients(tower_grads, v)
    assert [float(g) for g, _ in pairs] == [2.0, 4.5]
    assert [var is v[0] for _, var in pairs] == [True, False]
    assert dropped == [v[1]]


def test_average_counts_a_missing_tower_gradient_as_zero():
    v = [tf.Variable(0.0)]
    pairs, dropped = average_gradients([[None], [tf.constant(4.0)]], v)
    assert float(pairs[0][0]) == 2.0 and dropped == []


def test_average_densifies_indexed_slices():
    v = tf.Variable(tf.zeros([3, 2]))
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1]), tf.constant([3, 2]))
    pairs, _ = average_gradients([[slices], [tf.zeros([3, 2])]], [v])
    np.testing.assert_array_equal(pairs[0][0].numpy(), [[0, 0], [0.5, 0.5], [0, 0]])


def test_split_batch_splits_every_tensor_evenly():
    batch = {"x": tf.reshape(tf.range(8.0), [4, 2]), "z": tf.range(4)}
    shards = split_batch(batch, 2)
    np.testing.assert_array_equal(shards[1]["x"].numpy(), [[4, 5], [6, 7]])
    np.testing.assert_array_equal(shards[1]["z"].numpy(), [2, 3])


def test_batchnorm_statistics_come_from_the_first_tower_only():
    with keras.name_scope("discriminator"):
        x_in = keras.Input((3,))
        bn = keras.layers.BatchNormalization(momentum=0.9)
        model = keras.Model(x_in, keras.layers.Dense(1)(bn(x_in)))
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32) + np.arange(8)[:, None]
    shards = split_batch({"x": tf.constant(x)}, 2)

    @tf.function
    def step():
        terms = lambda shard: {"l": tf.reduce_mean(model(shard["x"], training=True))}
        results = tower_gradients(
            terms, [((("l", 1.0),), model.trainable_variables)], shards, ["/CPU:0", "/CPU:1"]
        )
        return results[1].gradients[0]

    grads = step()
    assert all(g is not None for g in grads)
    # Hand computation: moving = 0.9 * initial + 0.1 * batch statistic of tower 0's half.
    first = x[:4]
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.1 * first.mean(0), rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), 0.9 + 0.1 * first.var(0), rtol=1e-5)
    # Not the whole batch's statistic, and not updated twice:
    assert not np.allclose(bn.moving_mean.numpy(), 0.1 * x.mean(0), rtol=1e-3)


def test_devices_resolve_to_logical_cpus_and_check_the_batch():
    devices = resolve_devices(DevicesConfig(towers=4, variables="/CPU:0"), batch_size=8)
    assert devices.towers == ("/CPU:0", "/CPU:1", "/CPU:2", "/CPU:3")
    listed = resolve_devices(DevicesConfig(towers=("/cpu:1", "CPU:2"), variables="/CPU:0"), 4)
    assert listed.towers == ("/CPU:1", "/CPU:2")
    assert resolve_devices(DevicesConfig(towers="auto", variables="/CPU:0"), 3).towers == (
        "/CPU:0",
    )
    with pytest.raises(ConfigError, match="batch_size: 6 does not divide evenly across 4"):
        resolve_devices(DevicesConfig(towers=4, variables="/CPU:0"), batch_size=6)
    with pytest.raises(ConfigError, match="devices.towers: device /GPU:0 does not exist"):
        resolve_devices(DevicesConfig(towers=("/GPU:0",), variables="/CPU:0"), 4)
    with pytest.raises(ConfigError, match="already started with 4 CPU devices"):
        resolve_devices(DevicesConfig(towers=6, variables="/CPU:0"), 6)
