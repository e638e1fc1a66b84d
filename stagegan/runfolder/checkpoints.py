"""Checkpoints of a run: `tf.train.Checkpoint` files plus a small JSON index.

Each save writes `ckpt-<step>` (TensorFlow's `.index` and `.data-*` files), syncs them to disk,
and then rewrites `index.json` atomically, so the index only ever lists complete checkpoints:
a process killed in the middle of a save leaves the previous index, and so the previous
checkpoint, as the latest. The index records every file's size, so a truncated checkpoint is
found before anything is restored from it (TensorFlow's own CRC32C checksums catch the rest
while restoring).

Tags say why a checkpoint exists: `periodic` and `interrupted` ones rotate (the newest `keep`
stay); `stage_end:<stage>`, `final` and `best` (`checkpoint.keep_best`: one checkpoint at a
time) ones are never rotated away.

What a save can leave behind when it is interrupted (`ckpt-N_temp/` folders, files of a
checkpoint the index does not list) is removed by `clean_up`, which a resumed run calls first.
"""

import json
import os
import re
import shutil
from pathlib import Path

from stagegan.config.files import read_text
from stagegan.errors import WriteError
from stagegan.runfolder.atomic import atomic_write

INDEX = "index.json"
SUPERSEDED = "superseded"
ROTATING = {"periodic", "interrupted"}
_FILE = re.compile(r"^(ckpt-\d+)(?:\.|_temp$)")


class CheckpointWriteError(WriteError):
    """A checkpoint could not be written (disk full, permissions); the index is unchanged."""


