"""The presets of `test_presets.HEAVY` (residual and progressive networks, whose step functions
take longest to trace), each through all of its stages for a step, as `test_presets` runs
the others: a file of their own, so that the two pytest-xdist workers share the presets."""

import pytest
from test_presets import HEAVY, check_preset, offline_mnist  # noqa: F401 - the fixture

from stagegan.config.resources import builtin_names


def test_every_heavy_preset_exists():
    assert set(HEAVY) <= set(builtin_names("configs"))


@pytest.mark.parametrize("name", HEAVY)
def test_heavy_preset_runs_every_stage(name, tmp_path, offline_mnist):  # noqa: F811
    check_preset(name, tmp_path)
