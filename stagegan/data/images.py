"""The one reader of image files: every path that opens an image (a folder source's loading
and streaming, `data.channels: auto`'s peek, TFRecords, `sample --input` and `--masks`,
`project`, `prepare`, `eval`'s real images) reads its bytes here and asks `check_header`
before anything decodes them.

`check_header` reads the size from the file's header (Pillow reads headers without decoding)
and refuses an image of more pixels than `pixel_limit(size)`, a bound set from the image side
the run trains at, not from Pillow's own limit: a PNG of a few hundred KB can hold 20000 x
20000 pixels (1.2 GB decoded), and one just under Pillow's limit (13000 x 13000) half a
gigabyte. A refused or broken file is skipped like any unreadable one: its reason is kept in
`refusal(name)` for the one warning line that names it and the key that named its folder.
"""

import io
import os
import re
import stat
import warnings

# The fewest pixels an image may have and still be read at any side: 8192 x 8192 (a 61
# megapixel camera's photographs fit). At larger sides the bound is (64 x side)^2, at most
# 2**28 pixels (16384 x 16384: 805 MB decoded), under Pillow's own hard limit (2 x 89.5 M).
LEAST_PIXEL_LIMIT = 2**26
MOST_PIXEL_LIMIT = 2**28
SIDES_PER_SIDE = 64


def pixel_limit(size):
    """The most pixels (width x height) an image may have to be read for a run at `size` px."""
    return min(max(LEAST_PIXEL_LIMIT, (SIDES_PER_SIDE * int(size)) ** 2), MOST_PIXEL_LIMIT)


_QUIET = False


def _quiet_pillow():
    """Pillow warns (a two-line Python warning on stderr) of images past its own limit; the
    bound here is lower and its refusal is the one line said, so that warning is not shown."""
    global _QUIET
    if not _QUIET:
        from PIL import Image

        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
        _QUIET = True


def check_header(raw, size):
    """Whether the encoded image `raw` (bytes) may be decoded for a run at `size` px: `None`
    when it may, else the reason it may not (a few words: not an image Pillow knows, a broken
    header, or more pixels than `pixel_limit(size)`). Reads the header only."""
    from PIL import Image

    _quiet_pillow()
    if not raw:
        return "not a readable regular file"
    try:
        with Image.open(io.BytesIO(raw)) as image:
            width, height = image.size
    except Image.DecompressionBombError as error:  # past Pillow's hard limit, past ours too
        found = re.search(r"\((\d+) pixels\)", str(error))
        pixels = f"{int(found[1]):,} pixels" if found else "more pixels than Pillow opens"
        return f"{pixels}, over the {pixel_limit(size):,} read at {size} px (a decompression bomb?)"
    except Exception as error:  # noqa: BLE001 - whatever Pillow raises for a hostile file
        return f"not an image ({type(error).__name__})"
    limit = pixel_limit(size)
    if width * height > limit:
        return (
            f"{width}x{height} pixels, over the {limit:,} read at {size} px (a decompression bomb?)"
        )
    return None


_REFUSED = {}  # file name -> why `read_image_file` refused it (this process)


def refusal(name):
    """Why `read_image_file` refused the file `name` (str), or None."""
    return _REFUSED.get(os.fsdecode(name))


def read_regular_file(path):
    """The bytes of the file `path` (str or bytes), or b"" when it cannot be read or is not a
    regular file (a fifo, a socket, a device: opening one for reading can block forever). It
    is checked before opening, and opened without blocking and checked again, so a file
    swapped since cannot block either."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return b""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            return f.read() if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""


def read_image_file(path, size):
    """The bytes of the image file `path` (str or bytes) when `check_header` passes them for
    a run at `size` px, else b"" (which fails to decode, as any unreadable file), with the
    reason kept for `refusal`. Read in Python: TensorFlow's reader blocks on a fifo and
    takes names as UTF-8."""
    raw = read_regular_file(path)
    reason = check_header(raw, size) if raw else None
    if reason is not None:
        _REFUSED[os.fsdecode(path)] = reason
        return b""
    return raw


def checked_bytes(raw, size):
    """`raw` (an encoded image) when `check_header` passes it, else b"" (TFRecord images)."""
    return raw if check_header(raw, size) is None else b""


def peek_bytes(raw, size):
    """An image's pixels (uint8, RGB) from its encoded bytes, or None when it is unreadable or
    refused (`check_header`). A JPEG is decoded at a reduced size."""
    import numpy as np
    from PIL import Image

    if check_header(raw, size) is not None:
        return None
    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.draft("RGB", (64, 64))  # JPEG: decode at a reduced size
            return np.asarray(image.convert("RGB"))
    except Exception:  # noqa: BLE001 - whatever Pillow raises for a broken file
        return None


def peek_file(name, size):
    return peek_bytes(read_regular_file(name), size)
