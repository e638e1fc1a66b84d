"""Pictures of samples: image grids, completion rows, 2-D scatter plots, and PNG files.

Everything here works on numpy arrays and returns uint8 RGB arrays [H, W, 3], so one picture
serves a PNG file and a TensorBoard image alike. PNGs are encoded by TensorFlow (no metadata,
no timestamps): the same array always gives the same bytes.
"""

import math

import numpy as np

from stagegan.runfolder.atomic import atomic_write

GAP = 2  # pixels between tiles
MIN_TILE = 64  # small images are enlarged (nearest neighbour) to at least this side


def to_uint8(images):
    """Images in [-1, 1] (any shape ending in C = 1 or 3) -> uint8 RGB in [0, 255], quantised
    as stylegan2-ada's metrics quantise a generator's output: `x * 127.5 + 128`, clipped to
    [0, 255] and truncated (so rounded to the nearest level, halves up: a uint8 image scaled
    to [-1, 1] by `u / 127.5 - 1`, as `stagegan.data.sources` reads real images, comes back
    exactly). Grey is repeated to RGB. The one quantisation of pictures and evaluations."""
    images = np.asarray(images, np.float32)
    pixels = np.clip(images * 127.5 + 128, 0, 255).astype(np.uint8)
    if pixels.shape[-1] == 1:
        pixels = np.repeat(pixels, 3, axis=-1)
    return pixels


def enlarge(images, side=MIN_TILE):
    """Nearest-neighbour enlargement by the integer factor that brings the side to `side`."""
    factor = max(1, side // images.shape[-2])
    if factor == 1:
        return images
    return images.repeat(factor, axis=-3).repeat(factor, axis=-2)


def tile(rows, background=255):
    """Lay out a 2-D list of equal-size uint8 tiles [h, w, 3] with GAP pixels between them."""
    h, w = rows[0][0].shape[:2]
    columns = max(len(row) for row in rows)
    canvas = np.full(
        (len(rows) * (h + GAP) - GAP, columns * (w + GAP) - GAP, 3), background, np.uint8
    )
    for r, row in enumerate(rows):
        for c, image in enumerate(row):
            canvas[r * (h + GAP) : r * (h + GAP) + h, c * (w + GAP) : c * (w + GAP) + w] = image
    return canvas


def image_grid(images, columns=None):
    """Images [N, S, S, C] in [-1, 1] -> one grid picture, as square as possible."""
    tiles = enlarge(to_uint8(images))
    count = len(tiles)
    columns = columns or math.ceil(math.sqrt(count))
    return tile([list(tiles[i : i + columns]) for i in range(0, count, columns)])


MIN_BLOCK_ROWS = 8  # image_rows: rows per block before blocks go side by side


def image_rows(columns):
    """Rows of side-by-side images: `columns` is a list of [N, S, S, C] arrays in [-1, 1]; row
    i shows image i of each column.

    Many rows are laid out in blocks side by side, so the picture stays roughly square: each
    block holds max(8, ceil(sqrt(N x columns))) rows, blocks are separated by a wider gap.
    """
    tiles = [enlarge(to_uint8(c)) for c in columns]
    count = len(tiles[0])
    per_block = max(MIN_BLOCK_ROWS, math.ceil(math.sqrt(count * len(tiles))))
    blocks = [
        tile([[c[i] for c in tiles] for i in range(start, min(start + per_block, count))])
        for start in range(0, count, per_block)
    ]
    return side_by_side(blocks)  # the last block may be shorter


def side_by_side(pictures, gap=4 * GAP):
    """uint8 pictures [H, W, 3] of any sizes in one row, top-aligned on white, `gap` pixels
    apart (blocks of rows, or `compare`'s arms)."""
    if len(pictures) == 1:
        return pictures[0]
    height = max(picture.shape[0] for picture in pictures)
    spacer = np.full((height, gap, 3), 255, np.uint8)
    padded = []
    for picture in pictures:
        below = np.full((height - picture.shape[0], *picture.shape[1:]), 255, np.uint8)
        padded += [np.concatenate([picture, below]), spacer]
    return np.concatenate(padded[:-1], axis=1)


TITLE_HEIGHT = 18  # pixels


def with_title(picture, text):
    """`picture` [H, W, 3] with a white strip above it holding `text` (left-aligned)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dpi = 100
    width = picture.shape[1]
    figure = Figure(figsize=(width / dpi, TITLE_HEIGHT / dpi), dpi=dpi, facecolor="white")
    canvas = FigureCanvasAgg(figure)
    figure.text(6 / width, 0.5, text, fontsize=8, va="center", ha="left", color="black")
    canvas.draw()
    drawn = np.asarray(canvas.buffer_rgba())[:TITLE_HEIGHT, :width, :3]
    strip = np.full((TITLE_HEIGHT, width, 3), 255, np.uint8)  # matplotlib may round 1 px off
    strip[: drawn.shape[0], : drawn.shape[1]] = drawn
    return np.concatenate([strip, picture], axis=0)


def scatter(points, centres, limit, size_px=400, title=None):
    """A scatter plot of 2-D `points` (blue) over the true `centres` (red crosses).

    Drawn with matplotlib's Agg canvas directly (no pyplot global state).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dpi = 100
    figure = Figure(figsize=(size_px / dpi, size_px / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    points = np.asarray(points)
    axes.scatter(centres[:, 0], centres[:, 1], s=60, c="tab:red", marker="x", linewidths=1.0)
    axes.scatter(points[:, 0], points[:, 1], s=3, c="tab:blue", alpha=0.5, linewidths=0, zorder=3)
    axes.set_xlim(-limit, limit)
    axes.set_ylim(-limit, limit)
    axes.set_aspect("equal")
    if title:
        axes.set_title(title, fontsize=9)
    figure.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def encode_png(picture):
    """uint8 [H, W, 3] -> PNG bytes."""
    import tensorflow as tf

    return tf.io.encode_png(np.ascontiguousarray(picture, np.uint8)).numpy()


def write_png(picture, path):
    """Write a picture as a PNG, atomically (a reader never sees half a file)."""
    data = encode_png(picture)
    try:
        atomic_write(path, data)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None
    return path


FRAME_MS = 80  # an animation's frame time: 12.5 frames a second


def write_gif(images, path, frame_ms=FRAME_MS):
    """Write images [N, H, W, C] in [-1, 1] as an animated GIF, one frame an image, looping,
    enlarged as the grids are (`enlarge`), atomically. Pillow (a dependency of matplotlib)
    encodes it."""
    from PIL import Image

    frames = [Image.fromarray(frame) for frame in enlarge(to_uint8(images))]

    def save(tmp):
        frames[0].save(
            tmp,
            format="GIF",
            save_all=True,
            append_images=frames[1:],
            duration=frame_ms,
            loop=0,
        )

    try:
        atomic_write(path, save)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None
    return path
