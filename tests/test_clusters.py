"""`data.labels: clusters`: k-means clusters of an unlabelled folder as its classes."""

import logging
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from stagegan.data import clusters
from stagegan.data.sources import DEFAULTS, ImageSource, list_folder
from stagegan.errors import ConfigError


def test_kmeans_finds_separated_blobs_and_numbers_them_by_size():
    """Blobs of 5, 3 and 7 points around (0, 0), (10, 0) and (0, 10): the clusters are the
    blobs, numbered from the largest (7: 0) to the smallest (3: 2)."""
    rng = np.random.default_rng(1)
    centres = np.array([[0, 0], [10, 0], [0, 10]], float)
    sizes = [5, 3, 7]
    points = np.concatenate(
        [c + rng.normal(0, 0.3, (n, 2)) for c, n in zip(centres, sizes, strict=True)]
    )
    labels = clusters.by_size(clusters.kmeans(points, 3)[0])
    assert labels.tolist() == [1] * 5 + [2] * 3 + [0] * 7


def test_by_size_drops_empty_clusters_and_breaks_ties_by_number():
    assert clusters.by_size(np.array([3, 3, 1, 1, 0])).tolist() == [1, 1, 0, 0, 2]
    assert clusters.names(3) == ["cluster00", "cluster01", "cluster02"]
    assert clusters.names(101)[-1] == "cluster100"


