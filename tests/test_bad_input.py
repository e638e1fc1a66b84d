"""The bad-input catalogue: every case must end with exit status 2, one line on stderr that
names the key or file at fault, no traceback, and no file of an existing run folder changed
(nor a new run folder created).

The cases run through `stagegan.cli.main.main` in this process, with stderr captured at the file
descriptor, so that each costs a model build rather than a TensorFlow import; the real
`python -m stagegan` subprocess path is covered by test_cli.py.
"""

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import yaml
from toytask import finished_run, two_stage_config

from stagegan.cli import main as cli
from stagegan.config.schema import REQUIRED_TOP_LEVEL, TOP_LEVEL_DEFAULTS, parse_config
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer

TOY = two_stage_config(
    "toy",
    0,
    2,
    2,
    devices={"towers": 2},
    optimizers={"g": {"type": "adam", "learning_rate": 0.01}, "d": {"type": "sgd"}},
)


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A folder with a toy config, a finished run, its damaged copies, and bad files."""
    root = tmp_path_factory.mktemp("bad")
    (root / "toy.yaml").write_text(yaml.safe_dump(TOY))
    run = root / "run"
    run.mkdir()
    config = parse_config(TOY)
    (run / "config.yaml").write_text(config.to_yaml())
    train(Trainer(config), run)
    truncated = shutil.copytree(run, root / "truncated")
    data = truncated / "checkpoints" / "ckpt-00000004.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:-7])
    flipped = shutil.copytree(run, root / "flipped")  # unfinished: its latest is step 3
    index = flipped / "checkpoints" / "index.json"
    listed = json.loads(index.read_text())["checkpoints"]
    index.write_text(json.dumps({"checkpoints": listed[:-1]}))
    data = flipped / "checkpoints" / "ckpt-00000003.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 3] ^= 0x5A
    data.write_bytes(bytes(raw))
    garbage = shutil.copytree(run, root / "garbage")
    for data in (garbage / "checkpoints").glob("ckpt-00000004.data-*"):
        data.write_bytes(b"not a checkpoint" * 10)
    broken_inputs = shutil.copytree(run, root / "broken_inputs")  # unfinished, with samples
    index = broken_inputs / "checkpoints" / "index.json"
    index.write_text(json.dumps({"checkpoints": listed[:-1]}))
    config_path = broken_inputs / "config.yaml"
    config_path.write_text(config_path.read_text().replace("samples: null", "samples: {}"))
    (broken_inputs / "samples").mkdir()
    (broken_inputs / "samples" / "inputs.npz").write_bytes(b"PK not a zip")
    broken_index = shutil.copytree(run, root / "broken_index")
    (broken_index / "checkpoints" / "index.json").write_text('{"checkpoints": [')
    scrambled = shutil.copytree(run, root / "scrambled")  # every tensor fails its checksum
    for data in (scrambled / "checkpoints").glob("ckpt-00000004.data-*"):
        data.write_bytes(bytes(b ^ 0x5A for b in data.read_bytes()))  # the same size
    fieldless = shutil.copytree(run, root / "fieldless")  # entries without their step
    index = fieldless / "checkpoints" / "index.json"
    index.write_text(json.dumps({"checkpoints": [{"prefix": e["prefix"]} for e in listed]}))
    # Hardening round 4: run records damaged or swapped for a fifo, a keep-best run whose
    # best record or checkpoint is damaged.
    fifo_clusters = shutil.copytree(run, root / "fifo_clusters")
    os.mkfifo(fifo_clusters / "clusters.json")  # would hang a reader that opens it
    huge_clusters = shutil.copytree(run, root / "huge_clusters")
    record = {"data": {}, "files": ["a.png", "b.png"], "labels": [0, 10**15]}
    (huge_clusters / "clusters.json").write_text(json.dumps(record))
    fifo_index = shutil.copytree(run, root / "fifo_index")
    (fifo_index / "checkpoints" / "index.json").unlink()
    os.mkfifo(fifo_index / "checkpoints" / "index.json")
    fifo_metrics = shutil.copytree(run, root / "fifo_metrics")  # unfinished: its latest is 3
    (fifo_metrics / "checkpoints" / "index.json").write_text(
        json.dumps({"checkpoints": listed[:-1]})
    )
    (fifo_metrics / "metrics.jsonl").unlink()
    os.mkfifo(fifo_metrics / "metrics.jsonl")  # a resume rewrites it: would block
    fifo_eval = shutil.copytree(run, root / "fifo_eval")
    os.mkfifo(fifo_eval / "eval.jsonl")  # eval appends to it: would block
    fifo_inputs = shutil.copytree(broken_inputs, root / "fifo_inputs")
    (fifo_inputs / "samples" / "inputs.npz").unlink()
    os.mkfifo(fifo_inputs / "samples" / "inputs.npz")
    best = finished_run(root / "best", KEEP_BEST)
    listed = json.loads((best / "checkpoints" / "index.json").read_text())["checkpoints"]
    for name, damage in (
        ("best_garbage", lambda e: {**e, "best": "garbage"}),
        ("best_value", lambda e: {**e, "best": {**e["best"], "value": "low"}}),
        ("best_step", lambda e: {**e, "best": {**e["best"], "step": 10**20}}),
        ("until_ends", lambda e: {**e, "until": {**e["until"], "ends": {"joint": "x"}}}),
    ):
        damaged = shutil.copytree(best, root / name)
        index = damaged / "checkpoints" / "index.json"
        index.write_text(json.dumps({"checkpoints": [damage(e) for e in listed]}))
    # Unfinished (its latest is the joint stage's step 4), and its best checkpoint (step 2,
    # which the joint stage rolls back to at its end) has lost its data file.
    best_deleted = shutil.copytree(best, root / "best_deleted")
    index = best_deleted / "checkpoints" / "index.json"
    assert [e["step"] for e in listed[:2]] == [2, 4] and "best" in listed[0]["tags"]
    index.write_text(json.dumps({"checkpoints": listed[:2]}))
    for data in (best_deleted / "checkpoints").glob("ckpt-00000002.data-*"):
        data.unlink()
    (root / "folder.png").mkdir()
    (root / "not_a_run").mkdir()
    (root / "broken.yaml").write_text("name: x\nstages: [\n")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "no_task.yaml").write_text(
        yaml.safe_dump({k: v for k, v in TOY.items() if k != "task"})
    )
    (root / "images").mkdir()
    (root / "few").mkdir()
    for i in range(2):
        pixels = np.full((8, 8, 3), 100 * i, np.uint8)
        (root / "few" / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    (root / "images" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (root / "unreadable_masks").mkdir()
    (root / "unreadable_masks" / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n not a mask")
    (root / "a_file").write_text("not a folder")
    (root / "out.npy").write_bytes(np.zeros(1).tobytes())
    # Hardening round 3: data doors. A device behind an image's name (a fifo would hang this
    # process if both guards failed: tests/test_data.py reads one in a subprocess); an
    # unreadable class, under a plain name and under one that is not UTF-8.
    (root / "special").mkdir()
    (root / "special" / "x.png").symlink_to(os.devnull)
    for folder, bad in (("classes", b"dog"), ("byte_classes", b"bad\xff")):
        (root / folder / "cat").mkdir(parents=True)
        (root / folder / "cat" / "0.png").write_bytes((root / "few" / "0.png").read_bytes())
        os.mkdir(os.path.join(os.fsencode(root / folder), bad))
        with open(os.path.join(os.fsencode(root / folder), bad, b"broken.png"), "wb") as f:
            f.write(b"not a png")
    # Hardening round 3: config doors. YAML over its limits, a binary file, no stages.
    (root / "bomb.yaml").write_text(BOMB)
    (root / "bomb_stages.yaml").write_text(BOMB + "stages: []\n")
    (root / "deep.yaml").write_text("data: " + "[" * 5000 + "]" * 5000 + "\n")
    (root / "huge.yaml").write_text("name: x\n" + "#" * (1 << 20) + "\n")
    (root / "image.yaml").write_bytes((root / "few" / "0.png").read_bytes())
    (root / "no_stages.yaml").write_text(
        yaml.safe_dump({k: v for k, v in TOY.items() if k != "stages"})
    )
    return root


# D alone 2 steps, D and G until a gap plateau (at most 4 steps) rolled back to the best
# checkpoint, G alone 2 steps; evaluated (and ranked) every 2 steps.
KEEP_BEST = two_stage_config(
    "best",
    0,
    2,
    4,
    checkpoint={"every": 2, "keep_best": {"metric": "gap", "mode": "min"}},
    eval={"every": 2},
)
KEEP_BEST["stages"][1]["until"] = {
    "eval": "gap",
    "mode": "min",
    "patience": 1,
    "check_every": 2,
    "restore": "best",
}


def toy(*sets):
    args = []
    for item in sets:
        args += ["--set", item]
    return ["--config", "{root}/toy.yaml", *args]


TRAIN = ["train", "--run-dir", "{root}/new"]
# The billion laughs: 10**9 leaves from 600 bytes, once expanded (hardening round 3).
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)
CASES = {
    # Config files and keys.
    "broken yaml": (
        ["plan", "--config", "{root}/broken.yaml"],
        ["--config", "broken YAML", "line 3"],
    ),
    "config not a mapping": (
        ["plan", "--config", "{root}/list.yaml"],
        ["--config", "must hold a mapping"],
    ),
    "plan budget that is not a duration": (
        ["plan", "--config", "mog_ring", "--budget", "soon"],
        ["--budget: expected a duration like 90s, 10m, 1.5h or 1h30m. Received: 'soon'"],
    ),
    "plan budget of no time": (
        ["plan", "--config", "mog_ring", "--budget", "0m"],
        ["--budget: must be a positive duration. Received: '0m'"],
    ),
    "missing config file": (
        ["plan", "--config", "{root}/nope.yaml"],
        ["--config", "no such file or preset"],
    ),
    "required key missing": (
        ["plan", "--config", "{root}/no_task.yaml"],
        ["task: required key is missing"],
    ),
    "unknown key": ([*TRAIN, *toy("bogus=1")], ["bogus: unknown key"]),
    "unknown nested key": ([*TRAIN, *toy("checkpoint.often=1")], ["checkpoint.often: unknown key"]),
    "wrong type": (
        [*TRAIN, *toy("batch_size=eight")],
        ["batch_size: must be an integer", "'eight'"],
    ),
    "zero steps": ([*TRAIN, *toy("stages[0].steps=0")], ["stages[0].steps: must be at least 1"]),
    "negative steps": (
        [*TRAIN, *toy("stages[1].steps=-3")],
        ["stages[1].steps: must be at least 1"],
    ),
    "malformed --set": ([*TRAIN, *toy("batch_size")], ["--set: expected key.path=value"]),
    "unknown learning-rate schedule": (
        [*TRAIN, *toy("optimizers.g.learning_rate={schedule: step, initial: 0.1}")],
        ["optimizers.g.learning_rate.schedule: must be one of constant, linear"],
    ),
    "schedule without its steps": (
        [*TRAIN, *toy("optimizers.g.learning_rate={schedule: cosine, initial: 0.1}")],
        ["optimizers.g.learning_rate.steps: required key is missing"],
    ),
    "Inf in a task option": (
        [*TRAIN, "--config", "mog_ring", "--set", "data.std=.inf"],
        ["data.std: must be a finite number. Received: inf"],
    ),
    "NaN inside a stage's loss weights": (
        [*TRAIN, *toy("stages[0].updates[0].loss={d_loss: .nan}")],
        ["stages[0].updates[0].loss.d_loss: must be a finite number"],
    ),
    "NaN learning rate": (
        [*TRAIN, *toy("optimizers.g.learning_rate=.nan")],
        ["optimizers.g.learning_rate: must be a finite number"],
    ),
    "pack that does not divide a tower's shard": (
        [*TRAIN, "--config", "mog_ring", "--set", "batch_size=6", "--set", "devices.towers=2"],
        ["model.pack: must divide each replica's share of the batch", "= 3). Received: 2"],
    ),
    "pack of zero": (
        [*TRAIN, "--config", "mog_ring", "--set", "model.pack=0"],
        ["model.pack: must be positive"],
    ),
    "spectral_norm not a boolean": (
        [*TRAIN, "--config", "mog_ring", "--set", "model.spectral_norm=sometimes"],
        ["model.spectral_norm: must be bool", "'sometimes'"],
    ),
    "folder smaller than a batch": (
        [
            *TRAIN,
            "--config",
            "dcgan_folder",
            "--set",
            "data.path={root}/few",
            "--set",
            "batch_size=8",
        ],
        ["data.path", "has 2 images, fewer than one batch (batch_size 8)"],
    ),
    "unknown guard policy": (
        [*TRAIN, *toy("guard.policy=sometimes")],
        ["guard.policy: must be one of"],
    ),
    # What the names in a config refer to.
    "unknown task": ([*TRAIN, *toy("task=nope")], ["task", "unknown task 'nope'"]),
    "task factory returning no Task": (
        [*TRAIN, *toy("task=toytask:not_a_task")],
        ["task: 'toytask:not_a_task' returned a dict, not a stagegan.tasks.base.Task"],
    ),
    "unknown task option": ([*TRAIN, *toy("data.bogus=1")], ["data.bogus: unknown key"]),
    "unknown loss term": (
        [*TRAIN, *toy("stages[0].updates[0].loss=w_loss")],
        ["stages[0].updates[0].loss.w_loss: unknown loss term"],
    ),
    "unknown optimizer type": (
        [*TRAIN, *toy("optimizers.d.type=adamx")],
        ["optimizers.d.type: unknown optimizer 'adamx'"],
    ),
    "unknown optimizer name": (
        [*TRAIN, *toy("stages[0].updates[0].optimizer=dd")],
        ["stages[0].updates[0].optimizer: unknown optimizer 'dd'"],
    ),
    "bad optimizer option": ([*TRAIN, *toy("optimizers.d.nesterov_x=1")], ["optimizers.d"]),
    "pattern matches nothing": (
        [*TRAIN, *toy("stages[0].updates[0].train=[disc/*]")],
        ["stages[0].updates[0].train", "matches no variable"],
    ),
    "all gradients None": (
        [*TRAIN, *toy("stages[0].updates[0].train=generator/*")],
        ["stages[0].updates[0]: no variable gets a gradient from loss {d_loss: 1}"],
    ),
    "missing stage file": (
        [*TRAIN, *toy("stages=no_such_schedule")],
        ["stages", "no such stage file"],
    ),
    # Devices.
    "batch does not divide": (
        [*TRAIN, *toy("batch_size=9")],
        ["batch_size: 9 does not divide evenly across 2 towers"],
    ),
    "more towers than devices": (
        [*TRAIN, *toy("devices.towers=[/CPU:0, /GPU:7]")],
        ["devices.towers: device /GPU:7 does not exist"],
    ),
    "unknown strategy": (
        [*TRAIN, *toy("devices.strategy=horovod")],
        ["devices.strategy: must be one of towers, mirrored, central_storage, multi_worker"],
    ),
    "jit not a bool": (
        [*TRAIN, *toy("devices.jit=fast")],
        ["devices.jit: must be true or false"],
    ),
    "jit with variables apart from the towers": (
        [*TRAIN, *toy("devices.jit=true")],
        ["devices.jit: XLA cannot read variables on /CPU:0 from towers on /CPU:1"],
    ),
    "multi_worker without TF_CONFIG": (
        [*TRAIN, *toy("devices.strategy=multi_worker")],
        ["devices.strategy: multi_worker needs TF_CONFIG"],
    ),
    "deterministic not a bool": (
        [*TRAIN, *toy("deterministic=maybe")],
        ["deterministic: must be true or false"],
    ),
    "ema decay out of range": ([*TRAIN, *toy("ema.decay=2")], ["ema.decay: must be in [0, 1)"]),
    "augment with an unknown op": (
        [*TRAIN, *toy("augment.ops=[color, blur]")],
        ["augment.ops: unknown op 'blur'", "known: color, translation"],
    ),
    "augment on a task without images": (
        [*TRAIN, *toy("augment={p: 0.5}")],
        ["augment: task 'toytask:factory' does not augment"],
    ),
    "a stage's augment p above 1": (
        [*TRAIN, *toy("stages[0].augment={p: 2}")],
        ["stages[0].augment.p: must be between 0 and 1"],
    ),
    "eval count below 4": ([*TRAIN, *toy("eval.count=2")], ["eval.count: must be at least 4"]),
    "eval batch size of zero": (
        [*TRAIN, *toy("eval.batch_size=0")],
        ["eval.batch_size: must be at least 1"],
    ),
    "sample with a batch size of zero": (
        ["sample", "--run", "{root}/run", "--num", "4", "--output", "x.npy", "--batch-size", "0"],
        ["--batch-size: must be at least 1. Received: 0"],
    ),
    "unknown progress mode": (
        [*TRAIN, *toy("log.progress=fancy")],
        ["log.progress: must be one of auto, bar, lines"],
    ),
    "unknown loss option": (
        [*TRAIN, "--config", "mog_ring", "--set", "loss.bogus=1"],
        ["loss.bogus: unknown key (known: adversarial, lecam_decay, lecam_start)"],
    ),
    "name with a space": ([*TRAIN, *toy("name=bad name")], ["name: must be letters"]),
    "negative sample interval": (
        [*TRAIN, *toy("samples.every=-1")],
        ["samples.every: must be at least 0"],
    ),
    "seed not an integer": ([*TRAIN, *toy("seed=abc")], ["seed: must be an integer"]),
    "warm start from a folder that is not a run": (
        [*TRAIN, *toy(), "--init-from", "{root}/not_a_run"],
        ["init.run: {root}/not_a_run is not a run folder"],
    ),
    "warm start with --resume": (
        ["train", "--resume", "{root}/run", "--init-from", "{root}/run"],
        ["--init-from: not with --resume"],
    ),
    "init without its run": ([*TRAIN, *toy("init={only: 'generator/*'}")], ["init.run: required"]),
    "launch with a bad config": (
        ["launch", "--workers", "2", *TRAIN, *toy("batch_size=9")],
        ["batch_size: 9 does not divide evenly across 2 towers"],
    ),
    "launch resuming a run that is not multi_worker": (
        ["launch", "--workers", "2", "--resume", "{root}/truncated", "--checkpoint", "3"],
        ["devices.strategy: {root}/truncated was trained with 'auto'"],
    ),
    # Data.
    "missing data folder": (
        [
            *TRAIN,
            "--config",
            "completion_shapes",
            "--set",
            "data.source=folder",
            "--set",
            "data.path={root}/nowhere",
        ],
        ["data.path: no such folder"],
    ),
    "missing mask folder (issue 44)": (
        [*TRAIN, "--config", "completion_shapes", "--set", "data.masks={root}/nowhere"],
        ["data.masks: no such folder: {root}/nowhere"],
    ),
    "mask folder of a broken image (issue 44)": (
        [*TRAIN, "--config", "completion_shapes", "--set", "data.masks={root}/unreadable_masks"],
        ["data.masks: cannot read mask x.png in {root}/unreadable_masks"],
    ),
    "hole target on the glcic discriminator (issue 44)": (
        [*TRAIN, "--config", "completion_shapes", "--set", "loss.adversarial_target=hole"],
        ["loss.adversarial_target: hole needs a discriminator with an output per patch"],
    ),
    "unreadable image": (
        [
            *TRAIN,
            "--config",
            "completion_shapes",
            "--set",
            "data.source=folder",
            "--set",
            "data.path={root}/images",
            "--set",
            "batch_size=1",
        ],
        ["data.path: none of 1 files probed in", "is a readable image"],
    ),
    # Hardening round 3: data doors
    "folder whose only image is not a regular file": (
        [
            *TRAIN,
            "--config",
            "completion_shapes",
            "--set",
            "data.source=folder",
            "--set",
            "data.path={root}/special",
        ],
        [
            "data.path: no PNG or JPEG files under",
            "(skipped, not regular files: {root}/special/x.png)",
        ],
    ),
    "class without a readable image": (
        [
            *TRAIN,
            "--config",
            "completion_shapes",
            "--set",
            "data.source=folder",
            "--set",
            "data.path={root}/classes",
            "--set",
            "data.labels=subfolders",
            "--set",
            "batch_size=1",
        ],
        ["data.path: class 'dog' has no readable image among its 1 file ({root}/classes/dog)"],
    ),
    "class folder named in bytes that are not UTF-8, without a readable image": (
        [
            *TRAIN,
            "--config",
            "completion_shapes",
            "--set",
            "data.source=folder",
            "--set",
            "data.path={root}/byte_classes",
            "--set",
            "data.labels=subfolders",
            "--set",
            "batch_size=1",
        ],
        ["data.path: class 'bad\\xff' has no readable image", "({root}/byte_classes/bad\\xff)"],
    ),
    "image size in the millions": (
        [*TRAIN, "--config", "completion_shapes", "--set", "data.size=1000000"],
        ["data.size: would need about", "TB of memory", "Received: 1000000"],
    ),
    "a billion images drawn": (
        [*TRAIN, "--config", "completion_shapes", "--set", "data.count=1000000000"],
        ["data.count: would need about", "1,000,000,000 images of 32 px held"],
    ),
    "a batch of a billion images": (
        [*TRAIN, "--config", "completion_shapes", "--set", "batch_size=1000000000"],
        ["batch_size: would need about", "the activations of a batch of 1,000,000,000"],
    ),
    "prepare at an absurd size": (
        ["prepare", "{root}/few", "--output", "{root}/prepared", "--size", "100000"],
        ["--size: would need about", "(16 images of 100000 px decoded at a time)"],
    ),
    # Run folders.
    "run folder exists": (
        ["train", "--run-dir", "{root}/run", *toy()],
        ["--run-dir", "already exists"],
    ),
    "unwritable output folder": (
        ["train", "--run-dir", "{root}/a_file/run", *toy()],
        ["--run-dir", "a_file is not a folder"],
    ),
    "resume a folder that is not a run": (
        ["train", "--resume", "{root}/not_a_run"],
        ["--resume", "not a run folder"],
    ),
    "resume a missing folder": (
        ["train", "--resume", "{root}/gone"],
        ["--resume: no such run folder"],
    ),
    "resume with --config": (
        ["train", "--resume", "{root}/run", "--config", "{root}/toy.yaml"],
        ["--config: not with --resume"],
    ),
    "--checkpoint without --resume": (
        ["train", "--checkpoint", "2", *toy()],
        ["--checkpoint: only with --resume"],
    ),
    "resume from a missing checkpoint": (
        ["train", "--resume", "{root}/run", "--checkpoint", "99"],
        ["--checkpoint:", "has no checkpoint at step 99"],
    ),
    "resume from another run's checkpoint": (
        [
            "train",
            "--resume",
            "{root}/run",
            "--checkpoint",
            "{root}/flipped/checkpoints/ckpt-00000002",
        ],
        ["--checkpoint", "is not a listed checkpoint of"],
    ),
    "unsafe change on resume": (
        ["train", "--resume", "{root}/run", "--set", "batch_size=16"],
        ["batch_size: cannot change on resume"],
    ),
    "change a finished stage": (
        ["train", "--resume", "{root}/run", "--checkpoint", "3", "--set", "stages[0].steps=9"],
        ["stages[0].steps: cannot change on resume: stage 'd_only' is finished and a later"],
    ),
    "shrink the current stage below its steps run": (
        ["train", "--resume", "{root}/run", "--checkpoint", "3", "--set", "stages[1].steps=1"],
        ["stages[1].steps: cannot be below 2 on resume: stage 'joint' has run 1 of its steps"],
    ),
    "change the until of a stage already begun": (
        [
            "train",
            "--resume",
            "{root}/run",
            "--checkpoint",
            "3",
            "--set",
            "stages[1].until={metric: discriminator/d_loss, below: 0.1}",
        ],
        ["stages[1].until: cannot change on resume: stage 'joint' has already begun"],
    ),
    "remove a stage on resume": (
        [
            "train",
            "--resume",
            "{root}/run",
            "--set",
            "stages=[{name: a, steps: 1, updates: [{train: discriminator/*, loss: d_loss}]}]",
        ],
        ["stages: cannot remove stages on resume"],
    ),
    "append with [+] inside a key path": (
        ["train", "--resume", "{root}/run", "--set", "stages[+].steps=3"],
        ["stages[+].steps: --set: [+] (append) may only end a key path"],
    ),
    "append a stage whose shared optimizer meets new variables": (
        [
            "train",
            "--resume",
            "{root}/run",
            "--set",
            "stages[+]={name: more, steps: 1, updates: [{train: generator/*, loss: g_loss, "
            "optimizer: d}]}",
        ],
        ["stages[2].updates[0].optimizer: optimizer 'd' has no state for generator/"],
    ),
    "until with both a metric and an eval": (
        [*TRAIN, *toy("stages[0].until={metric: discriminator/d_loss, below: 1, eval: fid}")],
        ["stages[0].until: needs exactly one of metric"],
    ),
    "until on a metric the stage does not log": (
        [*TRAIN, *toy("stages[0].until={metric: generator/g_loss, below: 1}")],
        ["stages[0].until.metric: stage 'd_only' logs no 'generator/g_loss'"],
    ),
    "until plateau of an eval metric of no known direction": (
        [
            "plan",
            "--config",
            "mog_ring",
            "--set",
            "stages[1].until={eval: modes_total, patience: 2}",
        ],
        ["stages[1].until.mode: must be min or max (which way 'modes_total' is better is not"],
    ),
    "until plateau of a metric the task does not evaluate": (
        ["plan", "--config", "mog_ring", "--set", "stages[1].until={eval: fid, patience: 2}"],
        ["stages[1].until.eval: task 'mog2d' evaluates no 'fid' (it has: count, modes"],
    ),
    "until min_steps past the stage": (
        [*TRAIN, *toy("stages[0].until={metric: discriminator/d_loss, below: 1, min_steps: 2}")],
        ["stages[0].until.min_steps: must be below the stage's steps (2)"],
    ),
    # Checkpoints.
    "truncated checkpoint": (
        ["train", "--resume", "{root}/truncated", "--set", "stages[1].steps=3"],
        ["--resume: the latest checkpoint", "ckpt-00000004 is damaged", "pass --checkpoint 3"],
    ),
    "corrupt checkpoint": (
        ["train", "--resume", "{root}/flipped"],
        ["--resume: cannot restore", "ckpt-00000003"],
    ),
    "unreadable sample inputs": (
        ["train", "--resume", "{root}/broken_inputs"],
        ["samples/inputs.npz: the run's fixed sample inputs are unreadable"],
    ),
    "unreadable checkpoint index": (
        ["train", "--resume", "{root}/broken_index"],
        ["--resume", "index.json is unreadable"],
    ),
    # Hardening round 3: run folders. Every door reads a run folder through one reader
    # (stagegan.run.reading.pick_checkpoint): the same index check, the same file check.
    "init-from a checkpoint with a bad checksum": (
        [*TRAIN, *toy(), "--init-from", "{root}/scrambled"],
        ["init.run: cannot read", "ckpt-00000004"],
    ),
    "init-from a truncated checkpoint": (
        [*TRAIN, *toy(), "--init-from", "{root}/truncated"],
        ["init.run: the latest checkpoint", "ckpt-00000004 is damaged", "--init-checkpoint 3"],
    ),
    "init-from an index whose entries lack a field": (
        [*TRAIN, *toy(), "--init-from", "{root}/fieldless"],
        ["init.run: the checkpoint index", "is damaged: entry 1 has no 'step'"],
    ),
    "resume an index whose entries lack a field": (
        ["train", "--resume", "{root}/fieldless"],
        ["--resume: the checkpoint index", "is damaged: entry 1 has no 'step'"],
    ),
    "sample an index whose entries lack a field": (
        ["sample", "--run", "{root}/fieldless", "--num", "2", "--output", "{root}/s.npy"],
        ["--run: the checkpoint index", "is damaged: entry 1 has no 'step'"],
    ),
    "a network builder that raises": (
        ["plan", "--config", "mog_ring", "--set", "model.generator=custom_networks:raises"],
        ["model.generator: custom_networks:raises raised KeyError: 'width_multiplier'"],
    ),
    "eval a truncated latest checkpoint": (
        ["eval", "--run", "{root}/truncated"],
        ["--run: the latest checkpoint", "ckpt-00000004 is damaged", "--checkpoint 3"],
    ),
    "sample from a corrupt checkpoint": (
        ["sample", "--run", "{root}/flipped", "--num", "2", "--output", "{root}/s.npy"],
        ["--run: cannot restore"],
    ),
    "sample over an existing file": (
        ["sample", "--run", "{root}/run", "--num", "2", "--output", "{root}/out.npy"],
        ["--output", "already exists"],
    ),
    "eval a folder that is not a run": (
        ["eval", "--run", "{root}/not_a_run"],
        ["--run", "not a run folder"],
    ),
    "eval a missing folder": (["eval", "--run", "{root}/gone"], ["--run", "no such run folder"]),
    "eval a missing checkpoint": (
        ["eval", "--run", "{root}/run", "--checkpoint", "999"],
        ["--checkpoint", "no checkpoint at step 999"],
    ),
    "eval too few samples": (["eval", "--run", "{root}/run", "--count", "1"], ["--count"]),
    "eval a garbage checkpoint": (
        ["eval", "--run", "{root}/garbage"],
        ["--run: the latest checkpoint", "is 160 bytes", "pass --checkpoint 3"],
    ),
    "eval a checkpoint with a bad checksum": (
        ["eval", "--run", "{root}/scrambled"],
        ["--run: cannot restore", "ckpt-00000004"],
    ),
    "sample to an unknown format": (
        ["sample", "--run", "{root}/run", "--num", "2", "--output", "{root}/x.txt"],
        ["--output", "must end in .npy, .png or .gif"],
    ),
    "sample no samples": (
        ["sample", "--run", "{root}/run", "--num", "0", "--output", "{root}/x.npy"],
        ["--num"],
    ),
    "sample images into a task without inputs": (
        [
            "sample",
            "--run",
            "{root}/run",
            "--num",
            "2",
            "--input",
            "{root}/images",
            "--output",
            "{root}/x.npy",
        ],
        ["--input", "takes no input images"],
    ),
    # Hardening round 3: config doors. YAML files and --set values are refused past their
    # limits before anything expands; seeds are 32-bit; --set into a list says what is wrong.
    "config file that is an alias bomb": (
        ["plan", "--config", "{root}/bomb.yaml"],
        ["--config: {root}/bomb.yaml is refused at line 5", "YAML aliases expand to more than"],
    ),
    "stage file that is an alias bomb": (
        [*TRAIN, *toy("stages={root}/bomb_stages.yaml")],
        ["stages: {root}/bomb_stages.yaml is refused at line 5", "(an alias bomb?)"],
    ),
    "--set value that is an alias bomb": (
        [*TRAIN, *toy("data={" + BOMB.strip().replace("\n", ", ") + "}")],
        ["data: --set value is refused at line 1", "YAML aliases expand to more than 100,000"],
    ),
    "config nested thousands deep": (
        ["plan", "--config", "{root}/deep.yaml"],
        ["--config: {root}/deep.yaml is refused at line 1, column 106: YAML nested deeper"],
    ),
    "--set value nested thousands deep": (
        [*TRAIN, *toy("model=" + "[" * 5000 + "]" * 5000)],
        ["model: --set value is refused at line 1, column 101: YAML nested deeper than 100"],
    ),
    "--set value holding itself": (
        [*TRAIN, *toy("data=&a {x: *a}")],
        ["data: --set value is refused", "YAML alias *a is used inside its own anchor"],
    ),
    "config file over 1 MiB": (
        ["plan", "--config", "{root}/huge.yaml"],
        ["--config: {root}/huge.yaml is larger than 1 MiB, the limit"],
    ),
    "config file that is an image": (
        ["plan", "--config", "{root}/image.yaml"],
        ["--config: {root}/image.yaml is not UTF-8 text (byte 0x89 at offset 0)"],
    ),
    "seed above 2**32 - 1": (
        [*TRAIN, *toy("seed=4294967296")],
        ["seed: must be at most 4294967295 (2**32 - 1). Received: 4294967296"],
    ),
    "sample seed above 2**32 - 1": (
        [*TRAIN, *toy("samples.seed=99999999999")],
        ["samples.seed: must be at most 4294967295 (2**32 - 1)"],
    ),
    "sample --seed above 2**32 - 1": (
        ["sample", "--run", "{root}/run", "--num", "2", "--output", "{root}/s.npy"]
        + ["--seed", "4294967296"],
        ["--seed: must be at most 4294967295 (2**32 - 1). Received: 4294967296"],
    ),
    "eval --seed below 0": (
        ["eval", "--run", "{root}/run", "--seed", "-1"],
        ["--seed: must be at least 0. Received: -1"],
    ),
    "--set into the stages of a config without them": (
        ["plan", "--config", "{root}/no_stages.yaml", "--set", "stages[0].steps=5"],
        ["stages[0]: --set: the config has no stages list to index"],
    ),
    "--set into a stage past the last": (
        [*TRAIN, *toy("stages[2].steps=5")],
        ["stages[2]: --set: index out of range: stages has 2 items (stages[0] to stages[1])"],
    ),
    # Hardening round 4. Sizes: every size and count that allocates has a bound, checked
    # against the memory this process may use before anything is built or written.
    "a network width beyond memory": (
        [*TRAIN, "--config", "completion_shapes", "--set", "model.width=1000000"],
        ["model.width: would need about", "parameters with their gradients"],
    ),
    "a latent beyond memory": (
        [*TRAIN, "--config", "mog_ring", "--set", "model.latent_dim=1000000000000"],
        ["model.latent_dim: would need about", "Received: 1000000000000"],
    ),
    "hidden layers beyond memory": (
        [*TRAIN, "--config", "mog_ring", "--set", "model.hidden=100000000"],
        ["model.hidden: would need about", "Received: 100000000"],
    ),
    "a billion layers": (
        [*TRAIN, "--config", "mog_ring", "--set", "model.layers=1000000000"],
        ["model.layers: would need about", "Received: 1000000000"],
    ),
    "sample dumps beyond memory": (
        [*TRAIN, "--config", "completion_shapes", "--set", "samples.count=1000000000"],
        ["samples.count: would need about", "1,000,000,000 samples held at once"],
    ),
    "an in-training evaluation beyond memory": (
        [*TRAIN, "--config", "mog_ring", "--set", "eval.count=10000000000000"],
        ["eval.count: would need about", "Received: 10000000000000"],
    ),
    "a stage of more steps than a step counter holds": (
        [*TRAIN, *toy("stages[1].steps=100000000000000000000")],
        ["stages[1].steps: must be at most 2**62. Received: 100000000000000000000"],
    ),
    "features named for a task that computes none in them": (
        [*TRAIN, "--config", "mog_ring", "--set", "eval.features=nope:nope"],
        ["eval.features: task 'mog2d' computes no metric in image features"],
    ),
    "a size beyond any float": (
        [*TRAIN, "--config", "mog_ring", "--set", "model.hidden=1" + "0" * 400],
        ["model.hidden: would need about over 10**", "Received: an integer beyond 1e308"],
    ),
    "an evaluation batch beyond memory": (
        [
            *TRAIN,
            "--config",
            "wgan_gp_shapes",
            "--set",
            "eval={batch_size: 100000000000, count: 1000000}",
        ],
        ["eval.batch_size: would need about", "the activations of a batch of 1,000,000"],
    ),
    "sample --num beyond memory": (
        ["sample", "--run", "{root}/run", "--num", "100000000000000", "--output", "{root}/s.npy"],
        ["--num: would need about", "Received: 100000000000000"],
    ),
    "eval --count beyond memory on a task without real images": (
        ["eval", "--run", "{root}/run", "--count", "100000000000000"],
        ["--count: would need about", "Received: 100000000000000"],
    ),
    # Run records: regular files only, checked whole before anything is written.
    "a run's clusters record that is a fifo": (
        ["sample", "--run", "{root}/fifo_clusters", "--num", "2", "--output", "{root}/s.npy"],
        ["--run: run record", "clusters.json is not a regular file"],
    ),
    "a clusters record with a huge cluster number": (
        ["eval", "--run", "{root}/huge_clusters"],
        ["--run: cannot read the run's clusters", "cluster 1000000000000000 of 2 files"],
    ),
    "a checkpoint index that is a fifo": (
        ["eval", "--run", "{root}/fifo_index"],
        ["--run: run record", "index.json is not a regular file"],
    ),
    "resume with a metrics log that is a fifo": (
        ["train", "--resume", "{root}/fifo_metrics"],
        ["--resume: run record", "metrics.jsonl is not a regular file"],
    ),
    "eval with an eval log that is a fifo": (
        ["eval", "--run", "{root}/fifo_eval"],
        ["--run: run record", "eval.jsonl is not a regular file"],
    ),
    "resume with sample inputs that are a fifo": (
        ["train", "--resume", "{root}/fifo_inputs"],
        ["inputs.npz", "is not a regular file"],
    ),
    "resume with a best record that is not one": (
        ["train", "--resume", "{root}/best_garbage"],
        ["--resume: the checkpoint index", "best 'garbage' is not a keep_best record"],
    ),
    "resume with a best value that is not a number": (
        ["train", "--resume", "{root}/best_value"],
        ["--resume: the checkpoint index", "best value 'low' is not a number"],
    ),
    "eval --checkpoint best with a best step past the checkpoint": (
        ["eval", "--run", "{root}/best_step", "--checkpoint", "best"],
        ["--run: the checkpoint index", "best step 100000000000000000000 is not a step up to"],
    ),
    "resume with until ends that are not lengths": (
        ["train", "--resume", "{root}/until_ends"],
        ["--resume: the checkpoint index", "until.ends {'joint': 'x'} are not stages' lengths"],
    ),
    "resume whose restore: best checkpoint was deleted": (
        ["train", "--resume", "{root}/best_deleted"],
        ["--resume: stage 'joint' rolls back", "stages[1].until.restore", "is missing"],
    ),
    "sample --checkpoint best, deleted": (
        ["sample", "--run", "{root}/best_deleted", "--checkpoint", "best", "--num", "2"]
        + ["--output", "{root}/s.npy"],
        ["--checkpoint: ", "ckpt-00000002 is damaged", "is missing"],
    ),
    # Writes checked before the work.
    "sample --output where nothing can be written": (
        ["sample", "--run", "{root}/run", "--num", "2", "--output", "/sys/s.png"],
        ["--output: cannot write in /sys"],
    ),
    "sample --output that is a folder": (
        ["sample", "--run", "{root}/run", "--num", "2", "--output", "{root}/folder.png"],
        ["--output: {root}/folder.png already exists"],
    ),
    # The one-line format: argparse's errors, paths with a newline.
    "launch --gpus-per-worker not a number": (
        ["launch", "--workers", "2", "--gpus-per-worker", "abc"],
        ["--gpus-per-worker: invalid int value: 'abc'"],
    ),
    "launch a million workers": (
        ["launch", "--workers", "1000000", "--config", "{root}/toy.yaml"],
        ["--workers: would need about 700 TB of memory (1,000,000 TensorFlow processes)"],
    ),
    "launch --grace nan": (
        ["launch", "--workers", "2", "--grace", "nan", "--config", "{root}/toy.yaml"],
        ["--grace: must be a number of seconds, 0 or more. Received: nan"],
    ),
    "sample --num not a number": (
        ["sample", "--run", "{root}/run", "--num", "abc", "--output", "{root}/s.npy"],
        ["--num: invalid int value: 'abc'"],
    ),
    "an unknown flag": (
        ["eval", "--run", "{root}/run", "--colour", "red"],
        ["unrecognized arguments: --colour red"],
    ),
    "a config path with a newline": (
        ["plan", "--config", "{root}/two\nlines.yaml"],
        ["--config: no such file or preset", "two\\nlines.yaml"],
    ),
    "a run folder with a newline": (
        ["eval", "--run", "{root}/no\nrun"],
        ["--run: no such run folder", "no\\nrun"],
    ),
    # Hardening round 5: numbers beyond any float, the memory bound naming the flag the user
    # gave, an option that has nothing to apply to.
    "plan --budget of 400 digits": (
        ["plan", "--config", "{root}/toy.yaml", "--budget", "9" * 400 + "s"],
        ["--budget: must be a finite number. Received: an integer beyond 1e308"],
    ),
    "plan --budget of more than a year": (
        ["plan", "--config", "{root}/toy.yaml", "--budget", "9000h"],
        ["--budget: must be at most a year (8760h). Received: '9000h'"],
    ),
    "launch a hundred thousand parameter servers": (
        ["launch", "--ps", "100000", "--workers", "1", "--config", "{root}/toy.yaml"],
        ["--ps: would need about", "100,002 TensorFlow processes", "Received: 100000"],
    ),
    "sample --seed with --masks": (
        [
            "sample",
            "--run",
            "{root}/run",
            "--input",
            "{root}/few",
            "--masks",
            "{root}/few",
            "--seed",
            "3",
            "--output",
            "{root}/s.png",
        ],  # fmt: skip
        ["--seed: draws the holes of --input images, and --masks gives them"],
    ),
    "plan --budget with a unit twice": (
        ["plan", "--config", "{root}/toy.yaml", "--budget", "1h1h"],
        ["--budget: expected a duration like 90s, 10m, 1.5h or 1h30m, each unit once"],
    ),
    "sample --seed of 400 digits": (
        [
            "sample",
            "--run",
            "{root}/run",
            "--num",
            "4",
            "--seed",
            "9" * 400,
            "--output",
            "{root}/s.png",
        ],  # fmt: skip
        ["--seed: must be at most 4294967295 (2**32 - 1). Received: an integer beyond 1e308"],
    ),
    "sample --truncation past any latent": (
        [
            "sample",
            "--run",
            "{root}/run",
            "--num",
            "4",
            "--truncation",
            "1e308",
            "--output",
            "{root}/s.png",
        ],  # fmt: skip
        ["--truncation: must be at most 1e+06"],
    ),
    "sample --no-ema on a run without an EMA": (
        ["sample", "--run", "{root}/run", "--num", "4", "--no-ema", "--output", "{root}/s.png"],
        ["--no-ema: the run keeps no EMA"],
    ),
    "eval --no-ema on a run without an EMA": (
        ["eval", "--run", "{root}/run", "--no-ema"],
        ["--no-ema: the run keeps no EMA"],
    ),
    "sample --input for a task that takes no images": (
        ["sample", "--run", "{root}/run", "--input", "{root}/few", "--output", "{root}/s.png"],
        ["--input: task 'toy' takes no input images"],
    ),
    # A folder name need not be UTF-8: a --set value of such bytes is a path, not bad YAML.
    "data.path of bytes that are not UTF-8": (
        [*TRAIN, "--config", "dcgan_folder", "--set", "data.path={root}/no_such_\udcff"],
        ["data.path: ", "no_such_"],
    ),
}


def snapshot(root):
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_every_config_section_has_a_bad_input_case():
    """A top-level config key added without a case here fails this test."""
    named = {words[0].split(":")[0].split(".")[0].split("[")[0] for _, words in CASES.values()}
    sections = set(TOP_LEVEL_DEFAULTS) | set(REQUIRED_TOP_LEVEL)
    assert sorted(sections - named) == []


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_cleanly(name, place, capfd, monkeypatch):
    argv, words = CASES[name]
    argv = [a.replace("{root}", str(place)) for a in argv]
    monkeypatch.chdir(place)
    before = snapshot(place)
    status = cli.main(argv)
    out, err = capfd.readouterr()
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("stagegan: error: "), lines[0]
    assert "Traceback" not in out + err
    for word in words:
        assert word.replace("{root}", str(place)) in lines[0], lines[0]
    assert snapshot(place) == before  # nothing changed, nothing new (no runs/, no new/)
    assert not os.path.exists(place / "runs")


@pytest.mark.parametrize("value", ["soon", "nan", "-5", "inf"])
def test_a_bad_collective_timeout_is_refused_cleanly(value, place, capfd, monkeypatch):
    """`STAGEGAN_COLLECTIVE_TIMEOUT` is read with the cluster, before anything is written."""
    cluster = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker"}}
    cluster["task"]["index"] = 0
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    monkeypatch.setenv("STAGEGAN_COLLECTIVE_TIMEOUT", value)
    monkeypatch.chdir(place)
    before = snapshot(place)
    argv = [*TRAIN, *toy("devices.strategy=multi_worker")]
    status = cli.main([a.replace("{root}", str(place)) for a in argv])
    lines = capfd.readouterr().err.strip().splitlines()
    assert status == 2
    assert lines == [
        "stagegan: error: STAGEGAN_COLLECTIVE_TIMEOUT: must be a number of seconds, 0 or more "
        f"(0: no deadline); got {value!r}"
    ]
    assert snapshot(place) == before


def test_running_out_of_memory_anyway_is_one_line(monkeypatch, capfd):
    """What the size checks miss (a user's code, an estimate too low) ends as one line too."""

    def plan_out_of_memory(args):
        raise MemoryError()

    monkeypatch.setattr(cli, "cmd_plan", plan_out_of_memory)
    assert cli.main(["plan"]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert lines == [
        "stagegan: error: memory: ran out of memory (MemoryError: MemoryError); use smaller "
        "sizes, counts or batches"
    ]


# Hardening round 5: TF_CONFIG checked as a whole, for serve, train and launch.
SPEC = {
    "cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]},
    "task": {"type": "ps", "index": 0},
}


def spec_with(**changes):
    spec = json.loads(json.dumps(SPEC))
    for path, value in changes.items():
        part, _, name = path.partition("__")
        if value is ...:
            del spec[part][name]
        else:
            spec[part][name] = value
    return json.dumps(spec)


TF_CONFIGS = {
    "a fractional task index": (
        spec_with(task__index=0.5),
        "task.index must be an integer (0, 1, ...). Received: 0.5",
    ),
    "a task index as text": (spec_with(task__index="0"), "task.index must be an integer"),
    "a task index of true": (spec_with(task__index=True), "Received: True"),
    "a negative task index": (spec_with(task__index=-1), "task ps:-1 is not in the cluster"),
    "a task index past its job": (
        spec_with(task__index=1),
        "task ps:1 is not in the cluster (its ps job lists 1: indices 0 to 0)",
    ),
    "no task index": (spec_with(task__index=...), "task.index must be an integer"),
    "a task type not in the cluster": (
        spec_with(task__type="evaluator"),
        "task.type must name a job of the cluster (chief, worker, ps). Received: 'evaluator'",
    ),
    "an unknown task key": (spec_with(task__idx=0), "unknown task key 'idx'"),
    "a job of one string": (
        spec_with(cluster__worker="127.0.0.1:2"),
        "cluster's worker must be a non-empty list of host:port strings",
    ),
    "an empty job": (spec_with(cluster__worker=[]), "cluster's worker must be a non-empty list"),
    "a port out of range": (
        spec_with(cluster__worker=["127.0.0.1:70000"]),
        "Received: ['127.0.0.1:70000']",
    ),
    "one address twice": (
        spec_with(cluster__worker=["127.0.0.1:3"]),
        "cluster lists 127.0.0.1:3 twice (worker 0 and ps 0)",
    ),
    "an unknown key": (
        json.dumps({**SPEC, "clutser": {}}),
        "unknown key 'clutser' (it takes cluster, task, rpc_layer, environment)",
    ),
    "no cluster": (json.dumps({"task": SPEC["task"]}), "cluster must be an object"),
    "not JSON": ('{"cluster": ', "TF_CONFIG: is not JSON"),
    "a JSON list": ("[1, 2]", "must be a JSON object with cluster and task. Received: [1, 2]"),
    "nested past any parser": ("[" * 100_000, "TF_CONFIG: is not JSON"),
}


@pytest.mark.parametrize("command", ["serve", "train multi_worker", "train parameter_server"])
@pytest.mark.parametrize("name", list(TF_CONFIGS))
def test_a_bad_tf_config_is_one_line_naming_it(command, name, place, capfd, monkeypatch):
    """`serve` used to serve a task index of 0.5 as task 0, silently, until killed."""
    raw, words = TF_CONFIGS[name]
    monkeypatch.setenv("TF_CONFIG", raw)
    monkeypatch.chdir(place)
    argv = ["serve"]
    if command != "serve":
        argv = [*TRAIN, *toy(f"devices.strategy={command.split()[1]}", "devices.towers=1")]
    before = snapshot(place)
    status = cli.main([a.replace("{root}", str(place)) for a in argv])
    lines = capfd.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("stagegan: error: TF_CONFIG: ") and words in lines[0], lines[0]
    assert snapshot(place) == before and not os.path.exists(place / "new")


@pytest.mark.parametrize(
    "cluster, words",
    [
        ({"worker": ["a:1"], "ps": ["b:1"]}, "a multi_worker cluster has jobs chief and worker"),
        ({"chief": ["a:1", "c:1"], "worker": ["b:1"]}, "at most one chief; it lists 2"),
    ],
)
def test_a_multi_worker_cluster_has_workers_and_one_chief(
    cluster, words, place, capfd, monkeypatch
):
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    )
    monkeypatch.chdir(place)
    argv = [*TRAIN, *toy("devices.strategy=multi_worker")]
    assert cli.main([a.replace("{root}", str(place)) for a in argv]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("stagegan: error: TF_CONFIG: ")
        and words in lines[0]
    )


def test_launch_refuses_a_tf_config_it_would_ignore(place, capfd, monkeypatch):
    """launch gives each process its own TF_CONFIG: one in its environment would be lost."""
    monkeypatch.setenv("TF_CONFIG", json.dumps(SPEC))
    monkeypatch.chdir(place)
    before = snapshot(place)
    assert cli.main(["launch", "--workers", "2", "--config", f"{place}/toy.yaml"]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("stagegan: error: TF_CONFIG: launch starts a cluster of its own")
    assert snapshot(place) == before and not os.path.exists(place / "runs")


@pytest.mark.parametrize(
    "options, key, words",
    [
        ({"truncation": 10**400}, "truncation", "Received: an integer beyond 1e308"),
        ({"truncation": float("nan")}, "truncation", "must be a positive number. Received: nan"),
        ({"truncation": "1"}, "truncation", "Received: '1'"),
        ({"interpolate": 10**400}, "interpolate", "walks through an integer beyond 1e308 latents"),
    ],
)
def test_the_api_refuses_numbers_beyond_any_float(options, key, words, place):
    """`Run.sample(4, truncation=10**400)` raised a raw OverflowError (hardening round 5)."""
    import stagegan

    with pytest.raises(stagegan.Error) as caught:
        stagegan.load_run(place / "run").sample(4, **options)
    assert caught.value.key == key and words in caught.value.message, caught.value.message
