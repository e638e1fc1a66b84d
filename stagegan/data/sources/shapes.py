"""`data.source: shapes`: procedurally drawn, seeded images of coloured circles, squares and
triangles on varied backgrounds (offline; the held-out split is drawn from another seed)."""

import numpy as np

from stagegan.config.memory import format_count
from stagegan.data.sources.base import Pool, Source, register

# Shapes ---------------------------------------------------------------------------------------


def draw_shapes(count, size, seed, channels=3, labels=False):
    """`count` images of coloured shapes, uint8 [count, size, size, channels], from `seed`.

    Each image has a background (a random colour with a linear gradient) and 1-3 shapes:
    circles, squares or triangles of random colour, size and position. The same seed gives
    the same images, byte for byte.

    With `labels`, returns `(images, labels)`, where `labels` holds int arrays [count]:
    `kind` (of the topmost shape that shows at least `VISIBLE` of the image: 0 circle,
    1 square, 2 triangle, 3 none), `colour` (its colour, one bit per channel above 0.5: 0-7,
    or 8 for none), `background` (the background's base colour, 0-7) and `shapes` (how many
    shapes show, 0-3). These are what `stagegan.evaluation.shapes_net` learns; drawing them
    changes no image.
    """
    parameters = shape_parameters(count, seed)
    images, owner = draw_rows(parameters, np.arange(count), size, channels)
    if not labels:
        return images
    base, _, layers = parameters
    kinds = np.stack([layer[1] for layer in layers], 1)
    colours = np.stack([layer[5] for layer in layers], 1)
    return images, _shape_labels(owner, kinds, colours, base)


def shape_parameters(count, seed):
    """What `draw_shapes` draws `count` images from, `(base, slope, layers)`: every random
    number, for every image, in the order drawn (drawing them is fast; rendering is not)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.0, 1.0, (count, 1, 1, 3))
    slope = rng.uniform(-0.3, 0.3, (count, 1, 1, 2))
    layers = []
    for _ in range(3):
        present = rng.uniform(size=count) < 0.7
        kind = rng.integers(0, 3, count)
        cx, cy = rng.uniform(0.2, 0.8, count), rng.uniform(0.2, 0.8, count)
        radius = rng.uniform(0.12, 0.3, count)
        colour = rng.uniform(0.0, 1.0, (count, 3))
        layers.append((present, kind, cx, cy, radius, colour))
    return base, slope, layers


def draw_rows(parameters, rows, size, channels):
    """Images `rows` (an int array) of those `parameters` describe, `(uint8 [len(rows), size,
    size, channels], owner)`, in the order asked: each image is drawn on its own, so the
    images drawn are those of drawing them all, byte for byte."""
    base, slope, layers = parameters
    images = np.empty((len(rows), size, size, channels), np.uint8)
    owner = np.empty((len(rows), size, size), np.int8)  # which layer shows at each pixel
    chunk = shapes_chunk(size)
    for start in range(0, len(rows), chunk):  # bounded memory for large counts and sizes
        part, picked = slice(start, start + chunk), rows[start : start + chunk]
        images[part], owner[part] = _render_shapes(
            size, channels, base[picked], slope[picked], [[a[picked] for a in la] for la in layers]
        )
    return images, owner


SHAPES_CHUNK = 1000
DRAW_BYTES = 100  # bytes per pixel of the shapes being drawn at once (float64 layers, masks)
DRAW_BUDGET = 256 << 20  # bytes drawn at once at most (but one image at least)


def shapes_chunk(size):
    """How many images `draw_shapes` draws at once: up to `SHAPES_CHUNK`, in `DRAW_BUDGET`
    bytes (each image is drawn on its own: the chunk changes no pixel)."""
    return int(np.clip(DRAW_BUDGET // (size * size * DRAW_BYTES), 1, SHAPES_CHUNK))


def _render_shapes(size, channels, base, slope, layers):
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = base + slope[..., :1] * xs[None, ..., None] + slope[..., 1:] * ys[None, ..., None]
    # float32, then float64 (the colours' type) from the first shape on, as always drawn
    images = images.astype(np.float32).astype(np.float64)
    owner = np.full(images.shape[:3], -1, np.int8)
    for index, (present, kind, cx, cy, radius, colour) in enumerate(layers):
        for shape in range(3):  # each shape's test on the images that draw it only
            rows = np.nonzero(present & (kind == shape))[0]
            if len(rows) == 0:
                continue
            dx = xs[None] - cx[rows, None, None]
            dy = ys[None] - cy[rows, None, None]
            r = radius[rows, None, None]
            if shape == 0:  # a circle
                inside = dx**2 + dy**2 <= r**2
            elif shape == 1:  # a square
                inside = (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
            else:  # an upward triangle: below the apex, inside two slanted edges, above the base
                inside = (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
            drawn = images[rows]
            drawn[inside] = np.broadcast_to(colour[rows, None, None, :], drawn.shape)[inside]
            images[rows] = drawn
            mine = owner[rows]
            mine[inside] = index
            owner[rows] = mine
    images = np.clip(images, 0.0, 1.0)
    if channels == 1:
        images = images.mean(axis=-1, keepdims=True)
    return np.round(images * 255).astype(np.uint8), owner


VISIBLE = 0.03  # the share of an image a shape must show to count as present
COLOUR_BITS = np.array([4, 2, 1])


def _shape_labels(owner, kinds, colours, base):
    """The labels of `draw_shapes(labels=True)` from each pixel's top layer (-1: background),
    the layers' kinds [N, 3] and colours [N, 3, 3], and the background colours [N, 1, 1, 3]."""
    count, pixels = len(owner), owner[0].size
    areas = np.stack([(owner == layer).sum(axis=(1, 2)) for layer in range(3)], 1) / pixels
    visible = areas >= VISIBLE  # [N, 3 layers]
    top = np.where(visible, np.arange(3)[None], -1).max(axis=1)  # the last drawn visible
    rows, layer = np.arange(count), np.maximum(top, 0)
    colour = ((colours[rows, layer] > 0.5) * COLOUR_BITS).sum(axis=1)
    return {
        "kind": np.where(top >= 0, kinds[rows, layer], 3),
        "colour": np.where(top >= 0, colour, 8),
        "background": ((base.reshape(count, 3) > 0.5) * COLOUR_BITS).sum(axis=1),
        "shapes": visible.sum(axis=1),
    }


