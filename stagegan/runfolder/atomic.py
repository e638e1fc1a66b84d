"""The one atomic write of a run folder's files (and of `prepare`'s): a reader sees the old
file or the whole new one, never half of it. TF-free."""

import contextlib
import os
from pathlib import Path


def atomic_write(path, data, durable=False):
    """Write `data` (bytes, str, or a callable that writes to the path it is given) to `path`
    so that a reader sees the old file or the whole new one, never half of it: into
    `path.tmp` first, then renamed over `path`. `durable` also flushes the file to disk before
    the rename (what an index that names checkpoints needs to survive a power cut). On an
    error the temporary file is removed and the error raised.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        if callable(data):
            data(tmp)
        else:
            with open(
                tmp,
                "wb" if isinstance(data, bytes) else "w",
                encoding=None if isinstance(data, bytes) else "utf-8",
            ) as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the original error is the one to report
            tmp.unlink(missing_ok=True)
        raise
