"""`stagegan sample` and `stagegan eval` through real processes, on short real runs:
reproducible samples, metrics checked by hand against the sampled outputs, eval.jsonl,
evaluation inside `train`, and bad input."""

import json
import os

import numpy as np
import pytest
from clihelp import TINY, assert_user_error, inprocess, stagegan
from test_outputs import png_size

from stagegan import ConfigError, Error, load_run
from stagegan.evaluation import metrics, realism

COMPLETION = [
    "--set",
    "data={source: shapes, size: 16, count: 64, hole_min: 0.25, hole_max: 0.5}",
    "--set",
    "model={width: 4, dilations: [2]}",
    "--set",
    "batch_size=8",
    "--set",
    "stages[0].steps=2",
    "--set",
    "stages[1].steps=1",
    "--set",
    "stages[2].steps=2",
    "--set",
    "samples.every=0",
    "--set",
    "log.every=1",
    "--set",
    "eval=null",  # evaluated by the tests themselves
    "--set",
    "log.tensorboard=false",
]


@pytest.fixture(scope="module", autouse=True)
def short_c2st():
    """This module checks what evaluations report and where, not how well c2st's classifier
    learns (tests/test_offline_realism.py does): in-process evaluations train it for at most
    40 steps a fold instead of 400."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(realism, "C2ST_MIN_STEPS", 20)
        patch.setattr(realism, "C2ST_MAX_STEPS", 40)
        yield


@pytest.fixture(scope="module")
def mog(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("mog") / "run"
    result = inprocess(
        "train",
        "--config",
        "mog_ring",
        "--run-dir",
        str(run_dir),
        *TINY,
        "--set",
        "eval.count=200",
    )
    assert result.returncode == 0, result.stderr
    return run_dir


@pytest.fixture(scope="module")
def completion(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("completion") / "run"
    result = inprocess(
        "train", "--config", "completion_quick", "--run-dir", str(run_dir), *COMPLETION
    )
    assert result.returncode == 0, result.stderr
    return run_dir


def coverage_by_hand(points, std=0.01):
    """Modes, high-quality share, reverse KL for the 8-mode ring, written out plainly."""
    centres = [(np.cos(2 * np.pi * k / 8), np.sin(2 * np.pi * k / 8)) for k in range(8)]
    counts, good = [0] * 8, 0
    for x, y in points:
        distances = [np.hypot(x - cx, y - cy) for cx, cy in centres]
        k = int(np.argmin(distances))
        if distances[k] <= 3 * std:
            counts[k] += 1
            good += 1
    kl = None
    if good:
        kl = sum(c / good * np.log((c / good) * 8) for c in counts if c)
    return sum(c > 0 for c in counts), good / len(points), kl


def test_eval_inside_train_writes_metrics_at_stage_ends(mog):
    records = [json.loads(x) for x in (mog / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval/modes" in r]
    assert [r["step"] for r in evals] == [3, 7, 12]  # the three stage ends
    assert all(r["eval/count"] == 200 and r["eval/modes_total"] == 8 for r in evals)


def sample(run_dir, output, num=50, seed=4, *more, run=stagegan):
    return run(
        "sample", "--run", str(run_dir), "--num", str(num), "--seed", str(seed),
        "--output", str(output), *more,
    )  # fmt: skip


def test_sample_same_seed_same_bytes(mog, tmp_path):
    # One file from a fresh process, one from this one: the same seed gives the same bytes.
    for name, run in (("a", stagegan), ("b", inprocess)):
        result = sample(mog, tmp_path / f"{name}.npy", run=run)
        assert result.returncode == 0, result.stderr
        assert "wrote 50 samples" in result.stdout
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    assert np.load(tmp_path / "a.npy").shape == (50, 2)
    sample(mog, tmp_path / "c.npy", 50, 5, run=inprocess)
    assert not np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "c.npy"))
    for name in ("a", "b"):  # two restores, in process: the fresh process is above
        assert sample(mog, tmp_path / f"{name}.png", run=inprocess).returncode == 0
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    assert png_size(tmp_path / "a.png") == (400, 400)


def test_truncation_and_walks_feed_the_generator_the_latents_by_hand(mog, tmp_path):
    """`sample --truncation T` and `--interpolate K`: the samples are the generator's outputs
    for the latents `stagegan.core.latents` gives (computed here from the plain draws)."""
    from stagegan.core import latents
    from stagegan.run.reading import restore_run, sample_arrays

    trainer, _ = restore_run(mog)
    assert trainer.ema is None  # the samples are the live generator's
    generator = trainer.networks["generator"]
    plain, _, _, _ = sample_arrays(trainer, 40, 4)
    inputs, outputs, _, _ = sample_arrays(trainer, 40, 4, truncation=0.5)
    z = latents.truncate(plain["z"], 0.5, 4)
    np.testing.assert_array_equal(inputs["z"], z)
    assert np.abs(inputs["z"]).max() <= 0.5
    np.testing.assert_allclose(outputs["samples"], generator(z).numpy(), rtol=1e-5, atol=1e-6)
    # Truncated samples are more alike: their spread is smaller.
    _, untruncated, _, _ = sample_arrays(trainer, 40, 4)
    assert outputs["samples"].std(axis=0).sum() < untruncated["samples"].std(axis=0).sum()
    # A walk through 3 latents in 9 samples: samples 0, 4 and 8 are the keyframes' own.
    inputs, outputs, info, _ = sample_arrays(trainer, 9, 4, interpolate=3)
    keyframes = sample_arrays(trainer, 3, 4)[0]["z"]
    np.testing.assert_allclose(inputs["z"], latents.walk(keyframes, 9))
    np.testing.assert_allclose(inputs["z"][[0, 4, 8]], keyframes, atol=1e-6)
    assert info == {"keyframes": 3}
    # Through the command line: the same numbers in the .npy, in a fresh file.
    result = sample(mog, tmp_path / "w.npy", 9, 4, "--interpolate", "3", run=inprocess)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "w.npy"), outputs["samples"], rtol=1e-6)
    for args, words in (
        (["--truncation", "0"], "--truncation: must be a positive number. Received: 0.0"),
        (["--truncation", "nan"], "--truncation: must be a positive number. Received: nan"),
        (["--interpolate", "1"], "--interpolate: must be at least 2 latents. Received: 1"),
        (["--interpolate", "51"], "--interpolate: walks through 51 latents in --num 50"),
    ):
        assert_user_error(sample(mog, tmp_path / "bad.npy", 50, 4, *args, run=inprocess), words)
    result = sample(mog, tmp_path / "points.gif", 9, 4, "--interpolate", "3", run=inprocess)
    assert_user_error(result, "--output: a .gif shows images; task 'mog2d' draws none")
    assert_user_error(
        sample(mog, tmp_path / "x.gif", 9, 4, run=inprocess), "--output: .gif (an animation)"
    )
    assert not list(tmp_path.glob("bad*")) and not list(tmp_path.glob("*.gif"))


def test_eval_matches_coverage_computed_by_hand_from_the_samples(mog, tmp_path):
    sample(mog, tmp_path / "p.npy", 300, 9, run=inprocess)
    result = inprocess("eval", "--run", str(mog), "--count", "300", "--seed", "9", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    modes, quality, kl = coverage_by_hand(np.load(tmp_path / "p.npy"))
    assert report["step"] == 12 and report["checkpoint"] == "ckpt-00000012"
    assert report["metrics"]["modes"] == modes
    assert report["metrics"]["high_quality"] == pytest.approx(quality)
    if kl is None:
        assert report["metrics"]["reverse_kl"] is None
    else:
        assert report["metrics"]["reverse_kl"] == pytest.approx(kl)


def test_eval_table_and_eval_jsonl(mog):
    before = (mog / "eval.jsonl").read_text().splitlines() if (mog / "eval.jsonl").exists() else []
    result = inprocess("eval", "--run", str(mog), "--checkpoint", "7", "--count", "100")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "step 7  (ema: no)"
    assert "modes_total   8" in result.stdout
    lines = (mog / "eval.jsonl").read_text().splitlines()
    assert len(lines) == len(before) + 1
    last = json.loads(lines[-1])
    assert last["step"] == 7 and last["checkpoint"] == "ckpt-00000007"
    assert last["metrics"]["count"] == 100


def test_completion_sample_rows_and_the_users_own_images(completion, tmp_path):
    result = inprocess(
        "sample", "--run", str(completion), "--num", "3", "--output", str(tmp_path / "c.png")
    )
    assert result.returncode == 0, result.stderr
    # 3 rows of original | masked | raw | completed; 16 px tiles enlarged 4x, 2 px gaps.
    assert png_size(tmp_path / "c.png") == (4 * 64 + 3 * 2, 3 * 64 + 2 * 2)
    images = tmp_path / "mine"
    images.mkdir()
    rng = np.random.default_rng(0)
    import tensorflow as tf

    mine = rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    for i, image in enumerate(mine):
        (images / f"{i}.png").write_bytes(tf.io.encode_png(image).numpy())
    result = inprocess(
        "sample",
        "--run",
        str(completion),
        "--num",
        "5",
        "--input",
        str(images),
        "--output",
        str(tmp_path / "u.npy"),
    )
    assert result.returncode == 0, result.stderr
    out = np.load(tmp_path / "u.npy")
    assert out.shape == (2, 16, 16, 3) and out.min() >= 0 and out.max() <= 1
    # Known pixels are kept: most of each image equals the input exactly (to float error).
    same = np.isclose(out, mine / 255.0, atol=1e-5).all(axis=-1)
    assert 0.5 < same.mean() < 1.0
    # The user's own holes (issue 44): masks of another size, paired by file name.
    holes = tmp_path / "holes"
    holes.mkdir()
    left = np.zeros((32, 32, 1), np.uint8)
    left[:, :16] = 255  # the left half: columns 0-7 at 16 px
    block = np.zeros((48, 64, 1), np.uint8)  # centre-cropped to 48 x 48, then 16 x 16
    block[12:24, 20:32] = 200  # rows and columns 4-7 after the fit (the crop drops 8 columns)
    for name, mask in (("0", left), ("1", block)):
        (holes / f"{name}.png").write_bytes(tf.io.encode_png(mask).numpy())
    command = ["sample", "--run", str(completion), "--input", str(images)]  # no --num: all
    result = inprocess(*command, "--masks", str(holes), "--output", str(tmp_path / "m.npy"))
    assert result.returncode == 0, result.stderr
    out = np.load(tmp_path / "m.npy")
    assert out.shape == (2, 16, 16, 3)
    hole = np.zeros((2, 16, 16), bool)
    hole[0, :, :8], hole[1, 4:8, 4:8] = True, True
    same = np.isclose(out, mine / 255.0, atol=1e-5).all(axis=-1)
    assert same[~hole].all() and not same[hole].any()
    result = inprocess(
        *command, "--num", "1", "--masks", str(holes), "--output", str(tmp_path / "f.npy")
    )
    assert result.returncode == 0, result.stderr
    assert np.array_equal(np.load(tmp_path / "f.npy"), out[:1])  # the first of the two
    (holes / "1.png").unlink()
    result = inprocess(*command, "--masks", str(holes), "--output", str(tmp_path / "n.npy"))
    assert_user_error(result, "--masks: no mask named 1.* in", "1 of 2 images have none")
    alone = ["sample", "--run", str(completion), "--num", "2", "--masks", str(holes)]
    result = inprocess(*alone, "--output", str(tmp_path / "n.npy"))
    assert_user_error(result, "--masks: pairs masks with your images: give --input DIR too")
    result = inprocess("sample", "--run", str(completion), "--output", str(tmp_path / "n.npy"))
    assert_user_error(result, "--num: how many samples? Give --num N")
    assert not (tmp_path / "n.npy").exists()


def test_completion_eval_by_hand_with_both_baselines(completion):
    from stagegan.run.reading import restore_run

    result = inprocess("eval", "--run", str(completion), "--count", "16", "--seed", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["metrics"]
    trainer, _ = restore_run(completion)
    inputs, info = trainer.task.sample_inputs(16, 2)
    assert info == {"held_out": True} and report["held_out"] is True
    truth, mask = (inputs["x"] + 1) / 2, inputs["mask"]
    hole = np.broadcast_to(mask, truth.shape) > 0
    known = ~hole
    fill = truth.copy()
    for i in range(len(truth)):  # the mean colour of the known pixels, per image and channel
        for c in range(3):
            fill[i, ..., c][hole[i, ..., c]] = truth[i, ..., c][known[i, ..., c]].mean()
    assert report["mean_fill/l1"] == pytest.approx(np.abs(fill - truth)[hole].mean(), rel=1e-5)
    completed = (trainer.sample({"x": inputs["x"], "mask": mask}).numpy() + 1) / 2
    assert report["l1"] == pytest.approx(np.abs(completed - truth)[hole].mean(), rel=1e-5)
    for key in ("psnr", "ssim", "reconstruction_stage_end/l1", "reconstruction_stage_end/psnr"):
        assert np.isfinite(report[key])
    # Realism: the Fréchet distance of the completed images to the same images whole, in the
    # shapes classifier's features (the default on `shapes`).
    from stagegan.evaluation import shapes_net

    extract = lambda images: np.asarray(shapes_net.extractor()(images))
    fid = metrics.frechet_distance(extract(inputs["x"]), extract(completed * 2 - 1))
    assert report["features"] == "shapes_net"
    assert report["fid"] == pytest.approx(fid, rel=1e-3, abs=1e-6)
    assert report["mean_fill/fid"] > 0
    assert report["reconstruction_stage_end/step"] == 2
    # The baseline is the stage-1 checkpoint: evaluating that checkpoint directly agrees.
    at_stage_1 = inprocess(
        "eval",
        "--run",
        str(completion),
        "--checkpoint",
        "2",
        "--count",
        "16",
        "--seed",
        "2",
        "--json",
    )
    direct = json.loads(at_stage_1.stdout)["metrics"]
    assert report["reconstruction_stage_end/l1"] == pytest.approx(direct["l1"], rel=1e-6)


# One critic update per step, not the preset's 5 (each is traced: 5 copies of the critic's
# double backward); the runs here are for evaluating, sampling and projecting.
WGAN_SHRINK = ["data.count=64", "model.width=4", "model.latent_dim=4", "batch_size=8",
               "stages[0].steps=2", "stages[0].updates[0].repeat=1", "samples=null",
               "log.tensorboard=false"]  # fmt: skip
DEAD_PROXY = {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}


def shrunk(*items):
    return [arg for item in (*WGAN_SHRINK, *items) for arg in ("--set", item)]


@pytest.fixture(scope="module")
def wgan(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("wgan") / "run"
    result = inprocess("train", "--config", "wgan_gp_shapes", "--run-dir", str(run_dir), *shrunk())
    assert result.returncode == 0, result.stderr
    return run_dir


def test_fid_kid_on_shapes_default_to_the_shapes_features_and_all_held_out_images(wgan):
    from stagegan.evaluation import metrics, shapes_net
    from stagegan.evaluation.evaluate import Evaluation
    from stagegan.run.reading import restore_run

    trainer, _ = restore_run(wgan)
    # FID's usual 10,000 samples: the whole held-out split of `shapes` (what `eval` without
    # --count evaluates; computing it is left to the user, as it takes a while here).
    default = Evaluation(trainer, wgan, seed=trainer.config.seed)
    assert default.count == 10000 and default.features_spec == "shapes"
    # By hand, on 400: the same real and generated images through the shipped classifier
    # (in passes of 200: the run's batch of 8 would take 100 passes; chunking is
    # test_evaluation_and_sampling_in_chunks_match_one_pass's).
    result = inprocess(
        "eval", "--run", str(wgan), "--json", "--count", "400", "--batch-size", "200"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["metrics"]
    assert report["count"] == 400 and report["features"] == "shapes_net"
    assert report["held_out"] is True and report["kid_std"] > 0
    real, _ = trainer.task.real.draw(400, trainer.config.seed)
    inputs, _ = trainer.task.sample_inputs(400, trainer.config.seed)
    fake = trainer.sample({"z": inputs["z"]}).numpy()
    extract = shapes_net.extractor()
    fid = metrics.frechet_distance(np.asarray(extract(real)), np.asarray(extract(fake)))
    assert report["fid"] == pytest.approx(fid, rel=1e-4)


def test_a_count_beyond_the_held_out_split_is_refused_naming_its_size(wgan):
    result = inprocess("eval", "--run", str(wgan), "--count", "10001")
    assert_user_error(result, "--count", "10001", "held-out split", "10000")


def offline(monkeypatch):
    """No way to the internet: downloads (InceptionV3's weights) fail at once."""
    for name, value in DEAD_PROXY.items():
        monkeypatch.setenv(name, value)


def test_inception_offline_or_missing_weights_say_so_and_custom_features_work(wgan, monkeypatch):
    offline(monkeypatch)
    result = inprocess("eval", "--run", str(wgan), "--count", "20", "--features", "inception")
    assert_user_error(result, "--features", "InceptionV3", "offline", "inception:")
    result = inprocess(
        "eval", "--run", str(wgan), "--count", "20", "--features", "inception:/no/such.h5"
    )
    assert_user_error(result, "--features", "no weights file /no/such.h5")
    result = inprocess(
        "eval", "--run", str(wgan), "--count", "20", "--json",
        "--features", "custom_networks:mean_colour_features",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["metrics"]
    assert report["features"] == "custom_networks:mean_colour_features"
    assert report["count"] == 20 and report["held_out"] is True
    assert report["fid"] > 0 and np.isfinite(report["kid"]) and report["kid_std"] >= 0


def test_a_custom_extractor_that_fails_is_one_line_and_writes_nothing(wgan):
    """Hardening round 4: a user's feature extractor is called through one guard and its
    features are checked (one row an image, numbers, finite) before any number is made of
    them; nothing reaches eval.jsonl."""
    from stagegan.evaluation.evaluate import Evaluation
    from stagegan.run.reading import restore_run

    trainer, _ = restore_run(wgan)
    cases = {
        "raising_features": "custom_networks:raising_features raised RuntimeError: no weights",
        "NOT_A_FUNCTION": "custom_networks:NOT_A_FUNCTION is a int, not a function",
        "nan_features": "gave non-finite features (NaN or Inf) for 20 of 20 images",
        "one_row_short": "features must have one row an image: got shape [1, 3] for 2 images",
        "text_features": "features must be numbers; got an array of <U1 for 2 images",
        "no_such_function": "module 'custom_networks' has no attribute 'no_such_function'",
    }
    for name, words in cases.items():
        evaluation = Evaluation(trainer, wgan, count=20, features=f"custom_networks:{name}")
        with pytest.raises(ConfigError) as caught:
            evaluation.run()
        assert caught.value.key == "--features" and words in caught.value.message
        assert "\n" not in str(caught.value)
    # A builder returning a plain function of the images (no `training` argument) works:
    # each image's mean colour, by hand.
    spec = "custom_networks:plain_function_features"
    images = np.random.default_rng(0).uniform(-1, 1, (5, 32, 32, 3)).astype(np.float32)
    features = Evaluation(trainer, wgan, count=20, features=spec, batch_size=2).features(images)
    np.testing.assert_allclose(features, images.mean(axis=(1, 2)), rtol=1e-6)
    # Through the command line and the API: one line, and nothing written.
    log = wgan / "eval.jsonl"
    before = log.read_bytes() if log.exists() else None
    result = inprocess(
        "eval", "--run", wgan, "--count", "20", "--features", "custom_networks:nan_features"
    )
    assert_user_error(result, "--features: ", cases["nan_features"])
    with pytest.raises(Error) as caught:
        load_run(wgan).evaluate(count=20, features="custom_networks:one_row_short")
    assert caught.value.key == "features"
    assert (log.read_bytes() if log.exists() else None) == before


def test_a_walk_as_an_animation_and_latents_a_task_lacks(wgan, completion, tmp_path):
    from PIL import Image

    result = inprocess(
        "sample", "--run", wgan, "--num", "6", "--interpolate", "2", "--truncation", "1.5",
        "--output", tmp_path / "walk.gif",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with Image.open(tmp_path / "walk.gif") as gif:
        assert gif.n_frames == 6 and gif.size == (64, 64)  # 32 px enlarged to 64
    result = inprocess(
        "sample", "--run", completion, "--num", "4", "--truncation", "1",
        "--output", tmp_path / "c.png",
    )  # fmt: skip
    assert_user_error(result, "--truncation: task 'completion' has no latents")
    assert not (tmp_path / "c.png").exists()
    (tmp_path / "unreadable").mkdir()  # hardening round 4: a folder of broken images
    (tmp_path / "unreadable" / "x.png").write_bytes(b"\x89PNG not really")
    result = inprocess(
        "sample", "--run", completion, "--num", "4", "--input", tmp_path / "unreadable",
        "--output", tmp_path / "c.png",
    )  # fmt: skip
    assert_user_error(result, "--input: no readable image in", "unreadable (1 tried)")
    assert not (tmp_path / "c.png").exists()
    # Hardening round 5: --truncation and --interpolate with --input were ignored (exit 0);
    # a fifo among --input images was reported as data.path's.
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(tmp_path / "unreadable" / "y.png")
    for flags in (["--truncation", "1"], ["--interpolate", "2"]):
        result = inprocess(
            "sample", "--run", completion, "--num", "4", "--input", tmp_path / "unreadable",
            *flags, "--output", tmp_path / "c.png",
        )  # fmt: skip
        assert_user_error(result, f"{flags[0]}: task 'completion' has no latents")
        assert not (tmp_path / "c.png").exists()
    os.mkfifo(tmp_path / "unreadable" / "z.png")
    result = inprocess(
        "sample", "--run", completion, "--input", tmp_path / "unreadable",
        "--output", tmp_path / "c.png",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warned = sorted(result.stderr.strip().splitlines())
    assert len(warned) == 2 and all(line.startswith("--input: skipped ") for line in warned)
    assert "x.png, not an image (UnidentifiedImageError)" in warned[0]
    assert "z.png, not a regular file" in warned[1]


LOAD_EXPORTS = """
import sys
import numpy as np
import keras, tensorflow as tf
folder, z = sys.argv[1], np.load(sys.argv[2])
out = {"keras": np.asarray(keras.saving.load_model(folder + "/keras/generator.keras")(z))}
served = tf.saved_model.load(folder + "/savedmodel/saved_model")  # kept: it owns the weights
out["savedmodel"] = served.serve(z).numpy()
lite = tf.lite.Interpreter(model_path=folder + "/tflite/generator.tflite")
(inp,), (res,) = lite.get_input_details(), lite.get_output_details()
lite.resize_tensor_input(inp["index"], z.shape)
lite.allocate_tensors()
lite.set_tensor(inp["index"], z)
lite.invoke()
out["tflite"] = lite.get_tensor(res["index"])
np.savez(folder + "/loaded.npz", **out)
assert not any(name.startswith("stagegan") for name in sys.modules), "stagegan was imported"
"""


def test_export_loads_without_stagegan_and_gives_samples_pixels(wgan, tmp_path):
    """`stagegan export` in each format, loaded in a fresh process that never imports
    stagegan: the same uint8 images as `sample`'s (its [0, 1] images x 255, rounded)."""
    import subprocess
    import sys

    for fmt in ("keras", "savedmodel", "tflite"):
        result = inprocess(
            "export", "--run", wgan, "--output", tmp_path / fmt, "--format", fmt
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        record = json.loads((tmp_path / fmt / "export.json").read_text())
        assert record["inputs"] == {"z": {"shape": [None, 4], "dtype": "float32"}}  # latent_dim 4
        assert record["output"] == {"shape": [None, 32, 32, 3], "dtype": "uint8"}
    assert not list(tmp_path.glob("*.partial-*"))
    result = sample(wgan, tmp_path / "s.npy", 5, 2, run=inprocess)
    assert result.returncode == 0, result.stderr
    from stagegan.run.reading import restore_run, sample_arrays

    z = sample_arrays(restore_run(wgan)[0], 5, 2)[0]["z"]
    np.save(tmp_path / "z.npy", z)
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_EXPORTS, str(tmp_path), str(tmp_path / "z.npy")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    expected = np.round(np.load(tmp_path / "s.npy") * 255)
    with np.load(tmp_path / "loaded.npz") as loaded:
        for fmt in ("keras", "savedmodel", "tflite"):
            images = loaded[fmt]
            assert images.dtype == np.uint8 and images.shape == (5, 32, 32, 3), fmt
            assert np.abs(images.astype(float) - expected).max() <= 1, fmt  # float rounding
    # Refused: an existing folder, an unknown format, through the API by its own names.
    assert_user_error(
        inprocess("export", "--run", wgan, "--output", tmp_path / "keras"),
        "--output: ", "already exists and is not empty",
    )  # fmt: skip
    assert_user_error(
        inprocess("export", "--run", wgan, "--output", tmp_path / "o", "--format", "onnx"),
        "--format: invalid choice: 'onnx'",
    )  # fmt: skip
    with pytest.raises(Error) as caught:
        load_run(wgan).export(tmp_path / "o", format="onnx")
    assert caught.value.key == "format" and not (tmp_path / "o").exists()


def test_projection_finds_the_latents_of_the_generators_own_images():
    """`project_images` on images a generator drew itself (rounded to 8 bits, as read from
    PNGs): the latents it finds reproduce them to the rounding, from random starts 30 to 90
    times further off. The generator is a fresh DCGAN whose last layer's kernel is scaled up
    30x, so that its images differ by latent (a freshly built one draws nearly one image)."""
    from stagegan.config.schema import load_config
    from stagegan.run.project import project_images
    from stagegan.run.reading import sample_arrays
    from stagegan.training.trainer import Trainer

    config = load_config("wgan_gp_shapes", [*WGAN_SHRINK, "model.width=8", "model.latent_dim=8"])
    trainer = Trainer(config)
    (kernel,) = [v for v in trainer.variables if v.path == "generator/up2/kernel"]
    kernel.assign(kernel * 30.0)
    _, outputs, _, _ = sample_arrays(trainer, 3, 11)
    drawn = np.round((outputs["samples"] + 1) * 127.5) / 127.5 - 1
    start = project_images(trainer, drawn, steps=1, restarts=4, seed=0).l1
    found = project_images(trainer, drawn, steps=150, restarts=4, seed=0)
    assert found.l1.max() < 0.003 and found.l1.max() < start.min() / 10, (found.l1, start)
    # The reported distance is the generator's sample for the latent found, by hand.
    again = trainer.networks["generator"](found.z, training=False).numpy()
    np.testing.assert_allclose(found.l1, np.abs(again - drawn).mean(axis=(1, 2, 3)) / 2, atol=1e-5)


def test_project_writes_latents_and_a_picture_and_refuses_cleanly(wgan, completion, tmp_path):
    import tensorflow as tf

    from stagegan.run.reading import restore_run, sample_arrays

    _, outputs, _, _ = sample_arrays(restore_run(wgan)[0], 3, 11)
    (tmp_path / "drawn").mkdir()
    for i, image in enumerate(outputs["samples"]):
        pixels = np.clip(np.round((image + 1) * 127.5), 0, 255).astype(np.uint8)
        (tmp_path / "drawn" / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    result = inprocess(
        "project", "--run", wgan, "--input", tmp_path / "drawn", "--output", tmp_path / "p",
        "--steps", "20",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"projected 3 images into {tmp_path / 'p'} (mean l1 ")
    with np.load(tmp_path / "p" / "latents.npz") as found:
        assert found["z"].shape == (3, 4) and found["l1"].shape == (3,)
        assert [f.rsplit("/", 1)[-1] for f in found["files"]] == ["0.png", "1.png", "2.png"]
    # 2 tiles of 64 px across (image, projection), 3 down, 2 px between: 130 x 196
    assert png_size(tmp_path / "p" / "projection.png") == (130, 196)
    (tmp_path / "empty").mkdir()
    for args, words in (
        (["--run", wgan, "--input", tmp_path / "empty"], "--input: no PNG or JPEG files"),
        (["--run", completion, "--input", tmp_path / "drawn"], "--run: task 'completion' has"),
        (["--run", wgan, "--input", tmp_path / "drawn", "--steps", "0"], "--steps: must be"),
        (["--run", wgan, "--input", tmp_path / "drawn", "--output", tmp_path / "p"], "exists"),
        # hardening round 5: the memory bound names the flag the user set, not --input
        (
            ["--run", wgan, "--input", tmp_path / "drawn", "--restarts", "1000000000"],
            "--restarts: would need about",
        ),
    ):
        output = [] if "--output" in args else ["--output", tmp_path / "q"]
        assert_user_error(inprocess("project", *args, *output), words)
        assert not (tmp_path / "q").exists()


def test_in_train_eval_problems_stop_the_run_before_its_folder_exists(tmp_path, monkeypatch):
    # Offline Inception features: one line naming eval.features, with hints that work in a
    # config (not the eval command's --features), and no run folder, no used-up number.
    offline(monkeypatch)
    monkeypatch.chdir(tmp_path)
    result = inprocess(
        "train", "--config", "wgan_gp_shapes", *shrunk("eval={every: 0, features: inception}")
    )
    assert_user_error(result, "eval.features", "eval: null", "inception:")
    assert "--features" not in result.stderr
    assert list(tmp_path.iterdir()) == []
    result = inprocess(
        "train", "--config", "wgan_gp_shapes", "--run-dir", str(tmp_path / "run"),
        *shrunk("eval={every: 0, count: 20000}"),
    )  # fmt: skip
    assert_user_error(result, "eval.count", "20000", "10000")
    assert not (tmp_path / "run").exists()


def test_eval_settings_may_change_on_resume():
    """Each `eval` change is accepted as exactly the change made (`{key: (before, after)}`);
    the run's `batch_size` (64 in the preset) is refused, naming it."""
    from stagegan.config.schema import load_config
    from stagegan.run.resume import check_changes

    old = load_config("wgan_gp_shapes", ["eval={every: 100}"])
    for change, expected in (
        ("eval.count=500", {"eval.count": (None, 500)}),
        ("eval.features=inception", {"eval.features": (None, "inception")}),
        ("eval.every=0", {"eval.every": (100, 0)}),
    ):
        new = load_config("wgan_gp_shapes", ["eval={every: 100}", change])
        assert check_changes(old, new, step=50) == expected, change
    # Turned off: the whole section goes, from what it was to null.
    changes = check_changes(old, load_config("wgan_gp_shapes", ["eval=null"]), step=50)
    assert list(changes) == ["eval"]
    before, after = changes["eval"]
    assert before["every"] == 100 and before["count"] is None and after is None
    new = load_config("wgan_gp_shapes", ["eval={every: 100}", "batch_size=32"])
    with pytest.raises(ConfigError, match="^batch_size: cannot change on resume") as caught:
        check_changes(old, new, step=50)
    assert caught.value.key == "batch_size"


def test_evaluation_and_sampling_in_chunks_match_one_pass(completion, mog, tmp_path, monkeypatch):
    """`--batch-size` bounds the images per forward pass; the results are those of one pass
    over all of them, up to float32 rounding (convolutions on this CPU pick other kernels for
    other batch sizes: |difference| <= 1.4e-7 in the outputs, measured). The classifier
    two-sample test is replaced by numbers read from the very images it is given: chunking
    changes what it is given, not how it trains (tested in test_offline_realism.py)."""

    def images_read(real, fake, seed=0, local=False, **_):  # sees order and pairing
        weights = np.arange(1, len(real) + 1).reshape(-1, *[1] * (real.ndim - 1))
        return {
            "c2st": float(np.mean((fake - real) * weights)),
            "c2st_std": float(np.mean(np.abs(fake - real) * weights)),
        }

    monkeypatch.setattr(realism, "c2st", images_read)

    def evaluate(batch_size):
        args = ["eval", "--run", completion, "--count", 20, "--seed", 2, "--json"]
        result = inprocess(*args, "--batch-size", batch_size)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["metrics"]

    chunked, whole = evaluate(3), evaluate(20)  # 7 passes (the last of 2 images), and one
    assert sorted(chunked) == sorted(whole)
    for name, value in whole.items():
        if isinstance(value, float):
            assert chunked[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    for name, batch_size in (("chunked", 7), ("whole", 50)):
        result = sample(
            mog, tmp_path / f"{name}.npy", 50, 4, "--batch-size", batch_size, run=inprocess
        )
        assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(
        np.load(tmp_path / "chunked.npy"), np.load(tmp_path / "whole.npy"), rtol=1e-5, atol=1e-6
    )