SHAPES_HELD_OUT = 10000  # the held-out split of `shapes`: as large as FID's usual sample count
HELD_OUT_OFFSET = 7919  # added to the run's seed for the held-out split


@register
class ShapesSource(Source):
    """`shapes`: coloured shapes drawn from the seed (`draw_shapes`); the held-out split is
    drawn from another seed."""

    names = ("shapes",)
    held_out = True
    features = "shapes"

    def held(self):
        return self.options["count"], "data.count"

    def start_up(self, held):
        size = self.options["size"]
        drawn = min(held, shapes_chunk(size))
        return drawn * size * size * DRAW_BYTES, f"{format_count(drawn)} drawn at a time"

    def load(self, seed, held_out=False):
        o = self.options
        count = SHAPES_HELD_OUT if held_out else o["count"]
        return draw_shapes(
            count, o["size"], seed + (HELD_OUT_OFFSET if held_out else 0), o["channels"]
        )

    def pool(self, seed, count):
        """The held-out split, each image drawn the first time it is chosen: an evaluation of
        400 images draws those 400, not the split's 10,000, and one that chooses an image
        again (its FID, then its memorisation check) does not draw it twice. The same images,
        byte for byte, as drawing them all."""
        o = self.options
        parameters = shape_parameters(SHAPES_HELD_OUT, seed + HELD_OUT_OFFSET)
        images = np.empty((SHAPES_HELD_OUT, o["size"], o["size"], o["channels"]), np.uint8)
        drawn = np.zeros(SHAPES_HELD_OUT, bool)

        def load(rows):
            rows = np.asarray(rows, np.int64)
            missing = np.unique(rows[~drawn[rows]])
            images[missing] = draw_rows(parameters, missing, o["size"], o["channels"])[0]
            drawn[missing] = True
            return images[rows], None

        return Pool(SHAPES_HELD_OUT, True, load)
