"""Is the generator copying its training images? Nearest neighbours of the samples.

    numbers, nearest = memorisation(samples, sample_features, training, held_out, embed)

A sample is compared with the images training drew from and, where the data has a held-out
split, with the held-out images (each set: all of it, or `REFERENCE_IMAGES` chosen by the
evaluation's seed), in two spaces: the evaluation's features and raw pixels (Euclidean
distances). The rules:

* `copies`: the share of samples nearer to their nearest training image than that image is to
  any other training image (or identical to it, for an image the set holds twice). A copy of a
  training image is (0 away from it); a sample from the data's distribution is about as likely
  as a training image to fall that close.
* `held_out_copies`: the same rule with the held-out images in place of the training images:
  the level a generator that copies nothing reaches. `copies` well above it is memorisation.
* `nearest_ratio`: the median over samples of that comparison as a number, the distance to
  the nearest training image over that image's distance to its own nearest (0 for copies,
  about 1 for samples like the data), and `held_out_nearest_ratio`, its held-out twin: a
  finer reading than the shares, which a generator that collapsed to one image can fill
  (every sample then has the same nearest image).
* `memorised`: the share of samples whose nearest image, among the training and the held-out
  ones together, is a training image. For samples drawn from the data's distribution, training
  and held-out images are alike, so that share is the training images' share of the two sets
  (`memorised_chance`); copies of training images score 1.0.

Each has a `_pixels` twin. Memory does not grow with the data: the references are held as uint8
(at most `REFERENCE_BYTES` of each set), the samples' pixels as float32 (as large as the
samples themselves), and distances are computed a block of samples and references at a time.
"""

import numpy as np

REFERENCE_IMAGES = 5000  # training (and held-out) images compared, at most
AUTO_IMAGES = 2000  # `eval` compares by default when training and held-out images are no more
REFERENCE_BYTES = 256 << 20  # of uint8 references held, each set
BLOCK_ELEMENTS = 1 << 22  # floats of references converted at a time
SHOWN = 12  # rows of the nearest-neighbour picture


class References:
    """Real images to compare samples with: uint8 [M, S, S, C] and their features [M, D]."""

    def __init__(self, images, features):
        self.images, self.features = images, features

    def vectors(self, space):
        return self.features if space == "features" else self.images


