"""Every preset in configs/ trains through all of its stages for a step, shrunk by overrides.

The presets with the slowest step functions to trace (`HEAVY`) run from
`tests/test_presets_heavy.py`, so that the two pytest-xdist workers can share the presets."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan.config.resources import builtin_names
from stagegan.config.schema import load_config, parse_config
from stagegan.training.trainer import Trainer

SHRINK = {
    "mog2d": ["model.hidden=8", "model.layers=1"],
    "completion": ["data.size=16", "data.count=8", "model={width: 4, dilations: [2]}"],
    "unconditional": ["data.count=8", "model.width=4", "model.latent_dim=4"],
}


@pytest.fixture
def offline_mnist(monkeypatch):
    digits = np.random.default_rng(0).integers(0, 256, (8, 28, 28), dtype=np.uint8)
    monkeypatch.setattr(
        keras.datasets.mnist, "load_data", lambda: ((digits, None), (digits[:2], None))
    )


HEAVY = ("sngan_folder", "cresnet_folder", "resnet_folder", "resnet_clusters", "pggan_folder")


@pytest.mark.parametrize("name", [n for n in builtin_names("configs") if n not in HEAVY])
def test_preset_runs_every_stage(name, tmp_path, offline_mnist):
    check_preset(name, tmp_path)


def check_preset(name, tmp_path):
    images = tmp_path / "images"
    for i in range(4):  # one batch of 4: fewer is a config error; two classes
        pixels = np.full((40, 40, 3), 60 * i, np.uint8)
        (images / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (images / "ab"[i % 2] / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    preset = load_config(name)
    sets = (
        ["batch_size=4", f"data.path={images}", "data.size=28"]
        if preset.data.get("source") == "folder"
        else ["batch_size=4"]
    )
    if preset.data.get("labels") == "clusters":
        sets.append("data.clusters=2")
    sets += SHRINK[preset.task] + [f"stages[{i}].steps=1" for i in range(len(preset.stages))]
    # 5 critic updates a step (sngan, wgan_gp) trace as 5 copies of the critic's update: 2 run
    # the same code (a repeat's sequence: tests/test_training.py), the two presets' checks in
    # 11.4 s instead of 17.2.
    for i, stage in enumerate(preset.raw["stages"]):
        for j, update in enumerate(stage["updates"]):
            if update.get("repeat", 1) > 2:
                sets.append(f"stages[{i}].updates[{j}].repeat=2")
    config = load_config(name, sets)
    if preset.model.get("arch") == "progressive":
        # Grown to 8 px: its stages up to 8 (4 px, the fade to 8 and 8 px); the 16 and 32 px
        # pairs are the same code on larger blocks, and the most costly to trace (growing
        # through several sizes: tests/test_progressive.py).
        raw = {**config.raw, "data": {**config.raw["data"], "size": 8}}
        raw["stages"] = [s for s in raw["stages"] if s["resolution"] <= 8]
        preset = config = parse_config(raw)
    trainer = Trainer(config)
    before = {v.path: v.numpy().copy() for v in trainer.variables}
    for position in trainer.schedule.positions():
        output = trainer.step(position)
        # One step per stage: stage step 0, where every update runs (whatever its `every`),
        # is applied (the guard skipped none) and reports finite numbers only.
        assert {name: int(r.skipped) for name, r in output.guard.items()} == dict.fromkeys(
            output.guard, 0
        )
        assert all(np.isfinite(float(v)) for v in output.metrics.values()), output.metrics
    assert any(not np.array_equal(before[v.path], v.numpy()) for v in trainer.variables)
    assert trainer.step_count == len(preset.stages)
