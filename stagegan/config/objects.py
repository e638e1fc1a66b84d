"""The objects a config names as `package.module:function` (a task factory, a network
builder, a feature extractor): imported by name, or found among the Python objects the API
was given in their place (`register_objects`). TF-free."""

import importlib
import logging
import os
import sys

from stagegan.errors import ConfigError, StageganError, first_line, out_of_memory

log = logging.getLogger("stagegan")


# Python objects given to the API in place of `package.module:function` names, by the name
# that stands for them in the config (`register_objects`).
REGISTERED = {}


def register_objects(value):
    """`value` (a config, a part of one, or one value) with every callable in it replaced by
    its `module:qualified name`, under which `load_object` finds the callable itself in this
    process (and a later process imports it, when it is importable)."""
    if isinstance(value, dict):
        return {key: register_objects(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [register_objects(item) for item in value]
    if not callable(value):
        return value
    module = getattr(value, "__module__", None) or "__main__"
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    reference, count = f"{module}:{name}", 1
    while REGISTERED.get(reference, value) is not value:  # another object of the same name
        count += 1
        reference = f"{module}:{name}#{count}"
    if reference not in REGISTERED and not importable(module, name):
        log.warning(
            "%s is a lambda, a function local to another one or defined in __main__: the run "
            "records it as %r, which only this process can find (a later resume, sample or "
            "eval in a new process cannot import it); define it at the top level of a module "
            "to make the run usable anywhere",
            getattr(value, "__name__", name),
            reference,
        )
    REGISTERED[reference] = value
    return reference


def find_user_modules(config_path=None):
    """Put where a config's `package.module:function` names are found on the import path:
    the config file's folder (when the config is a file) ahead of the working directory. The
    one place that decides it, for every door (`train`, `plan`, a resume, `sample`, `eval`,
    the API)."""
    folders = [os.getcwd()]
    if config_path is not None and os.path.isfile(config_path):
        folders.insert(0, os.path.dirname(os.path.abspath(config_path)))
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def importable(module, qualname):
    """Whether a new process can import `module` and find `qualname` in it by attributes."""
    return module != "__main__" and "<" not in qualname


def _unimportable(path):
    module, _, name = path.partition(":")
    return not importable(module, name.split("#")[0])


def load_object(path, key):
    """Import `package.module:attribute` (or find an object given to the API, see
    `register_objects`); errors name `key`."""
    if path in REGISTERED:
        return REGISTERED[path]
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigError(key, f"expected 'package.module:function'. Received: {path!r}")
    if _unimportable(path):
        raise ConfigError(
            key,
            f"{path!r} was a lambda, a local function or one defined in __main__, given to the "
            "Python API by the process that started the run: no other process can import it "
            "(define it at the top level of a module, and start the run again)",
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(key, f"cannot import module {module_name!r}: {e}") from None
    found = module
    try:
        for part in attribute.split("."):  # a qualified name: Class.method
            found = getattr(found, part)
    except AttributeError:
        raise ConfigError(key, f"module {module_name!r} has no attribute {attribute!r}") from None
    return found


def call_user(key, label, function, *args, **kwargs):
    """Call `function`, a user's code that a config or a flag named at `key` (a task
    factory, a network builder, a feature extractor), as `function(*args, **kwargs)`.

    Whatever it raises (out of memory included) becomes one ConfigError naming `key` and
    `label` (what the user named); stagegan's own errors pass as they are.
    """
    try:
        return function(*args, **kwargs)
    except StageganError:
        raise
    except Exception as e:  # noqa: BLE001 - a user's code may raise anything
        memory = out_of_memory(e)
        if memory is not None:
            raise ConfigError(key, f"{label}: {memory.message}") from None
        first = first_line(e)
        first = first if first == type(e).__name__ else f"{type(e).__name__}: {first}"
        raise ConfigError(key, f"{label} raised {first}") from None