def test_thumbnails_are_8x8_block_means():
    image = np.arange(16 * 16, dtype=np.uint8).reshape(1, 16, 16, 1)
    by_hand = [
        image[0, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2, 0].mean() / 255
        for r in range(8)
        for c in range(8)
    ]
    np.testing.assert_allclose(clusters.thumbnails(image)[0], by_hand, rtol=1e-6)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Three kinds of 12 px grey images in one unlabelled folder (some nested): 12 dark, 10
    light and 8 with the left half light, a little noise each; and one file that is no image."""
    base = tmp_path_factory.mktemp("clusters") / "images"
    (base / "nested").mkdir(parents=True)
    rng = np.random.default_rng(0)
    half = np.zeros((12, 12))
    half[:, :6] = 1
    kinds = [("dark", np.zeros((12, 12)), 12), ("light", np.ones((12, 12)), 10), ("half", half, 8)]
    truth, i = {}, 0
    for name, pattern, count in kinds:
        for _ in range(count):
            pixels = np.clip(pattern * 200 + 20 + rng.normal(0, 8, (12, 12)), 0, 255)
            path = (base / "nested" if i % 2 else base) / f"{i:02d}.png"
            path.write_bytes(tf.io.encode_png(pixels.astype(np.uint8)[..., None]).numpy())
            truth[str(path)], i = name, i + 1
    (base / "broken.png").write_bytes(b"not a png")
    return base, truth


def options(path, **changes):
    return {
        **DEFAULTS, "source": "folder", "path": str(path), "size": 16, "channels": 1,
        "labels": "clusters", "clusters": 3, **changes,
    }  # fmt: skip


def test_a_folder_s_clusters_are_its_kinds_largest_first(folder):
    base, truth = folder
    listing = list_folder(options(base))
    assert listing.classes == ["cluster00", "cluster01", "cluster02"]
    kinds = [
        {truth[f] for f, y in zip(listing.files, listing.labels, strict=True) if y == k}
        for k in range(3)
    ]
    assert kinds == [{"dark"}, {"light"}, {"half"}]
    assert np.bincount(listing.labels).tolist() == [12, 10, 8]  # the unreadable file left out
    assert listing.labels.tolist() == sorted(listing.labels.tolist())  # grouped by cluster
    source = ImageSource(options(base), seed=0, batch_size=6)
    assert source.classes == listing.classes
    assert source.class_counts.tolist() == [12, 10, 8]
    batch = source.draw(6, None)
    for x, y in zip(
        batch["x"].numpy(), batch["y"].numpy(), strict=True
    ):  # each image with its cluster
        mean_left, mean_right = x[:, :8].mean(), x[:, 8:].mean()
        kind = "dark" if mean_left < 110 and mean_right < 110 else "light"
        kind = "half" if mean_left > 110 and mean_right < 110 else kind
        assert ["dark", "light", "half"][y] == kind


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"clusters": 0}, "data.clusters: must be a positive integer. Received: 0"),
        ({"clusters": True}, "data.clusters: must be a positive integer. Received: True"),
        ({"clusters": 2.5}, "data.clusters: must be a positive integer. Received: 2.5"),
        ({"clusters": 31}, "data.clusters: 31 clusters need as many readable images"),
        (
            {"labels": "subfolders"},
            "data.clusters: counts the clusters of data.labels: clusters (source folder only)",
        ),
        ({"labels": "kinds", "clusters": None}, "data.labels: a folder's labels must be"),
    ],
)
def test_bad_cluster_options_name_their_key(folder, changes, message):
    with pytest.raises(ConfigError) as error:
        ImageSource(options(folder[0], **changes), seed=0, batch_size=6)
    assert str(error.value).startswith(message)


def test_a_self_conditioned_task_samples_in_the_clusters_proportions(folder):
    """dcgan_clusters on the folder: samples draw the clusters in proportion to their sizes
    (12 : 10 : 8), grouped by cluster (training draws them so too: `random_inputs`)."""
    from stagegan.config.schema import load_config
    from stagegan.training.trainer import Trainer

    sets = [f"data.path={folder[0]}", "data.clusters=3", "batch_size=6", "model.width=4"]
    trainer = Trainer(load_config("dcgan_clusters", [*sets, "model.latent_dim=4"]))
    assert trainer.task.classes == ["cluster00", "cluster01", "cluster02"]
    inputs, info = trainer.task.sample_inputs(3000, seed=0)
    shares = np.bincount(inputs["fake_y"], minlength=3) / 3000
    np.testing.assert_allclose(shares, [12 / 30, 10 / 30, 8 / 30], atol=0.03)
    assert inputs["fake_y"].tolist() == sorted(inputs["fake_y"].tolist())
    assert "columns" not in info  # a plain grid, not one row per class
    drawn = trainer.task.random_inputs(3000)["fake_y"].numpy()
    np.testing.assert_allclose(np.bincount(drawn) / 3000, [12 / 30, 10 / 30, 8 / 30], atol=0.03)
    assert trainer.task.class_index("cluster02") == 2


def test_a_folder_without_a_readable_image_is_refused_in_one_line(tmp_path):
    from clihelp import inprocess

    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(40):  # more than a chunk's worth would not change the answer
        (folder / f"{i}.png").write_bytes(b"version https://git-lfs.github.com/spec/v1\n")
    run = tmp_path / "run"
    result = inprocess(
        "train", "--config", "dcgan_clusters", "--set", f"data.path={folder}", "--run-dir", run
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"stagegan: error: data.path: no readable image among the files of {folder}"
    )
    assert "Traceback" not in result.stderr and not run.exists()


def test_identical_images_make_one_cluster_with_a_warning(tmp_path, caplog):
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(6):
        (folder / f"{i}.png").write_bytes(
            tf.io.encode_png(np.full((8, 8, 1), 77, np.uint8)).numpy()
        )
    listing = list_folder(options(folder, clusters=4))
    assert listing.classes == ["cluster00"] and listing.labels.tolist() == [0] * 6
    assert "data.clusters: 4 asked, but the images of" in caplog.text


class Warnings(logging.Handler):
    """The warnings of the `stagegan` logger while in a `with` block (the CLI's own logging
    set-up keeps them from pytest's caplog)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def __enter__(self):
        logging.getLogger("stagegan").addHandler(self)

    def __exit__(self, *_):
        logging.getLogger("stagegan").removeHandler(self)


ONE_STEP = (
    "[{name: joint, steps: 1, updates: [{train: discriminator/*, loss: {d_loss: 1.0}, "
    "optimizer: d}]}]"
)


def test_a_run_keeps_its_clusters_when_its_folder_changes(folder, tmp_path):
    """A trained run writes each file's cluster; `sample`, `eval` and a resume in a new
    process reuse them: a file added to the folder since is left out, not clustered, and a
    corrupt record is refused in one line."""
    import json
    import shutil

    from clihelp import inprocess

    from stagegan.data import sources
    from stagegan.run.reading import restore_run

    images = tmp_path / "images"
    shutil.copytree(folder[0], images)
    run = tmp_path / "run"
    result = inprocess(
        "train", "--config", "dcgan_clusters", "--run-dir", run,
        "--set", f"data.path={images}", "--set", "data.clusters=3", "--set", "batch_size=6",
        "--set", "model.width=4", "--set", "model.latent_dim=4", "--set", "samples=null",
        "--set", "augment=null", "--set", f"stages={ONE_STEP}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads((run / "clusters.json").read_text())
    listing = list_folder(options(images))
    assert record["files"] == [str(Path(f).relative_to(images)) for f in listing.files]
    assert record["labels"] == listing.labels.tolist()
    assert record["unreadable"] == ["broken.png"]
    # As a new process would: nothing cached. The folder as trained (its unreadable file
    # included) is not "changed"; then a light image added, a dark one gone.
    sources.CLUSTERED.clear()
    warnings = Warnings()
    with warnings:
        restore_run(run)
    changed = lambda: [line for line in warnings.lines if "changed since" in line]
    assert changed() == []
    sources.CLUSTERED.clear()
    dark = images / record["files"][0]
    (images / "zz-new.png").write_bytes(dark.read_bytes())
    dark.unlink()
    with warnings:
        trainer, _ = restore_run(run)
    assert trainer.task.classes == ["cluster00", "cluster01", "cluster02"]
    assert trainer.task.source.class_counts.tolist() == [11, 10, 8]
    assert len(changed()) == 1 and "(1 new files left out, 1 gone)" in changed()[0]
    # The record is the restored run's alone (passed to its source, not kept by the process):
    # a new run on the same folder after it clusters what is there now, the new file too.
    fresh = list_folder(options(images, labels="clusters", clusters=3))
    assert str(images / "zz-new.png") in fresh.files
    assert not any(f.endswith("zz-new.png") for f in trainer.task.source_kind.listings()[0].files)
    (run / "clusters.json").write_text('{"data": {"path": 1}')
    bad = inprocess("sample", "--run", run, "--num", "2", "--output", tmp_path / "s.npy")
    assert bad.returncode == 2 and not (tmp_path / "s.npy").exists()
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"stagegan: error: --run: cannot read the run's clusters ({run / 'clusters.json'}):"
        )
    )


@pytest.mark.parametrize(
    "change, words",
    [
        ({"files": [], "labels": []}, "0 files and 0 labels"),
        ({"labels": [0, 1]}, "3 files and 2 labels"),
        ({"labels": [0, "1", 1]}, "labels must be cluster numbers"),
        ({"labels": [0, -1, 1]}, "labels must be cluster numbers"),
        ({"labels": [0, 2, 2]}, "a cluster below the largest number has no file"),
        ({"files": ["a.png", "a.png", "b.png"]}, "file names must be distinct strings"),
        ({"data": {"path": "elsewhere", "size": 16, "channels": 1, "clusters": 3}}, "other data"),
    ],
)
def test_a_record_that_is_not_a_run_s_own_is_refused(tmp_path, change, words):
    from stagegan.data.sources import recorded_clusters

    data = {"path": str(tmp_path), "size": 16, "channels": 1, "clusters": 3}
    record = {"data": data, "files": ["a.png", "b.png", "c.png"], "labels": [0, 1, 1]}
    assert recorded_clusters(record, data).labels == {"a.png": 0, "b.png": 1, "c.png": 1}
    with pytest.raises(ValueError, match=words):
        recorded_clusters({**record, **change}, data)
