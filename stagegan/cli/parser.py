"""The command line's parser: `stagegan`'s sub-commands and their flags (`build_parser`), with
stagegan's one-line errors (`ArgumentParser`). `stagegan.cli.main` runs the command parsed,
`cmd_<command>`."""

import argparse

from stagegan.data import prepare
from stagegan.errors import ConfigError


class ArgumentParser(argparse.ArgumentParser):
    """argparse with stagegan's one-line errors: a ConfigError naming the flag (`stagegan:
    error: --num: invalid int value: 'abc'`, exit status 2), no usage lines (`--help` shows
    them). Its sub-commands' parsers are of this class too."""

    def error(self, message):
        flag, found, rest = message.partition(": ")
        if found and flag.startswith("argument "):
            raise ConfigError(flag.removeprefix("argument ").split("/")[0], rest)
        raise ConfigError("", message)


def build_parser():
    parser = ArgumentParser(prog="stagegan", description="Train GANs in stages (see README.md).")
    commands = parser.add_subparsers(dest="command", required=True)

    def config_arguments(p):
        p.add_argument(
            "--config",
            help="a run config YAML file or a preset name from configs/ "
            "(default: configs/default.yaml)",
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override a config value (parsed as YAML); repeatable, e.g. "
            "--set batch_size=64 --set stages[2].steps=100",
        )

    train = commands.add_parser("train", help="train a run")
    config_arguments(train)
    train.add_argument("--run-dir", help="the run folder (default: the next runs/NNNNN-<name>)")
    train.add_argument(
        "--resume",
        metavar="RUN",
        help="continue the run in folder RUN from its newest checkpoint (with its own config; "
        "--set may change learning rates, later stages' steps and the intervals)",
    )
    train.add_argument(
        "--checkpoint",
        help="with --resume: resume from this checkpoint (its global step) instead",
    )
    train.add_argument(
        "--init-from",
        metavar="RUN",
        help="start the new run's networks (and EMA) from run folder RUN's newest checkpoint, "
        "by variable path; optimizers, step and random streams start fresh (config: init.run)",
    )
    train.add_argument(
        "--init-checkpoint",
        metavar="STEP",
        type=int,
        help="with --init-from: that run's checkpoint at global step STEP instead",
    )
    train.add_argument(
        "--init-only",
        metavar="PATTERN",
        action="append",
        help="with --init-from: copy only the variables matching this glob pattern "
        "(repeatable), e.g. 'generator/*'",
    )

    launch = commands.add_parser(
        "launch",
        help="run a multi-worker training as N local worker processes (127.0.0.1, free ports)",
        description="Start N worker processes of `train` on this machine, each with its own "
        "TF_CONFIG, with devices.strategy=multi_worker. The remaining arguments are train's "
        "(e.g. --config X --run-dir R, or --resume R). Worker 0 is the chief: it alone writes "
        "the run folder.",
    )
    launch.add_argument("--workers", type=int, required=True, help="how many worker processes")
    launch.add_argument(
        "--ps",
        type=int,
        default=0,
        help="parameter servers: a devices.strategy=parameter_server run (a chief running "
        "train, the workers and servers running serve); default 0: multi_worker",
    )
    launch.add_argument(
        "--grace",
        type=float,
        default=60.0,
        help="seconds the other workers get to stop by themselves after one fails (default 60)",
    )
    launch.add_argument(
        "--gpus-per-worker",
        type=int,
        default=None,
        help="GPUs of each worker (CUDA_VISIBLE_DEVICES: worker i gets GPUs i*N..i*N+N-1; "
        "0: CPU workers); default: the visible GPUs shared out evenly",
    )

    serve = commands.add_parser(
        "serve",
        help="a worker or parameter server of a devices.strategy: parameter_server cluster",
        description="Start the TensorFlow server of this process's task in TF_CONFIG (a worker "
        "or ps of a parameter_server cluster; the chief runs train). It needs no config and "
        "writes nothing.",
    )
    serve.add_argument(
        "--stop-when-chief-gone",
        metavar="SECONDS",
        type=float,
        default=None,
        help="exit once the chief, after it was first reached, has not answered for this long "
        "(default: serve until stopped)",
    )

    plan = commands.add_parser("plan", help="print what each stage trains, without training")
    config_arguments(plan)
    plan.add_argument(
        "--budget",
        metavar="TIME",
        help="time a few steps of each stage on this machine and say how many fit in TIME "
        "(90s, 10m, 1.5h, 1h30m) and what the config's steps cost",
    )

    def run_arguments(p):
        p.add_argument("--run", required=True, help="the run folder")
        p.add_argument(
            "--checkpoint",
            help="a checkpoint: its global step, best (checkpoint.keep_best's), or its path "
            "(default: the newest)",
        )
        p.add_argument(
            "--no-ema", action="store_true", help="use the live weights even if the run has an EMA"
        )
        p.add_argument(
            "--batch-size",
            type=int,
            help="images per forward pass (default: the run's eval.batch_size, else its "
            "batch_size): peak memory does not grow with --num / --count",
        )

    sample = commands.add_parser("sample", help="write samples from a run's checkpoint")
    run_arguments(sample)
    sample.add_argument(
        "--num",
        type=int,
        help="how many samples (required without --input); with --input, at most this many "
        "of your images (default: all)",
    )
    sample.add_argument(
        "--output",
        required=True,
        help="FILE.npy (the raw array), FILE.png (a picture) or, with --interpolate, FILE.gif "
        "(an animation)",
    )
    sample.add_argument(
        "--truncation",
        metavar="T",
        type=float,
        help="the truncation trick: latent entries beyond [-T, T] redrawn (BigGAN); smaller T, "
        "more typical and alike samples",
    )
    sample.add_argument(
        "--interpolate",
        metavar="K",
        type=int,
        help="a latent walk: the --num samples go along great circles through K latents drawn "
        "with --seed, in one class",
    )
    sample.add_argument(
        "--seed",
        type=int,
        help="fixes the inputs: latents, classes, or the holes drawn in --input images "
        "(default: 0)",
    )
    sample.add_argument(
        "--input",
        metavar="DIR",
        help="completion: complete your own images from this folder (holes drawn as in "
        "training, or --masks)",
    )
    sample.add_argument(
        "--masks",
        metavar="DIR",
        help="with --input: your holes, mask images paired with the images by file name "
        "(white: the hole; fitted to the run's size as the images are)",
    )
    sample.add_argument(
        "--class",
        dest="class_name",
        metavar="K|NAME",
        help="class-conditional runs: samples of this class only (its name or index)",
    )

    evaluate = commands.add_parser("eval", help="print a run's metrics (appended to eval.jsonl)")
    run_arguments(evaluate)
    evaluate.add_argument("--json", action="store_true", help="print JSON instead of a table")
    evaluate.add_argument(
        "--count",
        type=int,
        help="samples to evaluate (default: the task's; for FID 10,000 or all real images)",
    )
    evaluate.add_argument("--seed", type=int, help="fixes the inputs (default: the run seed)")
    evaluate.add_argument(
        "--features",
        metavar="SPEC",
        help="features for FID/KID and completion's realism metric: shapes (the built-in "
        "shapes classifier), selfsup (a rotation-prediction net trained on the run's own "
        "real images, offline), inception (ImageNet weights, downloaded), inception:PATH (a "
        "local InceptionV3 weights file), inception2015:PATH (the 2015-12-05 Inception graph "
        "classify_image_graph_def.pb: FID and KID as papers report them), or "
        "package.module:function returning a Keras model "
        "that maps images in [-1, 1] to features (default: shapes on the shapes source, "
        "else inception)",
    )
    memorisation = evaluate.add_mutually_exclusive_group()
    memorisation.add_argument(
        "--memorisation",
        dest="memorise",
        action="store_true",
        default="auto",
        help="compare the samples with the training (and held-out) images: memorisation/ "
        "numbers, at the cost of the features of up to 5,000 images of each (default: on for "
        "folder and npz data of at most 2,000 images)",
    )
    memorisation.add_argument(
        "--no-memorisation", dest="memorise", action="store_false", help="do not compare them"
    )
    evaluate.add_argument(
        "--nearest",
        metavar="FILE.png",
        help="write a picture of the samples most like a training image, beside their nearest "
        "training (and held-out) images; implies --memorisation",
    )

    compare = commands.add_parser(
        "compare",
        help="train arms x seeds into one folder and tabulate their evaluations",
        description="Train each arm (a config and its --set flags) from each seed into "
        "OUTPUT/NAME-sS, evaluate every run alike, and write OUTPUT/table.md, table.json and "
        "samples.png: each metric's mean and spread per arm, and the seeds on which each arm "
        "beat the first. Runs already finished in OUTPUT are reused, a stopped one resumed.",
    )
    compare.add_argument(
        "--output", required=True, metavar="DIR", help="the comparison folder (new, or grown)"
    )
    compare.add_argument(
        "--arm",
        dest="arms",
        action="append",
        type=lambda text: ("arm", text),
        metavar="NAME=CONFIG",
        help="an arm: its name and a preset or YAML file; the --set flags after it are its "
        "own (repeatable; the first arm is the baseline)",
    )
    compare.add_argument(
        "--set",
        dest="arms",
        action="append",
        type=lambda text: ("set", text),
        metavar="KEY.PATH=VALUE",
        help="before the first --arm: for every arm; after an --arm: for that arm",
    )
    compare.add_argument("--seeds", default="0,1,2", help="the run seeds (default: 0,1,2)")
    sizing = compare.add_mutually_exclusive_group()
    sizing.add_argument(
        "--steps",
        type=int,
        help="every arm trains N steps, its stages in its config's proportions (default: "
        "each config's own)",
    )
    sizing.add_argument(
        "--budget",
        metavar="TIME",
        help="every arm trains the steps that fit in TIME on this machine (10m, 1h30m), "
        "timed as plan --budget times them",
    )
    compare.add_argument("--count", type=int, help="samples per evaluation (as eval --count)")
    compare.add_argument("--features", metavar="SPEC", help="as eval --features, for every run")
    compare.add_argument(
        "--eval-seed",
        type=int,
        help="fixes every evaluation's inputs (default: each run's seed, as eval)",
    )
    memorise = compare.add_mutually_exclusive_group()
    memorise.add_argument(
        "--memorisation", dest="memorise", action="store_true", default="auto",
        help="as eval --memorisation",
    )  # fmt: skip
    memorise.add_argument(
        "--no-memorisation", dest="memorise", action="store_false",
        help="as eval --no-memorisation",
    )  # fmt: skip
    compare.add_argument(
        "--metrics",
        metavar="NAME,...",
        help="the table's metrics (default: every one with a declared direction that the "
        "evaluations give)",
    )

    export = commands.add_parser(
        "export",
        help="write a run's generator for plain TensorFlow, Keras or TFLite",
        description="Write the run's generator (its EMA when it keeps one) into a new folder, "
        "taking its own inputs (z, and y for a class) and giving uint8 images, loadable "
        "without stagegan: keras (generator.keras), savedmodel (saved_model/) or tflite "
        "(generator.tflite), with export.json describing it.",
    )
    export.add_argument("--run", required=True, help="the run folder")
    export.add_argument(
        "--checkpoint", help="its global step, best, or a path (default: the newest)"
    )
    export.add_argument("--no-ema", action="store_true", help="the live weights, not the EMA")
    export.add_argument("--output", required=True, metavar="DIR", help="the folder to write")
    export.add_argument(
        "--format",
        default="savedmodel",
        choices=("keras", "savedmodel", "tflite"),
        help="keras, savedmodel or tflite (default: savedmodel)",
    )

    project = commands.add_parser(
        "project",
        help="find the latents whose samples come closest to your images",
        description="For each image of DIR (fitted to the run's size), gradient descent on "
        "the generator's latent (and, for a class-conditional run, the best class) minimises "
        "the pixel error plus the discriminator's feature distance. Writes a new folder with "
        "latents.npz, projection.json and projection.png (each image beside its projection).",
    )
    project.add_argument("--run", required=True, help="the run folder")
    project.add_argument("--checkpoint", help="its global step, best, or a path")
    project.add_argument("--no-ema", action="store_true", help="the live weights, not the EMA")
    project.add_argument("--input", required=True, metavar="DIR", help="your images")
    project.add_argument("--output", required=True, metavar="DIR", help="the folder to write")
    project.add_argument("--num", type=int, help="at most this many images (default: all)")
    project.add_argument("--steps", type=int, default=300, help="Adam steps (default 300)")
    project.add_argument(
        "--restarts", type=int, default=4, help="random starts per image (default 4)"
    )
    project.add_argument("--seed", type=int, default=0, help="fixes the starts (default 0)")

    prepare_parser = commands.add_parser(
        "prepare",
        help="convert an image folder to sharded TFRecords (data.source: tfrecord)",
        description="Fit every PNG and JPEG file below FOLDER to SIZE x SIZE (as data.source: "
        "folder does), store it as PNG in TFRecord shards in a new folder, and print the data: "
        "block that reads them. An interrupted prepare leaves no OUTPUT.",
    )
    prepare_parser.add_argument(
        "folder", metavar="FOLDER", help="the images; with --labels, one subfolder per class"
    )
    prepare_parser.add_argument(
        "--output", required=True, metavar="DIR", help="the folder to write (new, or empty)"
    )
    prepare_parser.add_argument("--size", type=int, required=True, help="image side in pixels")
    prepare_parser.add_argument(
        "--channels", type=int, default=3, help="1 (grey) or 3 (default: 3)"
    )
    prepare_parser.add_argument(
        "--labels",
        action="store_true",
        help="the subfolders of FOLDER are the classes (their sorted names; feature 'label')",
    )
    prepare_parser.add_argument(
        "--shard-size",
        type=int,
        default=prepare.SHARD_SIZE,
        help=f"images per shard file (default: {prepare.SHARD_SIZE})",
    )
    return parser
