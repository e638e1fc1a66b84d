"""The command line: `train`, `launch`, `plan`, `sample`, `eval`, `export`, `project` and
`prepare`. Parses arguments, calls library functions.

Bad input ends as one line on stderr, `stagegan: error: KEY: MESSAGE`, and exit status 2.
"""

import argparse
import json
import logging
import os
import re
import sys

from stagegan.config.cluster import check_batch_divides
from stagegan.config.memory import check_memory, format_count
from stagegan.config.numbers import brief, parse_number
from stagegan.config.objects import find_user_modules
from stagegan.config.schema import check_seed, load_config
from stagegan.data import prepare
from stagegan.errors import ConfigError, Interrupted, RunStopped, WriteError, out_of_memory


class ArgumentParser(argparse.ArgumentParser):
    """argparse with stagegan's one-line errors: a ConfigError naming the flag (`stagegan:
    error: --num: invalid int value: 'abc'`, exit status 2), no usage lines (`--help` shows
    them). Its sub-commands' parsers are of this class too."""

    def error(self, message):
        flag, found, rest = message.partition(": ")
        if found and flag.startswith("argument "):
            raise ConfigError(flag.removeprefix("argument ").split("/")[0], rest)
        raise ConfigError("", message)


def one_line(text):
    """`text` on one line: newlines and other control characters (in a path, say) as escapes,
    so an error stays the one line a script or a person reads."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(text))


# What a launched worker process takes at least: Python, TensorFlow and a small run (measured
# on this kind of machine: 710 MB at most resident for a 4-step mog_ring train).
WORKER_BYTES = 700 * 10**6


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
    train.set_defaults(func=cmd_train)

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
    launch.set_defaults(func=cmd_launch)

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
    serve.set_defaults(func=cmd_serve)

    plan = commands.add_parser("plan", help="print what each stage trains, without training")
    config_arguments(plan)
    plan.add_argument(
        "--budget",
        metavar="TIME",
        help="time a few steps of each stage on this machine and say how many fit in TIME "
        "(90s, 10m, 1.5h, 1h30m) and what the config's steps cost",
    )
    plan.set_defaults(func=cmd_plan)

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
    sample.set_defaults(func=cmd_sample)

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
    evaluate.set_defaults(func=cmd_eval)

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
    compare.set_defaults(func=cmd_compare)

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
    export.set_defaults(func=cmd_export)

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
    project.set_defaults(func=cmd_project)

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
    prepare_parser.set_defaults(func=cmd_prepare)
    return parser


def main(argv=None):
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(argv)
        if args.command == "launch":
            args.train_args = rest  # train's own arguments, checked by `launch`
        elif rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
    except ConfigError as e:
        print(f"stagegan: error: {one_line(e)}", file=sys.stderr)
        return 2
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("stagegan")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        return args.func(args)
    except (ConfigError, WriteError) as e:
        print(f"stagegan: error: {one_line(e)}", file=sys.stderr)
        return 2
    except RunStopped as e:
        if e.status == 3:  # the guard: the one line says what went non-finite, and where
            print(f"stagegan: error: guard: {one_line(e.message)}", file=sys.stderr)
        elif e.status == 4:  # a multi-worker peer, or a parameter server, was lost
            print(f"stagegan: error: {e.key}: {one_line(e.message)}", file=sys.stderr)
        return e.status
    except Exception as e:  # noqa: BLE001 - memory the size checks should have refused first
        error = out_of_memory(e)
        if error is None:
            raise
        print(f"stagegan: error: {one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stagegan: interrupted", file=sys.stderr)
        return 130


def load(args):
    """The validated config of `args`, with the config file's folder and the working directory
    on the import path, so a config can name `module:function` from either."""
    config = load_config(args.config, args.set)
    find_user_modules(args.config)
    return config


def cmd_train(args):
    plan = train_plan(args)  # refusals before the slow TF import
    if plan.finished:
        logging.getLogger("stagegan").info(
            "%s already finished at step %d; nothing to do", plan.run_dir, plan.resume.step
        )
        return 0
    import_tensorflow()
    from stagegan.run import runner

    runner.run(plan)
    return 0


def train_plan(args, chief=None):
    """The checked `TrainPlan` of `train` arguments (a new run, a warm start, or a resume):
    what `train` runs, and what `launch` checks once before it starts any process."""
    from stagegan.run.trainplan import TrainPlan

    if args.resume is not None:
        for flag, value in (
            ("--config", args.config),
            ("--run-dir", args.run_dir),
            ("--init-from", args.init_from),
        ):
            if value is not None:
                raise ConfigError(
                    flag, "not with --resume (a resumed run keeps its folder and config)"
                )
        return TrainPlan.resumed(args.resume, args.set, args.checkpoint, chief)
    if args.checkpoint is not None:
        raise ConfigError("--checkpoint", "only with --resume RUN")
    args.set = [*args.set, *init_overrides(args)]
    return TrainPlan.new(load(args), args.run_dir, chief)


def init_overrides(args):
    """`--init-from RUN [--init-checkpoint STEP] [--init-only P ...]` as `--set init=...`."""
    if args.init_from is None:
        for flag, value in (
            ("--init-checkpoint", args.init_checkpoint),
            ("--init-only", args.init_only),
        ):
            if value is not None:
                raise ConfigError(flag, "only with --init-from RUN")
        return []
    init = {"run": args.init_from, "checkpoint": args.init_checkpoint, "only": args.init_only}
    return [f"init={json.dumps(init)}"]


def cmd_launch(args):
    """`launch --workers N [--ps M] [train arguments]`: check the arguments here (one line
    and exit status 2, and no process starts), pick a new multi-worker run's folder so every
    worker names the same one, then start the processes (`stagegan.cli.launch`)."""
    from stagegan.cli.launch import (
        MULTI_WORKER,
        PARAMETER_SERVER,
        assign_gpus,
        host_gpus,
        launch,
    )
    from stagegan.config.cluster import collective_timeout

    if os.environ.get("TF_CONFIG") is not None:
        raise ConfigError(
            "TF_CONFIG",
            "launch starts a cluster of its own on this machine and gives each process its "
            "own TF_CONFIG, so the one set here would be ignored: unset it (on a cluster of "
            "hosts, start train, or serve, on each with its TF_CONFIG instead)",
        )
    if args.workers < 1:
        raise ConfigError("--workers", f"must be at least 1. Received: {args.workers}")
    if args.ps < 0:
        raise ConfigError("--ps", f"must be 0 or more. Received: {args.ps}")
    if not 0 <= args.grace < float("inf"):  # NaN too: a deadline never reached
        raise ConfigError(
            "--grace", f"must be a number of seconds, 0 or more. Received: {args.grace}"
        )
    if not args.ps:  # every worker reads it (`PeerDeadline`): checked once, here
        collective_timeout()
    # The worker processes and, with --ps, the servers and the chief: the flag of the larger
    # share is the one named, with both counts.
    servers = args.ps + 1 if args.ps else 0
    processes = args.workers + servers
    what = f"{format_count(processes)} TensorFlow processes"
    parts = [("--workers", args.workers * WORKER_BYTES, what), ("--ps", servers * WORKER_BYTES, "")]
    check_memory(parts, {"--workers": args.workers, "--ps": args.ps})
    gpus = assign_gpus(args.workers, args.gpus_per_worker, host_gpus())
    strategy, setting = (
        ("parameter_server", PARAMETER_SERVER) if args.ps else ("multi_worker", MULTI_WORKER)
    )
    worker_args = list(args.train_args)
    if worker_args[:1] == ["train"]:
        worker_args = worker_args[1:]
    parsed = build_parser().parse_args(["train", *worker_args])
    if parsed.resume is not None:
        plan = train_plan(parsed, chief=True)
        if plan.config.devices.strategy != strategy:
            other = "--ps M --workers N" if strategy == "multi_worker" else "--workers N"
            raise ConfigError(
                "devices.strategy",
                f"{parsed.resume} was trained with {plan.config.devices.strategy!r}; launch "
                f"{'--ps M ' if args.ps else ''}--workers N resumes {strategy} runs (resume "
                + (
                    f"this one with launch {other} --resume)"
                    if plan.config.devices.strategy in ("multi_worker", "parameter_server")
                    else "this one with train --resume)"
                ),
            )
        if plan.finished:
            print(f"{plan.run_dir} already finished at step {plan.resume.step}; nothing to do")
            return 0
    else:
        from stagegan.runfolder.dirs import RunFolder

        parsed.set = [*parsed.set, setting]
        config = train_plan(parsed, chief=True).config  # the folder, a warm start's source
        if not args.ps:  # every worker trains the global batch's share, into one folder
            check_batch_divides(config.batch_sizes, args.workers)
            if parsed.run_dir is None:  # reserve the next numbered folder, empty
                folder = RunFolder.create(None, name=config.name)
                worker_args += ["--run-dir", str(folder.path)]
        worker_args += ["--set", setting]
    return launch(args.workers, worker_args, args.grace, gpus, args.ps)


def cmd_serve(args):
    """`serve`: this process's worker or parameter server (`stagegan.run.serve`)."""
    from stagegan.config.cluster import parameter_server_cluster

    wait = args.stop_when_chief_gone
    if wait is not None and not 0 <= wait < float("inf"):
        raise ConfigError(
            "--stop-when-chief-gone", f"must be a number of seconds, 0 or more. Received: {wait}"
        )
    cluster, task_type, index = parameter_server_cluster()
    if task_type == "chief":
        raise ConfigError(
            "TF_CONFIG",
            "this process is the chief of the parameter_server cluster: it runs "
            "`python -m stagegan train --set devices.strategy=parameter_server ...`, not serve",
        )
    import_tensorflow()
    from stagegan.run.serve import serve

    return serve(cluster, task_type, index, wait)