def _number(value, integer=False):
    """Whether `value` read from JSON is a number (an integer, with `integer`)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if integer else isinstance(value, (int, float))


def records_problem(entry):
    """What is wrong with the records an index entry carries beside its files (the train
    loop's `best`, `until` and `log_pending`, see `stagegan.training.checkpointing`), or None."""
    for field, check in (("best", _best_problem), ("until", _until_problem)):
        if entry.get(field) is not None:
            problem = check(entry[field], entry["step"])
            if problem:
                return problem
    pending = entry.get("log_pending")
    if pending is not None and not (
        isinstance(pending, dict)
        and all(
            isinstance(k, str) and isinstance(v, list) and len(v) == 2 and all(map(_number, v))
            for k, v in pending.items()
        )
    ):
        return "log_pending is not a record of the log interval's sums"
    return None


def _best_problem(best, at):
    """`checkpoint.keep_best`'s record (`checkpointing.BestKeeper.state`) at global step `at`."""
    if not isinstance(best, dict) or not isinstance(best.get("metric"), str):
        return f"best {best!r} is not a keep_best record"
    value, step = best.get("value"), best.get("step")
    if (value is None) != (step is None):
        return f"best {best!r} has a value without its step, or a step without its value"
    if value is not None and not (_number(value) and value == value):  # NaN
        return f"best value {value!r} is not a number"
    if step is not None and not (_number(step, True) and 0 <= step <= at):
        return f"best step {step!r} is not a step up to {at}"
    return None


def _until_problem(until, at):
    """The `until` checks' record (`until.Conditions.state`) at global step `at`."""
    if not isinstance(until, dict):
        return f"until {until!r} is not a record of the until checks"
    ends = until.get("ends", {})
    if not isinstance(ends, dict) or not all(
        isinstance(k, str) and _number(v, True) and 0 < v <= at for k, v in ends.items()
    ):
        return f"until.ends {ends!r} are not stages' lengths"
    for field, integer in (("total", False), ("count", True), ("bad", True)):
        value = until.get(field, 0)
        if not _number(value, integer) or value != value:  # NaN
            return f"until.{field} {value!r} is not a number"
    if until.get("best") is not None and not _number(until["best"]):
        return f"until.best {until['best']!r} is not a number"
    return None


class CheckpointStore:
    """Saves, rotates, checks and lists the checkpoints in one folder.

    Args:
        directory: the folder (created on first save).
        checkpoint: the `tf.train.Checkpoint` to write (None to only read the index).
        keep: how many rotating (`periodic`, `interrupted`) checkpoints to keep.
    """

    def __init__(self, directory, checkpoint, keep):
        self.directory = Path(directory)
        self.checkpoint = checkpoint
        self.keep = keep

    def entries(self):
        """The listed checkpoints, oldest first: dicts with `step`, `prefix`, `tags` and
        `files` (name -> size in bytes; absent in indexes written before sizes were kept)."""
        path = self.directory / INDEX
        if not os.path.lexists(path):
            return []
        return json.loads(read_text(path, str(path), what="checkpoint index"))["checkpoints"]

    def index_problem(self, entries):
        """What is wrong with the shape of an index's `entries` (as `entries()` read them),
        or None: each entry needs an integer `step`, a `prefix` naming a file of this folder,
        a list of string `tags`, and `files` a mapping of names to sizes (or absent)."""
        if not isinstance(entries, list):
            return "`checkpoints` is not a list"
        steps = []
        for i, entry in enumerate(entries):
            where = f"entry {i + 1}"
            if not isinstance(entry, dict):
                return f"{where} is not a mapping"
            for field in ("step", "prefix", "tags"):
                if field not in entry:
                    return f"{where} has no {field!r}"
            step, prefix, tags = entry["step"], entry["prefix"], entry["tags"]
            if not isinstance(step, int) or isinstance(step, bool) or step < 0:
                return f"{where}: step {step!r} is not a global step"
            if not isinstance(prefix, str) or not re.fullmatch(r"ckpt-\d+", prefix):
                return f"{where}: prefix {prefix!r} is not a checkpoint of this folder"
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                return f"{where}: tags {tags!r} are not a list of names"
            files = entry.get("files")
            if files is not None and not (
                isinstance(files, dict)
                and all(
                    isinstance(k, str) and "/" not in k and isinstance(v, int)
                    for k, v in files.items()
                )
            ):
                return f"{where}: files {files!r} are not file sizes"
            problem = records_problem(entry)
            if problem:
                return f"{where}: {problem}"
            steps.append(step)
        if steps != sorted(set(steps)):
            return "the steps are not in increasing order"
        return None

    def damaged_best(self):
        """`(entry, problem)` of the checkpoint tagged `best` when its files are not whole,
        else None."""
        entry = self.tagged("best")
        problem = None if entry is None else self.verify(entry)
        return None if problem is None else (entry, problem)

    def path_of(self, entry):
        return str(self.directory / entry["prefix"])

    def latest(self):
        entries = self.entries()
        return entries[-1] if entries else None

    def save(self, step, tags, extra=None):
        """Write a checkpoint for global step `step` with `tags`; returns its path prefix.
        `extra` (a JSON-able dict) goes into its index entry (the train loop keeps there the
        log interval's partial means, so a resume logs as the uninterrupted run would).

        Raises:
            CheckpointWriteError: the files could not be written; what was written of them
                is removed and the index (so the last good checkpoint) is unchanged.
        """
        prefix = f"ckpt-{step:08d}"
        entries = self.entries()
        previous = next((e for e in entries if e["step"] == step), None)
        if previous is not None:  # the same state saved again: only the tags change
            tags = sorted(set(previous["tags"]) | set(tags))
            files = previous.get("files")
            extra = {**previous, **(extra or {})}
        else:
            files = self._write(prefix)
        entries = [e for e in entries if e["step"] != step]
        entry = {"step": step, "prefix": prefix, "tags": sorted(tags), "files": files}
        entries.append({**(extra or {}), **entry})
        entries.sort(key=lambda e: e["step"])
        rotating = [e for e in entries if set(e["tags"]) <= ROTATING]
        stale = rotating[: max(0, len(rotating) - self.keep)]
        kept = [e for e in entries if e not in stale]
        try:
            self._write_index(kept)
        except CheckpointWriteError:
            if previous is None:
                self._delete(prefix)
            raise
        for entry in stale:
            self._delete(entry["prefix"])
        return str(self.directory / prefix)

    def _write(self, prefix):
        """Write and sync the checkpoint files of `prefix`; returns `{name: size}`."""
        import tensorflow as tf

        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.checkpoint.write(str(self.directory / prefix))
            files = {}
            for path in sorted(self.directory.glob(prefix + ".*")):
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
                files[path.name] = path.stat().st_size
            return files
        except (OSError, tf.errors.OpError) as e:
            self._delete(prefix)
            reason = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e)
            latest = self.latest()
            last = f"the last good checkpoint is {latest['prefix']}" if latest else "none yet"
            raise CheckpointWriteError(
                "checkpoint",
                f"cannot write checkpoint {self.directory / prefix}: "
                f"{reason.strip().splitlines()[0]} ({last}, unharmed)",
            ) from None

    def verify(self, entry):
        """What is wrong with the files of a listed checkpoint, or None when they look whole
        (present, and of the sizes recorded when it was written)."""
        sizes = entry.get("files")
        if sizes is None:  # an index from before sizes were recorded: check presence only
            if not (self.directory / (entry["prefix"] + ".index")).exists():
                return f"{entry['prefix']}.index is missing"
            return None
        if not sizes:
            return "it has no files"
        for name, size in sizes.items():
            path = self.directory / name
            if not path.exists():
                return f"{name} is missing"
            actual = path.stat().st_size
            if actual != size:
                return f"{name} is {actual} bytes, {size} when written (truncated or corrupt)"
        return None

    def clean_up(self):
        """Remove what interrupted saves and rotations left: `ckpt-N_temp/` folders and files
        of checkpoints the index does not list. Returns the names removed."""
        if not self.directory.is_dir():
            return []
        listed = {e["prefix"] for e in self.entries()}
        removed = []
        for path in sorted(self.directory.iterdir()):
            match = _FILE.match(path.name)
            if match is None or (match.group(1) in listed and not path.name.endswith("_temp")):
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path.name)
        return removed

    def tagged(self, tag):
        """The newest listed checkpoint with `tag`, or None."""
        found = [e for e in self.entries() if tag in e["tags"]]
        return found[-1] if found else None

    def move_tag(self, tag, step):
        """Give `tag` to the checkpoint of global step `step` (listed) alone: the others lose
        it, and one left with no tag at all is unlisted and deleted (a `best` that was only
        the best). Returns the prefixes deleted."""
        entries = self.entries()
        if not any(e["step"] == step for e in entries):
            raise ValueError(f"no listed checkpoint at step {step}")
        dropped = []
        for entry in entries:
            if entry["step"] == step:
                entry["tags"] = sorted(set(entry["tags"]) | {tag})
            elif tag in entry["tags"]:
                entry["tags"] = [t for t in entry["tags"] if t != tag]
                if not entry["tags"]:
                    dropped.append(entry)
        self._write_index([e for e in entries if e not in dropped])
        for entry in dropped:
            self._delete(entry["prefix"])
        return [e["prefix"] for e in dropped]

    def untag(self, tag):
        """Take `tag` off every listed checkpoint (`final`, when a finished run is extended:
        its end has moved). Returns the prefixes that had it."""
        entries = self.entries()
        had = [e["prefix"] for e in entries if tag in e["tags"]]
        if had:
            for entry in entries:
                entry["tags"] = [t for t in entry["tags"] if t != tag]
            self._write_index(entries)
        return had

    def supersede(self, step):
        """Unlist the checkpoints after global step `step` (a run resumed from an earlier one
        goes another way from there) and move their files into `superseded/`. Returns the
        prefixes moved."""
        entries = self.entries()
        later = [e for e in entries if e["step"] > step]
        if not later:
            return []
        self._write_index([e for e in entries if e["step"] <= step])
        folder = self.directory / SUPERSEDED
        folder.mkdir(exist_ok=True)
        for entry in later:
            for path in self.directory.glob(entry["prefix"] + ".*"):
                os.replace(path, folder / path.name)
        return [e["prefix"] for e in later]

    def _write_index(self, entries):
        self.directory.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"checkpoints": entries}, indent=1)
        try:
            atomic_write(self.directory / INDEX, text, durable=True)
        except OSError as e:
            raise CheckpointWriteError(
                "checkpoint", f"cannot write {self.directory / INDEX}: {e.strerror}"
            ) from None

    def _delete(self, prefix):
        for path in self.directory.glob(prefix + ".*"):
            path.unlink()
        shutil.rmtree(self.directory / f"{prefix}_temp", ignore_errors=True)
