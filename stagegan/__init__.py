"""stagegan: train GANs in stages.

A stage scheduler drives generator-only, discriminator-only and joint phases, each update with
its own optimizer and scope-filtered variables, averaging tower gradients (None dropped) on the
variable device. Importing `stagegan` does not import TensorFlow; `stagegan.training.trainer` does.

The Python API (`stagegan.api`):

    run = stagegan.train("mog_ring", overrides={"stages[0].steps": 500})
    run = stagegan.load_run("runs/mog-ring-1")
    run.sample(16), run.evaluate(), run.plan(), run.resume({...})
    table = stagegan.compare({"a": "mog_ring", "b": ("mog_ring", ["model.pack=1"])}, "runs/cmp")

A metric of one's own: `@stagegan.register_metric(name, mode)` (`stagegan.evaluation.registry`).
"""

from stagegan.api import Run, compare, load, load_run, plan, train
from stagegan.errors import ConfigError, RunStopped, WriteError
from stagegan.errors import StageganError as Error
from stagegan.evaluation.registry import register_metric

__version__ = "0.1.0"
__all__ = [
    "ConfigError",
    "Error",
    "Run",
    "RunStopped",
    "WriteError",
    "compare",
    "load",
    "load_run",
    "plan",
    "register_metric",
    "train",
]
