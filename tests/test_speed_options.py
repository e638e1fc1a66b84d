"""`devices.jit` and `devices.mixed_precision`: they train (losses go down on mog2d), the
loss-scale rules, the dtype policy, and what XLA cannot do. (jit against the single-device
reference loop: tests/test_training.py.)"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_training import ALL_KINDS, config
from toytask import run_steps

from stagegan.config.schema import load_config
from stagegan.core.precision import LossScale
from stagegan.errors import ConfigError
from stagegan.training.trainer import Trainer

OPTIONS = {
    "jit": {"jit": True},
    "mixed": {"mixed_precision": True},
    "jit+mixed": {"jit": True, "mixed_precision": True},
    "mirrored+jit+mixed": {
        "strategy": "mirrored",
        "towers": 2,
        "jit": True,
        "mixed_precision": True,
    },
}


def warm_up(devices):
    """mog2d (ring): 60 generator-only steps against a fixed D, then 60 discriminator-only."""
    overrides = [
        "batch_size=64",
        "stages=warmup_alternating",
        "model={latent_dim: 8, hidden: 32, layers: 2}",
        "stages[0].steps=60",
        "stages[1].steps=60",
        "stages[2].steps=1",
    ]
    overrides += [f"devices.{k}={str(v).lower()}" for k, v in devices.items()]
    trainer = Trainer(load_config("mog_ring", overrides))
    losses = {"generator/g_loss": [], "discriminator/d_loss": []}
    for position in list(trainer.schedule.positions())[:120]:
        metrics = trainer.step(position).metrics
        for name in losses:
            if name in metrics and np.isfinite(float(metrics[name])):
                losses[name].append(float(metrics[name]))
    return trainer, losses


@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_speed_options_train_on_mog2d(name):
    trainer, losses = warm_up(OPTIONS[name])
    for term, values in losses.items():
        assert len(values) == 60, term
        first, last = np.mean(values[:10]), np.mean(values[-10:])
        print(f"{name}: {term} {first:.4f} -> {last:.4f}")
        assert last < first - 0.02, (term, first, last)
    if "mixed" in name:
        layer = trainer.networks["generator"].layers[-1]
        assert layer.compute_dtype == "bfloat16" and layer.variable_dtype == "float32"
        assert all(v.dtype == "float32" for v in trainer.variables)
        assert keras.config.dtype_policy().name == "float32"  # restored after the build
        scales = {k: float(s.scale.numpy()) for k, s in trainer.loss_scales.items()}
        assert scales == {"g": 2.0**15, "d": 2.0**15}  # bfloat16 never overflowed here
        assert "loss_scale_g" in trainer.trackables()


def test_loss_scale_halves_on_overflow_and_doubles_after_a_period():
    scale = LossScale("t", initial=4.0, period=3)
    yes, no = tf.constant(True), tf.constant(False)

    def step(terms_ok, grads_ok, active=None):
        skip = bool(scale.update(terms_ok, grads_ok, active))
        return skip, float(scale.scale.numpy()), int(scale.good.numpy())

    assert step(yes, no) == (False, 2.0, 0)  # overflow: halve, not a guard event
    assert step(yes, yes) == (False, 2.0, 1)
    assert step(yes, yes, active=no) == (False, 2.0, 1)  # an inactive update changes nothing
    assert step(yes, yes) == (False, 2.0, 2)
    assert step(yes, yes) == (False, 4.0, 0)  # 3 good steps: double
    assert step(no, no) == (True, 4.0, 0)  # a non-finite loss term is a guard event
    assert step(yes, no) == (False, 2.0, 0)
    assert step(yes, no) == (False, 1.0, 0)
    assert step(yes, no) == (True, 1.0, 0)  # at scale 1 lowering cannot help: guard event


@pytest.mark.parametrize(
    "devices, words",
    [
        ({"towers": 2, "jit": True}, "XLA cannot read variables on /CPU:0 from towers on /CPU:1"),
        ({"towers": 2, "strategy": "central_storage", "jit": True}, "central_storage"),
    ],
)
def test_jit_with_variables_apart_from_the_towers_is_refused(devices, words):
    with pytest.raises(ConfigError) as info:
        Trainer(config(2, ALL_KINDS, devices=devices))
    assert info.value.key == "devices.jit" and words in info.value.message


def test_loss_scale_counters_survive_a_checkpoint(tmp_path):
    """The loss scale and its count of good steps are checkpointed: a restored run goes on
    with them (as the guard's skips in a row: tests/test_guard.py)."""
    # Alternating (G every 2nd step) and joint: 3 + 3 steps.
    trainer = Trainer(config(1, ALL_KINDS[2:], devices={"towers": 1, "mixed_precision": True}))
    run_steps(trainer)
    counters = lambda t: {
        k: (float(s.scale.numpy()), int(s.good.numpy())) for k, s in t.loss_scales.items()
    }
    saved = counters(trainer)
    # One good step per application: g 2 (every 2nd of 3 steps) + 3, d 3 + 3.
    assert saved == {"g": (2.0**15, 5), "d": (2.0**15, 6)}
    path = trainer.checkpoint.write(str(tmp_path / "ckpt"))
    fresh = Trainer(trainer.config)
    assert counters(fresh) == {"g": (2.0**15, 0), "d": (2.0**15, 0)}
    fresh.checkpoint.read(path).assert_existing_objects_matched()
    assert counters(fresh) == saved
