"""The real images that samples and metrics compare with (an image task's `real`): the
held-out split where the source has one, else the training images; chosen by a seed alone.

    real = RealImages(task.data, seed=task.rngs.seed)
    images, held_out = real.draw(count, seed)            # [count, S, S, C] in [-1, 1]
    images, labels, held_out = real.draw(count, seed, labels=True)
"""

import numpy as np

from stagegan.data.sources import reference_pool, source_of
from stagegan.errors import ConfigError

MIN_EVAL_IMAGES = 4  # FID, KID and the neighbourhood metrics need this many of each set


class RealImages:
    """The real images of `options` (a task's `data`), with the run's `seed` (a folder's
    split, clusters) and its recorded clusters (`recorded`, or None)."""

    def __init__(self, options, seed, recorded=None):
        self.options, self.seed, self.recorded = options, seed, recorded
        self._pool = None

    @property
    def kind(self):
        """The `stagegan.data.sources.Source` of `data.source`."""
        return source_of(self.options, self.recorded)

    def pool(self, count):
        """The `stagegan.data.sources.Pool` that `draw` chooses from (of a streamed source,
        its first `count` images); made once (again for a stream asked for more)."""
        cached = self._pool
        if cached is None or (self.kind.streamed and cached.size < count):
            cached = self._pool = reference_pool(self.options, self.seed, count, self.recorded)
        return cached

    def checked_pool(self, count, key="count"):
        """`pool(count)`, refused (`ConfigError` on `key`) when it has fewer images."""
        pool = self.pool(count)
        if count > pool.size:
            source = self.options["source"]
            split = (
                f"the held-out split of data.source {source} has {pool.size}"
                if pool.held_out
                else f"data.source {source} has {pool.size}"
            )
            raise ConfigError(key, f"asks for {count} real images, but {split}")
        return pool

    def draw(self, count, seed, key="count", labels=False):
        """`count` real images in [-1, 1]: `(images, held_out)`, or `(images, labels,
        held_out)` with `labels`. Chosen by `seed` alone, without replacement (a folder's
        unreadable files are passed over).

        Raises:
            ConfigError: on `key` when the split has fewer than `count` readable images.
        """
        pool = self.checked_pool(count, key)
        size = count if self.kind.streamed else pool.size  # a stream: its first `count`
        rng = np.random.default_rng(seed)  # images, however many were loaded
        chosen = rng.choice(size, count, replace=False)
        images, found = pool.load(chosen)
        rest = np.setdiff1d(np.arange(size), chosen)
        while len(images) < count and len(rest):  # unreadable files: choose more
            more = rng.choice(rest, min(count - len(images), len(rest)), replace=False)
            rest = np.setdiff1d(rest, more)
            extra, extra_labels = pool.load(more)
            images = np.concatenate([images, extra])
            found = None if found is None else np.concatenate([found, extra_labels])
        if len(images) < count:
            raise ConfigError(key, f"asks for {count} real images; only {len(images)} are readable")
        images = images.astype(np.float32) / 127.5 - 1.0
        return (images, found, pool.held_out) if labels else (images, pool.held_out)

    def default_count(self, preferred):
        """`preferred`, or all the readable images when there are fewer (an evaluation's
        count unless told otherwise)."""
        pool = self.pool(preferred)
        if pool.size > preferred:
            return preferred
        readable = pool.readable()
        if pool.held_out and readable < MIN_EVAL_IMAGES and self.options.get("holdout"):
            raise ConfigError(
                "data.holdout",
                f"{readable} of the {pool.size} held-out images can be read; an evaluation "
                f"needs at least {MIN_EVAL_IMAGES} (hold out more, or replace the broken files)",
            )
        return readable
