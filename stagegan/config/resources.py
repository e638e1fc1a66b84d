"""Finding the built-in stage schedules (`stages/`) and run presets (`configs/`).

Both folders sit at the top of the source tree and are installed as `stagegan.stages` and
`stagegan.configs`, so a name like `glcic` works from a checkout and after `pip install .`.
"""

import importlib.resources
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def builtin_dir(kind):
    """The folder holding the built-in `stages` or `configs` YAML files."""
    assert kind in ("stages", "configs"), kind
    in_checkout = _SOURCE_ROOT / kind
    if in_checkout.is_dir() and (_SOURCE_ROOT / "setup.cfg").is_file():
        return in_checkout
    return Path(str(importlib.resources.files(f"stagegan.{kind}")))


def builtin_names(kind):
    """Sorted names (without `.yaml`) of the built-in files of one kind."""
    return sorted(p.stem for p in builtin_dir(kind).glob("*.yaml"))


def find_yaml(kind, name_or_path):
    """Resolve a built-in name or a path to an existing YAML file, or None.

    A value that names an existing file is taken as a path; otherwise it is looked up by name
    (with or without `.yaml`) among the built-in files of `kind`.
    """
    path = Path(name_or_path)
    try:
        path = path.expanduser()
    except RuntimeError:  # `~name` of no such user: the name as it is
        pass
    if path.is_file():
        return path
    if "/" in str(name_or_path) or "\\" in str(name_or_path):
        return None
    stem = str(name_or_path).removesuffix(".yaml").removesuffix(".yml")
    candidate = builtin_dir(kind) / f"{stem}.yaml"
    return candidate if candidate.is_file() else None
