"""Checkpoints of a run: `tf.train.Checkpoint` files plus a small JSON index.

Each save writes `ckpt-<step>` (TensorFlow's `.index` and `.data-*` files) and then rewrites
`index.json` atomically, so the index only ever lists complete checkpoints. Tags say why a
checkpoint exists: `periodic` ones rotate (the newest `keep` stay); `stage_end` and `final`
ones are never rotated away.
"""

import json
import os
from pathlib import Path

INDEX = "index.json"


class CheckpointStore:
    """Saves, rotates and lists the checkpoints in one folder.

    Args:
        directory: the folder (created on first save).
        checkpoint: the `tf.train.Checkpoint` to write.
        keep: how many periodic checkpoints to keep.
    """

    def __init__(self, directory, checkpoint, keep):
        self.directory = Path(directory)
        self.checkpoint = checkpoint
        self.keep = keep

    def entries(self):
        """The listed checkpoints, oldest first: dicts with `step`, `prefix`, `tags`."""
        path = self.directory / INDEX
        if not path.exists():
            return []
        with open(path, encoding="utf-8") as f:
            return json.load(f)["checkpoints"]

    def path_of(self, entry):
        return str(self.directory / entry["prefix"])

    def save(self, step, tags):
        """Write a checkpoint for global step `step` with `tags`; returns its path prefix."""
        self.directory.mkdir(parents=True, exist_ok=True)
        prefix = f"ckpt-{step:08d}"
        entries = self.entries()
        previous = next((e for e in entries if e["step"] == step), None)
        if previous is not None:  # same step saved again (e.g. periodic and stage end)
            tags = sorted(set(previous["tags"]) | set(tags))
        else:
            self.checkpoint.write(str(self.directory / prefix))
        entries = [e for e in entries if e["step"] != step]
        entries.append({"step": step, "prefix": prefix, "tags": sorted(tags)})
        entries.sort(key=lambda e: e["step"])
        periodic_only = [e for e in entries if e["tags"] == ["periodic"]]
        stale = periodic_only[: max(0, len(periodic_only) - self.keep)]
        kept = [e for e in entries if e not in stale]
        self._write_index(kept)
        for entry in stale:
            self._delete(entry["prefix"])
        return str(self.directory / prefix)

    def _write_index(self, entries):
        tmp = self.directory / (INDEX + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"checkpoints": entries}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / INDEX)

    def _delete(self, prefix):
        for path in self.directory.glob(prefix + ".*"):
            path.unlink()
