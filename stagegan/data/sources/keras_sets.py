"""`data.source: mnist | fashion_mnist | cifar10`: Keras's datasets (downloaded once; the
test split is held out)."""

from stagegan.data.sources.base import (
    Source,
    _fit,
    register,
)
from stagegan.errors import ConfigError


def _load_keras(name, held_out, options):
    import keras

    loader = getattr(keras.datasets, name)
    try:
        (train_x, _), (test_x, _) = loader.load_data()
    except Exception:  # noqa: BLE001 - any download failure means the same thing to the user
        raise ConfigError(
            "data.source",
            f"the {name} dataset could not be downloaded (no network?); "
            "use data.source: folder or npz with a local copy",
        ) from None
    return _fit(
        test_x if held_out else train_x, options["size"], options["channels"], "data.source"
    )


KERAS_IMAGES = 60000  # the largest training split of the keras datasets


@register
class KerasSource(Source):
    """`mnist`, `fashion_mnist`, `cifar10`: Keras's download; the test split is held out."""

    names = ("mnist", "fashion_mnist", "cifar10")
    held_out = True

    def held(self):
        return KERAS_IMAGES, "data.source"

    def load(self, seed, held_out=False):
        return _load_keras(self.options["source"], held_out, self.options)
