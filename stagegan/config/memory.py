"""Refusing sizes whose arrays (or networks) cannot fit in memory, before anything allocates
them: numpy and TensorFlow would end in an out-of-memory traceback, or the kernel would kill
the process.

Imports nothing heavy: the CLI checks `prepare --size` before it imports TensorFlow.
"""

import math
import os

from stagegan.errors import ConfigError, shown

ORDINARY_SIDE = 64  # a side most image runs use: the size check blames `size` if it would fit


def physical_memory():
    """This machine's physical memory in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def cgroup_memory():
    """The memory limit of this process's cgroup in bytes (v2 `memory.max`, v1
    `memory.limit_in_bytes`), or None when it has none."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            names = [f"/sys/fs/cgroup{path}/memory.max", "/sys/fs/cgroup/memory.max"]
        elif "memory" in controllers.split(","):
            names = [
                f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes",
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            ]
        else:
            continue
        for name in names:
            try:
                with open(name, encoding="utf-8") as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 1 << 60:  # v1 writes "no limit" as ~2**63
                limits.append(int(text))
            break
    return min(limits, default=None)


def free_memory():
    """The memory the kernel says new work can take (`MemAvailable`), or None."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_limit():
    """`(bytes, words)`: the memory this process may use, the least of the machine's
    physical memory, its cgroup's limit and the memory free now, and how a message names it
    ("this machine has 16.0 GB"); `(None, "")` where none is known."""
    known = [
        (value, words)
        for value, words in (
            (physical_memory(), "this machine has {}"),
            (cgroup_memory(), "this process may use {} (its cgroup's limit)"),
            (free_memory(), "{} is free"),
        )
        if value is not None
    ]
    if not known:
        return None, ""
    value, words = min(known, key=lambda item: item[0])
    return value, words.format(format_bytes(value))


def check_memory(parts, received, key=None):
    """Refuse arrays (and networks) that would not fit in the memory this process may use
    (`memory_limit`), before anything allocates them.

    Args:
        parts: `[(key, bytes, what), ...]`: each thing the values would allocate at once,
            the key whose value makes it that large, and a few words on it ("8,000 images
            held").
        received: `{key: value}`, the values named in the message.
        key: the key to blame; None: the key of the largest part.

    Raises:
        ConfigError: when the parts add up to more than the limit.
    """
    limit, where = memory_limit()
    needed = sum(size for _, size, _ in parts)
    if limit is not None and needed > limit:
        _refuse(parts, received, key, needed, where)


def _refuse(parts, received, key, needed, where):
    if key is None:
        key = max(parts, key=lambda part: part[1])[0]
    what = ", ".join(words for _, size, words in parts if size and words)
    raise ConfigError(
        key,
        f"would need about {format_bytes(needed)} of memory ({what}); {where}. "
        f"Received: {shown(received[key])}",
    )


def check_image_memory(parts, side, size_key, received):
    """Refuse image arrays that would not fit in memory (`check_memory`), blaming the image
    side when they would fit at an ordinary one.

    Args:
        parts: as `check_memory`'s; every part grows with the image area `side` x `side`.
        side: the image side in pixels.
        size_key: the key of `side` (`data.size`, `--size`).
        received: `{key: value}`, the values named in the message.

    Raises:
        ConfigError: when the parts add up to more than the limit: on `size_key` when they
            would fit at `ORDINARY_SIDE` px, else on the key of the largest part.
    """
    limit, where = memory_limit()
    needed = sum(size for _, size, _ in parts)
    if limit is None or needed <= limit:
        return
    fits_smaller = needed * ORDINARY_SIDE**2 <= limit * side**2  # integers: no overflow
    _refuse(parts, received, size_key if fits_smaller else None, needed, where)


def format_count(count):
    """`1,234,567`; past 10**15, the power of ten (a message is no place for 400 digits)."""
    if count >= 10**15:
        return f"over 10**{int(count.bit_length() * math.log10(2))}"
    return f"{count:,}"


def format_bytes(count):
    """`23.4 GB`: decimal units, up to TB (past a million TB, the power of ten)."""
    if count >= 10**18:  # integer arithmetic: a count beyond any float does not overflow
        return f"over 10**{int(count.bit_length() * math.log10(2))} bytes"
    if count < 1000:
        return f"{count} bytes"
    for unit in ("KB", "MB", "GB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    count /= 1000
    return f"{count:,.1f} TB" if count < 100 else f"{count:,.0f} TB"
