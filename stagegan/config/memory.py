"""Refusing sizes whose arrays cannot fit in memory, before anything allocates them: numpy and
TensorFlow would end in an out-of-memory traceback, or the kernel would kill the process.

Imports nothing heavy: the CLI checks `prepare --size` before it imports TensorFlow.
"""

import os

from stagegan.errors import ConfigError

ORDINARY_SIDE = 64  # a side most image runs use: the size check blames `size` if it would fit


def physical_memory():
    """This machine's physical memory in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_image_memory(parts, side, size_key, received):
    """Refuse image arrays that would not fit in this machine's physical memory.

    Args:
        parts: `[(key, bytes, what), ...]`: each array the sizes would allocate at once, the
            key whose value makes it that large, and a few words on it ("8,000 images held").
            Every part grows with the image area `side` x `side`.
        side: the image side in pixels.
        size_key: the key of `side` (`data.size`, `--size`).
        received: `{key: value}`, the values named in the message.

    Raises:
        ConfigError: when the parts add up to more than the physical memory: on `size_key`
            when they would fit at `ORDINARY_SIDE` px, else on the key of the largest part.
    """
    limit = physical_memory()
    needed = sum(size for _, size, _ in parts)
    if limit is None or needed <= limit:
        return
    if needed * (ORDINARY_SIDE / side) ** 2 <= limit:
        key = size_key
    else:
        key = max(parts, key=lambda part: part[1])[0]
    what = ", ".join(words for _, size, words in parts if size)
    raise ConfigError(
        key,
        f"would need about {format_bytes(needed)} of memory ({what}); this machine has "
        f"{format_bytes(limit)}. Received: {received[key]}",
    )


def format_bytes(count):
    """`23.4 GB`: decimal units, up to TB."""
    if count < 1000:
        return f"{count} bytes"
    for unit in ("KB", "MB", "GB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    count /= 1000
    return f"{count:,.1f} TB" if count < 100 else f"{count:,.0f} TB"
