"""Reading the files a user or a run folder hands over (a config, a run's records, a feature
graph) through one check: regular files only, never more than a bound, without blocking.

A fifo, a socket or a device behind a file's name would block the process at `open`, or never
end a read; a huge file would be read whole before anything could refuse it. TF-free.
"""

import os
import stat

from stagegan.config.memory import format_bytes
from stagegan.errors import ConfigError

MAX_RECORD_BYTES = 256 << 20  # a run folder's JSON and YAML records: far above any real one


def check_regular(path, key, what="file"):
    """Refuse `path` unless it is a regular file (symbolic links followed); returns its size.

    Raises:
        ConfigError: on `key` when it does not exist, cannot be looked at, or is a folder, a
            fifo, a socket or a device.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(key, f"file not found: {path}") from None
    except OSError as e:
        raise ConfigError(key, f"cannot read {what} {path}: {e.strerror}") from None
    if not stat.S_ISREG(status.st_mode):
        kind = "a folder" if stat.S_ISDIR(status.st_mode) else "not a regular file"
        raise ConfigError(key, f"{what} {path} is {kind}")
    return status.st_size


def read_bytes(path, key, limit=MAX_RECORD_BYTES, what="file"):
    """The bytes of the regular file `path`, at most `limit` of them.

    The file is checked before it is opened, opened without blocking and checked again (a
    file swapped for a fifo since cannot block either), and read no further than `limit`.

    Raises:
        ConfigError: on `key`: missing, not a regular file, larger than `limit`, unreadable.
    """
    size = check_regular(path, key, what)
    if size > limit:
        raise ConfigError(key, f"{path} is larger than {limit_text(limit)}, the limit")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError(key, f"{what} {path} is not a regular file")
            data = f.read(limit + 1)
    except OSError as e:
        raise ConfigError(key, f"cannot read {what} {path}: {e.strerror}") from None
    if len(data) > limit:
        raise ConfigError(key, f"{path} is larger than {limit_text(limit)}, the limit")
    return data


def limit_text(limit):
    """`1 MiB` for a whole number of MiB, else decimal units (`format_bytes`)."""
    if limit >= 1 << 20 and not limit % (1 << 20):
        return f"{limit >> 20} MiB"
    return format_bytes(limit)


def read_text(path, key, limit=MAX_RECORD_BYTES, what="file"):
    """`read_bytes` decoded as UTF-8 (a ConfigError on `key` when it is not)."""
    data = read_bytes(path, key, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            key, f"{what} {path} is not UTF-8 text (byte 0x{data[e.start]:02x} at {e.start})"
        ) from None