# The longest `plan --budget`: a year of training is past any plan.
MAX_BUDGET = 365 * 24 * 3600


def parse_duration(text, key="--budget"):
    """Seconds in `text`: a number with a unit, or several (`90s`, `10m`, `1.5h`, `1h30m`),
    up to a year (each number through `parse_number`).

    Raises:
        ConfigError: anything else, no time at all, or more than a year.
    """
    pieces = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", str(text).strip().lower())
    rebuilt = "".join(f"{n}{u}" for n, u in pieces)
    if not pieces or rebuilt != re.sub(r"\s+", "", str(text).strip().lower()):
        raise ConfigError(
            key, f"expected a duration like 90s, 10m, 1.5h or 1h30m. Received: {brief(text)}"
        )
    seconds = 0.0
    for number, unit in pieces:
        value = parse_number(number, key, what="a duration like 90s, 10m, 1.5h or 1h30m")
        seconds += value * {"h": 3600, "m": 60, "s": 1}[unit]
    if seconds <= 0:
        raise ConfigError(key, f"must be a positive duration. Received: {brief(text)}")
    if not seconds <= MAX_BUDGET:  # inf too: 1e308 hours
        raise ConfigError(key, f"must be at most a year (8760h). Received: {brief(text)}")
    return seconds


def cmd_plan(args):
    budget = None if args.budget is None else parse_duration(args.budget)
    config = load(args)
    import_tensorflow()
    from stagegan.run import runner

    print(runner.describe(config, budget=budget))
    return 0


