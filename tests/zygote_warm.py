"""Preloaded by tests/zygote.py's forkserver: TensorFlow imported as `python -m stagegan` does,
and every `stagegan` module, with nothing initialised (a fork of this is a fresh process right
after its imports), and graph ops created without their Python stacks (`opstacks`)."""

import importlib
import pkgutil
import sys

import stagegan
from stagegan.cli.main import import_tensorflow

# The interpreter's own path (standard library, site-packages), without the tests' additions.
SITE_PATH = [p for p in sys.path if p.startswith((sys.prefix, sys.base_prefix))]

import_tensorflow()

from opstacks import skip_op_stacks  # noqa: E402 - after import_tensorflow(): it imports TF

skip_op_stacks()  # test speed, not behaviour: see tests/opstacks.py

for module in pkgutil.walk_packages(stagegan.__path__, "stagegan."):
    if module.name == "stagegan.__main__":  # runpy runs it, as `python -m stagegan` does
        continue
    importlib.import_module(module.name)
