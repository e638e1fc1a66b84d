"""stagegan's Adam and AdamW (`stagegan.core.optimizers`): one fused `ResourceApplyAdam` per
variable, the steps of Adam written out in numpy, on one device and on a mirrored pair, and
checkpoints interchangeable with Keras's own Adam."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan.config.schema import OptimizerSpec
from stagegan.core.optimizers import Adam, AdamW, make_optimizer

START = [np.array([[0.3, -1.2], [2.0, 0.1]], np.float32), np.array([0.5, -0.25], np.float32)]
LR, B1, B2, EPS = 0.01, 0.5, 0.9, 1e-7


def gradient(w, k):
    """The test's gradient of a variable holding `w` at step `k`: any smooth function."""
    return np.sin(w * (k + 1) + 1.0)


def numpy_adam(steps, decay=0.0, amsgrad=False):
    """Adam (Kingma & Ba, Algorithm 1, the bias correction folded into the step size) and
    AdamW's decoupled decay (Loshchilov & Hutter: w -= lr * decay * w before the step)."""
    out = []
    for start in START:
        w = start.astype(np.float64)
        m, v, v_max = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
        for k in range(steps):
            g = gradient(w.astype(np.float32).astype(np.float64), k)
            w = w - LR * decay * w
            m = B1 * m + (1 - B1) * g
            v = B2 * v + (1 - B2) * g * g
            v_max = np.maximum(v_max, v)
            t = k + 1
            denominator = np.sqrt(v_max if amsgrad else v) + EPS
            w = w - LR * np.sqrt(1 - B2**t) / (1 - B1**t) * m / denominator
        out.append(w)
    return out


def train(optimizer, steps, strategy=None):
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        variables = [tf.Variable(w) for w in START]
        optimizer.build(variables)

    @tf.function(autograph=False)
    def step(k):
        def replica():
            grads = [tf.sin(v * tf.cast(k + 1, tf.float32) + 1.0) for v in variables]
            optimizer.apply_gradients(zip(grads, variables, strict=True))

        strategy.run(replica)

    for k in range(steps):
        step(tf.constant(k))
    return variables, step


def options(**kwargs):
    return dict(learning_rate=LR, beta_1=B1, beta_2=B2, epsilon=EPS, **kwargs)


@pytest.mark.parametrize(
    "make, decay, amsgrad",
    [
        (lambda: Adam(**options()), 0.0, False),
        (lambda: AdamW(**options(weight_decay=0.1)), 0.1, False),
        (lambda: Adam(**options(amsgrad=True)), 0.0, True),  # Keras's own update
    ],
    ids=["adam", "adamw", "amsgrad"],
)
def test_the_steps_of_adam_written_out(make, decay, amsgrad):
    variables, _ = train(make(), 5)
    for variable, expected in zip(variables, numpy_adam(5, decay, amsgrad), strict=True):
        np.testing.assert_allclose(variable.numpy(), expected, rtol=2e-6, atol=2e-7)


def test_each_variable_is_one_fused_update():
    _, step = train(Adam(**options()), 1)
    graph = step.get_concrete_function(tf.TensorSpec([], tf.int32)).graph
    kinds = [op.type for op in graph.get_operations()]
    assert kinds.count("ResourceApplyAdam") == len(START)
    # Keras's update is three assignments a variable; at most the iteration count's is left.
    assert kinds.count("AssignAddVariableOp") <= 1 and "AssignSubVariableOp" not in kinds


def test_applications_in_one_trace_and_across_traces_count_their_own_steps():
    """`repeat: 2` applies one optimizer twice in a step, and stages share optimizers across
    their step functions: each application reads the iteration count anew."""
    optimizer = Adam(**options())
    variables = [tf.Variable(w) for w in START]
    optimizer.build(variables)

    def apply(k):
        grads = [tf.sin(v * tf.cast(k + 1, tf.float32) + 1.0) for v in variables]
        optimizer.apply_gradients(zip(grads, variables, strict=True))

    twice = tf.function(lambda k: [apply(k), apply(k + 1)], autograph=False)
    once = tf.function(apply, autograph=False)
    twice(tf.constant(0))  # steps 0 and 1 in one trace
    once(tf.constant(2))  # step 2 in another
    for variable, expected in zip(variables, numpy_adam(3), strict=True):
        np.testing.assert_allclose(variable.numpy(), expected, rtol=2e-6, atol=2e-7)


def test_a_mirrored_pair_updates_each_copy_as_one_device_does():
    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        optimizer = Adam(**options())
    variables, _ = train(optimizer, 3, strategy)
    expected = numpy_adam(3)
    for variable, want in zip(variables, expected, strict=True):
        for copy in strategy.experimental_local_results(variable):
            # The replicas' gradients are summed (the strategy's all-reduce), so each copy
            # takes Adam's steps on twice the gradient: m doubles, v quadruples, the step
            # m / sqrt(v) is the same up to epsilon.
            np.testing.assert_allclose(copy.numpy(), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("first, second", [("keras", "ours"), ("ours", "keras")])
def test_checkpoints_are_interchangeable_with_keras_adam(first, second, tmp_path):
    """Runs saved before the fused Adam resume with it, and its checkpoints hold nothing
    more than Keras's (`assert_consumed`: every saved value has a place to go)."""
    make = {"keras": keras.optimizers.Adam, "ours": Adam}
    saved = make[first](**options())
    variables, _ = train(saved, 2)
    path = tf.train.Checkpoint(optimizer=saved, variables=variables).save(tmp_path / "k")
    restored = make[second](**options())
    fresh = [tf.Variable(tf.zeros_like(w)) for w in START]
    restored.build(fresh)
    tf.train.Checkpoint(optimizer=restored, variables=fresh).restore(path).assert_consumed()
    assert int(restored.iterations) == 2
    for a, b in zip(restored.variables, saved.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_configs_get_the_fused_classes_and_keras_for_the_rest():
    spec = lambda kind: OptimizerSpec(type=kind, options=(("learning_rate", 0.1),))
    assert type(make_optimizer(spec("adam"), "optimizers.g", "g")) is Adam
    assert type(make_optimizer(spec("adamw"), "optimizers.g", "g")) is AdamW
    assert type(make_optimizer(spec("sgd"), "optimizers.g", "g")) is keras.optimizers.SGD