def cmd_sample(args):
    from stagegan.run.reading import (
        check_output,
        check_run,
        check_walk,
        restore_run,
        write_samples,
    )

    if args.num is None and args.input is None:
        raise ConfigError(
            "--num",
            "how many samples? Give --num N (only --input DIR may go "
            "without it: then every image there is completed)",
        )
    if args.num is not None and args.num < 1:
        raise ConfigError("--num", f"must be at least 1. Received: {args.num}")
    if args.seed is not None and args.masks is not None:
        raise ConfigError(
            "--seed", "draws the holes of --input images, and --masks gives them: leave it out"
        )
    seed = 0 if args.seed is None else check_seed(args.seed, "--seed")
    check_batch_size(args.batch_size)
    check_output(args.output)
    check_walk(args.num, args.truncation, args.interpolate, args.output)
    if args.masks is not None:
        if args.input is None:
            raise ConfigError("--masks", "pairs masks with your images: give --input DIR too")
        if not os.path.isdir(os.path.expanduser(args.masks)):
            raise ConfigError("--masks", f"no such folder: {args.masks}")
    check_run(args.run, args.checkpoint)  # before the slow TensorFlow import
    import_tensorflow()

    quiet_logs()
    trainer, _ = restore_run(args.run, args.checkpoint)
    print(
        write_samples(
            trainer,
            args.output,
            args.num,
            seed,
            ema=not args.no_ema,
            input_dir=args.input,
            masks_dir=args.masks,
            batch_size=args.batch_size,
            class_name=args.class_name,
            truncation=args.truncation,
            interpolate=args.interpolate,
        )
    )
    return 0


def cmd_eval(args):
    from stagegan.run.reading import check_output, check_run

    if args.count is not None and args.count < 4:
        raise ConfigError("--count", f"must be at least 4. Received: {args.count}")
    if args.seed is not None:
        check_seed(args.seed, "--seed")
    check_batch_size(args.batch_size)
    if args.nearest is not None:
        if args.memorise is False:
            raise ConfigError("--nearest", "shows what --no-memorisation turns off")
        check_output(args.nearest, "--nearest", (".png",))
    check_run(args.run, args.checkpoint)  # before the slow TensorFlow import
    import_tensorflow()
    from stagegan.evaluation.evaluate import format_table
    from stagegan.run import runner

    quiet_logs()
    result = runner.evaluate(
        args.run,
        args.count,
        args.seed,
        args.checkpoint,
        args.features,
        ema=not args.no_ema,
        batch_size=args.batch_size,
        memorise=args.memorise,
        nearest=args.nearest,
    )
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


