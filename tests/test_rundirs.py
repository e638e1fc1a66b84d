"""The one atomic write of the run folder's files (`stagegan.runfolder.atomic.atomic_write`)."""

import os

import pytest

from stagegan.runfolder.atomic import atomic_write


def test_a_reader_sees_the_old_file_or_the_whole_new_one(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("old\n")
    seen = []

    def writer(tmp):
        with open(tmp, "w") as f:
            f.write("half")
            seen.append(path.read_text())  # mid-write: the target is untouched
            f.write(" and the rest\n")

    atomic_write(path, writer)
    assert seen == ["old\n"] and path.read_text() == "half and the rest\n"
    atomic_write(path, "text\n", durable=True)
    assert path.read_text() == "text\n"
    atomic_write(path, b"\x89PNG")
    assert path.read_bytes() == b"\x89PNG"
    assert sorted(os.listdir(tmp_path)) == ["config.yaml"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "index.json"
    path.write_text("{}")

    def failing(tmp):
        tmp.write_text("partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(path, failing)
    assert path.read_text() == "{}" and sorted(os.listdir(tmp_path)) == ["index.json"]
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "missing" / "x.json", "{}")
    assert sorted(os.listdir(tmp_path)) == ["index.json"]
