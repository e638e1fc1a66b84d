"""Run folders: auto-numbered under `runs/`, never overwritten (`check_new_folder` guards
`prepare`'s output folder the same way)."""

import re
from pathlib import Path

from stagegan.errors import ConfigError
from stagegan.runfolder.atomic import atomic_write

_NUMBERED = re.compile(r"^(\d{5})-")


def check_new_run_dir(path):
    """Refuse a run folder that already holds something, or that cannot be created (checked
    before the networks are built, so a typo does not cost a model build)."""
    check_new_folder(
        path,
        "--run-dir",
        "a run folder is never overwritten (pick another folder, or continue that run with "
        "--resume)",
    )


def check_new_folder(path, key, refusal):
    """Refuse a folder to be written that already holds something (`refusal` says what to do
    instead), or that cannot be created (a file or an unwritable folder in the way). Errors
    name `key`."""
    import os

    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(key, f"{path} already exists and is not empty; {refusal}")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(key, f"cannot create {path}: {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(key, f"cannot create {path}: {ancestor} is not writable")


def create_run_dir(path=None, root="runs", name="run"):
    """Create the run folder: `path` if given, else the next `root/NNNNN-name`."""
    try:
        if path is not None:
            path = Path(path)
            check_new_run_dir(path)
            path.mkdir(parents=True, exist_ok=True)
            return path
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        while True:
            numbers = [int(m.group(1)) for p in root.iterdir() if (m := _NUMBERED.match(p.name))]
            candidate = root / f"{max(numbers, default=-1) + 1:05d}-{name}"
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                continue  # another run took that number meanwhile
    except PermissionError as e:
        raise ConfigError(
            "--run-dir", f"cannot create run folder {e.filename}: permission denied"
        ) from None
    except OSError as e:
        raise ConfigError(
            "--run-dir", f"cannot create run folder {e.filename}: {e.strerror}"
        ) from None


LOCK = ".lock"


def lock_run_dir(path, key="--run-dir"):
    """Hold an exclusive lock on a run folder for the life of this process (released by the
    OS when it exits, even when killed), so two processes never train into one folder.

    Returns the open lock file (keep a reference). Raises ConfigError when another process
    holds it.
    """
    import fcntl
    import os

    path = Path(path)
    lock = open(path / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise ConfigError(
            key, f"{path} is in use by another stagegan process (pid {holder})"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return lock


class RunFolder:
    """One run folder: the names of its files, its lock, its checkpoint index and the one
    atomic write. Every door reads and writes a run through it.

        config.yaml        the resolved config (`CONFIG`)
        checkpoints/       the checkpoints and their index (`checkpoints()`)
        metrics.jsonl      one record per logged step (`METRICS`)
        guard.jsonl        the updates the NaN/Inf guard skipped (`GUARD`)
        resume.jsonl       one record per resume (`RESUME_LOG`)
        clusters.json      the clusters of `data.labels: clusters` (`CLUSTERS`)
        holdout.json       the `data.holdout` split of a folder: counts, held-out files (`HOLDOUT`)
        samples/           sample pictures and their manifest
        .lock              held by the process that trains into it (`lock`)
    """

    CONFIG = "config.yaml"
    CHECKPOINTS = "checkpoints"
    METRICS = "metrics.jsonl"
    GUARD = "guard.jsonl"
    RESUME_LOG = "resume.jsonl"
    CLUSTERS = "clusters.json"
    HOLDOUT = "holdout.json"
    SAMPLES = "samples"

    def __init__(self, path):
        self.path = Path(path)

    def __repr__(self):
        return f"RunFolder({str(self.path)!r})"

    @classmethod
    def create(cls, path=None, root="runs", name="run"):
        """A new run folder: `path` if given (refused when it holds something), else the
        next `root/NNNNN-name` (see `create_run_dir`)."""
        return cls(create_run_dir(path, root, name))

    @staticmethod
    def check_new(path):
        """Refuse `path` as a new run's folder before anything is built (`check_new_run_dir`)."""
        check_new_run_dir(path)

    def lock(self, key="--run-dir"):
        """The folder's lock (`lock_run_dir`), held while the returned object lives."""
        return lock_run_dir(self.path, key)

    def write(self, name, data, durable=False):
        """Write the file `name` of the folder atomically (`atomic_write`)."""
        atomic_write(self.path / name, data, durable)

    EVAL_LOG = "eval.jsonl"
    # The files a door reads or appends to: each must be a regular file where it exists (a
    # fifo would block the reader, or the writer that appends, for ever).
    RECORDS = (
        CONFIG,
        f"{CHECKPOINTS}/index.json",
        METRICS,
        GUARD,
        RESUME_LOG,
        CLUSTERS,
        EVAL_LOG,
        f"{SAMPLES}/inputs.npz",
        f"{SAMPLES}/manifest.jsonl",
    )

    def check_records(self, key):
        """Refuse a run folder whose records are not regular files (a fifo, a device, a
        folder in a file's place), before anything reads or writes them.

        Raises:
            ConfigError: on `key`, naming the file.
        """
        import os

        from stagegan.config.files import check_regular

        for name in self.RECORDS:
            path = self.path / name
            if os.path.lexists(path):
                check_regular(path, key, "run record")

    @property
    def config_file(self):
        return self.path / self.CONFIG

    def checkpoints(self, saver=None, keep=1):
        """The `CheckpointStore` of its checkpoints (`saver`: the trainer's `tf.train.Checkpoint`,
        None to read only; `keep`: the newest periodic ones kept)."""
        from stagegan.runfolder.checkpoints import CheckpointStore  # it imports this module

        return CheckpointStore(self.path / self.CHECKPOINTS, saver, keep)