def cmd_compare(args):
    """`compare`: every refusal first (nothing written), then train, evaluate and tabulate
    (`stagegan.run.compare`); prints the table."""
    from stagegan.run import compare

    budget = None if args.budget is None else parse_duration(args.budget)
    plan = compare.check(
        compare.arms_from_flags(args.arms or []),
        args.output,
        compare.parse_seeds(args.seeds),
        steps=args.steps,
        budget=budget,
        evaluation=compare.EvalOptions(args.count, args.features, args.eval_seed, args.memorise),
        metrics=compare.parse_metrics(args.metrics),
    )
    import_tensorflow()
    plan = compare.prepare(plan)
    table = compare.run(plan)
    print(compare.format_table(table))
    print(f"\n(in {plan.output}: {compare.TABLE_MD}, {compare.TABLE_JSON}, {compare.PICTURE})")
    return 0


def cmd_export(args):
    from stagegan.run.reading import check_run
    from stagegan.runfolder.dirs import check_new_folder

    check_new_folder(args.output, "--output", "export never overwrites (pick another folder)")
    check_run(args.run, args.checkpoint)  # before the slow TensorFlow import
    import_tensorflow()
    from stagegan.run.export import export_generator
    from stagegan.run.reading import restore_run

    quiet_logs()
    trainer, _ = restore_run(args.run, args.checkpoint)
    path = export_generator(trainer, args.output, args.format, not args.no_ema, args.run)
    print(f"wrote {path} (step {trainer.step_count}, {args.format})")
    return 0


def cmd_project(args):
    from stagegan.run.reading import check_run
    from stagegan.runfolder.dirs import check_new_folder

    for flag, value, least in (
        ("--steps", args.steps, 1),
        ("--restarts", args.restarts, 1),
        ("--num", args.num, 1),
    ):
        if value is not None and value < least:
            raise ConfigError(flag, f"must be at least {least}. Received: {value}")
    if args.steps > 100_000:
        raise ConfigError("--steps", f"must be at most 100000. Received: {args.steps}")
    check_seed(args.seed, "--seed")
    if not os.path.isdir(args.input):
        raise ConfigError("--input", f"no such folder: {args.input}")
    check_new_folder(args.output, "--output", "project never overwrites (pick another folder)")
    check_run(args.run, args.checkpoint)  # before the slow TensorFlow import
    import_tensorflow()
    from stagegan.run.project import write_projection
    from stagegan.run.reading import restore_run

    quiet_logs()
    trainer, _ = restore_run(args.run, args.checkpoint)
    print(
        write_projection(
            trainer,
            args.input,
            args.output,
            args.steps,
            args.restarts,
            args.seed,
            not args.no_ema,
            args.num,
        )  # fmt: skip
    )
    return 0


def cmd_prepare(args):
    arguments = {
        "folder": args.folder,
        "output": args.output,
        "size": args.size,
        "channels": args.channels,
        "shard_size": args.shard_size,
    }
    prepare.check_arguments(**arguments)  # before the slow TensorFlow import
    import_tensorflow()
    # Unreadable files are warned of on stderr, beside the progress: stdout is the block.
    logs_to_stderr()
    try:
        with prepare.ConsoleProgress(sys.stderr) as progress:
            result = prepare.prepare(**arguments, labels=args.labels, progress=progress)
    except Interrupted as e:  # SIGTERM: one line, then its exit status (143)
        print(f"stagegan: {e.message}", file=sys.stderr)
        raise
    print(prepare.describe(result))
    return 0


def check_batch_size(value):
    if value is not None and value < 1:
        raise ConfigError("--batch-size", f"must be at least 1. Received: {value}")


def quiet_logs():
    """`sample` and `eval` print their result only (building the trainer logs nothing, and
    warnings go to stderr, so that `eval --json` prints JSON alone)."""
    logging.getLogger("stagegan").setLevel(logging.WARNING)
    logs_to_stderr()


def logs_to_stderr():
    """stagegan's log lines on stderr: stdout is the command's result."""
    for handler in logging.getLogger("stagegan").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stderr)


def import_tensorflow():
    """Import TensorFlow, and keep the native log lines of TensorFlow, XLA, gRPC and CUDA off
    stderr for the rest of the process.

    Native code writes to file descriptor 2 directly, at import and later (device set-up, a
    multi-worker cluster's coordination service), whatever TF_CPP_MIN_LOG_LEVEL says; those
    lines would bury stagegan's one-line errors. So descriptor 2 goes to /dev/null and Python's
    `sys.stderr` (stagegan's messages, warnings, tracebacks) keeps the real stderr. Set
    STAGEGAN_TF_LOGS=1 to see everything. A process that already imported TensorFlow (a
    notebook, the tests) is left alone.
    """
    if "tensorflow" in sys.modules or os.environ.get("STAGEGAN_TF_LOGS"):
        import tensorflow  # noqa: F401

        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    real = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    except ImportError as e:
        os.dup2(real, 2)
        os.close(real)
        raise ConfigError(
            "tensorflow", f"cannot import TensorFlow ({e}); pip install tensorflow"
        ) from None
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    sys.stderr = os.fdopen(real, "w", buffering=1, encoding=encoding, errors="backslashreplace")