def reference_count(pool, image_bytes):
    """How many images of a pool (None: of any) to compare: all, or at most
    `REFERENCE_IMAGES` and `REFERENCE_BYTES` of uint8 pixels."""
    most = min(REFERENCE_IMAGES, max(1, REFERENCE_BYTES // image_bytes))
    return most if pool is None else min(pool.size, most)


def draw(pool, count, rng):
    """`count` images of a `stagegan.data.sources.Pool`, chosen by `rng` without
    replacement (uint8; a folder's unreadable files are passed over)."""
    chosen = np.sort(rng.choice(pool.size, count, replace=False))
    return pool.load(chosen)[0]


def nearest(queries, references, exclude=None):
    """`(distance [N], index [N])`: each query's nearest reference, Euclidean. Queries and
    references (either may be uint8) are converted to float64 a block at a time, and each
    block of distances holds at most about `BLOCK_ELEMENTS` numbers. `exclude[i]`: an index
    query i may not take (itself, when the queries are references)."""
    queries = queries.reshape(len(queries), -1)
    flat = references.reshape(len(references), -1)
    best = np.full(len(queries), np.inf)
    where = np.zeros(len(queries), np.int64)
    rows = max(1, BLOCK_ELEMENTS // max(flat.shape[1], 1))
    columns = max(1, BLOCK_ELEMENTS // max(flat.shape[1], rows))
    for top in range(0, len(queries), rows):
        part = np.asarray(queries[top : top + rows], np.float64)
        part_norms = np.sum(part * part, axis=1)[:, None]
        for start in range(0, len(flat), columns):
            block = np.asarray(flat[start : start + columns], np.float64)
            squared = part_norms + np.sum(block * block, axis=1)[None, :] - 2.0 * part @ block.T
            if exclude is not None:
                taken = exclude[top : top + rows]
                hit = np.nonzero((taken >= start) & (taken < start + len(block)))[0]
                squared[hit, taken[hit] - start] = np.inf
            column = np.argmin(squared, axis=1)
            value = squared[np.arange(len(part)), column]
            better = value < best[top : top + rows]
            best[top : top + rows][better] = value[better]
            where[top : top + rows][better] = column[better] + start
    return np.sqrt(np.maximum(best, 0.0)), where


def closer_than_neighbours(samples, references):
    """`(share, ratio, distance [N], index [N])`: the share of `samples` nearer to their
    nearest reference than that reference is to any other (or identical to it: a copy of an
    image the set holds twice), the median of those two distances' ratio (0 for copies), and
    each sample's nearest. Share and ratio are None for fewer than two references (one has no
    neighbour)."""
    distance, index = nearest(samples, references)
    if len(references) < 2:
        return None, None, distance, index
    chosen = np.unique(index)
    spacing = np.empty(len(references))
    spacing[chosen] = nearest(references[chosen], references, exclude=chosen)[0]
    copies = (distance < spacing[index]) | (distance == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(distance == 0, 0.0, distance / spacing[index])
    return float(np.mean(copies)), float(np.median(ratio)), distance, index


def memorisation(samples, sample_features, training, held_out=None):
    """The numbers of the module docstring, and what the nearest-neighbour picture shows.

    Args:
        samples: generated images [N, S, S, C] in [-1, 1].
        sample_features: their features [N, D].
        training: `References` of training images.
        held_out: `References` of held-out images, or None.

    Returns:
        `(numbers, nearest)`: numbers as a dict (the reference counts and the shares), and
        `{space: (distance, index)}` to training images, plus `"held_out"`: indices of the
        nearest held-out images in features (or None).
    """
    pixels = (np.asarray(samples, np.float32) + 1.0) * 127.5  # in uint8's units
    queries = {"features": sample_features, "pixels": pixels}
    numbers = {"training_images": len(training.images)}
    if held_out is not None:
        numbers["held_out_images"] = len(held_out.images)
        numbers["memorised_chance"] = len(training.images) / (
            len(training.images) + len(held_out.images)
        )
    found = {"held_out": None}
    for space, query in queries.items():
        suffix = "" if space == "features" else "_pixels"
        share, ratio, distance, index = closer_than_neighbours(query, training.vectors(space))
        numbers[f"copies{suffix}"] = share
        numbers[f"nearest_ratio{suffix}"] = ratio
        found[space] = (distance, index)
        if held_out is not None:
            held_share, held_ratio, held_distance, held_index = closer_than_neighbours(
                query, held_out.vectors(space)
            )
            numbers[f"held_out_copies{suffix}"] = held_share
            numbers[f"held_out_nearest_ratio{suffix}"] = held_ratio
            numbers[f"memorised{suffix}"] = float(np.mean(distance < held_distance))
            if space == "features":
                found["held_out"] = held_index
    return numbers, found


def nearest_picture(samples, training, held_out, found, shown=SHOWN):
    """The samples most like a training image (the smallest distances in features), each
    beside its nearest training image in features and in pixels, and its nearest held-out
    image in features where there is a split: uint8 RGB [H, W, 3]."""
    from stagegan.runfolder import pictures

    distance, index = found["features"]
    order = np.argsort(distance)[:shown]
    as_float = lambda images: images.astype(np.float32) / 127.5 - 1.0
    columns = [samples[order], as_float(training.images[index[order]])]
    columns.append(as_float(training.images[found["pixels"][1][order]]))
    title = "sample | nearest training image: in features, in pixels"
    if held_out is not None:
        columns.append(as_float(held_out.images[found["held_out"][order]]))
        title += " | nearest held-out image"
    return pictures.with_title(pictures.image_rows(columns), title)
