"""`data.source: npz`: one array of images (`data.key`) and optionally one of labels."""

import numpy as np

from stagegan.data.sources.base import (
    Source,
    _fit,
    _require_path,
    check_count,
    check_labels,
    check_memory,
    class_names,
    in_memory_pool,
    register,
)
from stagegan.errors import ConfigError


def _load_npz(options):
    """The images of an npz source (uint8) and its labels (None without `data.labels`)."""
    path = _require_path(options)
    names = [options["key"]] + ([options["labels"]] if options["labels"] else [])
    try:
        with np.load(path) as archive:
            for name, key in zip(names, ("data.key", "data.labels"), strict=False):
                if name not in archive:
                    raise ConfigError(
                        key, f"{path} has no array {name!r} (has: {', '.join(archive.files)})"
                    )
            arrays = [archive[name] for name in names]
    except FileNotFoundError:
        raise ConfigError("data.path", f"file not found: {path}") from None
    except (OSError, ValueError) as e:
        raise ConfigError("data.path", f"cannot read {path} as .npz: {e}") from None
    images = _fit(arrays[0], options["size"], options["channels"], f"data.key ({path})")
    if len(arrays) == 1:
        return images, None
    labels = check_labels(arrays[1], len(images), options, f"array {names[1]!r} of {path}")
    return images, labels


@register
class NpzSource(Source):
    """`npz`: one array of images (`data.key`) and optionally one of labels."""

    names = ("npz",)
    labels = "an array name"
    named_classes = True

    def load(self, seed, held_out=False):
        return _load_npz(self.options)[0]

    def pool(self, seed, count):
        return in_memory_pool(*_load_npz(self.options), False)

    def open(self, target, seed, batch_size):
        check_memory(self.options, batch_size, *self.held(), target.batch_key)
        images, labels = _load_npz(self.options)
        check_count(len(images), batch_size, self.options["path"], target.batch_key)
        classes = None if labels is None else class_names(self.options, labels)
        target.hold(images, labels, classes)
