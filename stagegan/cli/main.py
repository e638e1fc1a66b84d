"""The command line: `train`, `launch`, `serve`, `plan`, `sample`, `eval`, `compare`, `export`,
`project` and `prepare`. Parses arguments (`stagegan.cli.parser`), calls library functions.

Bad input ends as one line on stderr, `stagegan: error: KEY: MESSAGE`, and exit status 2.
"""

import json
import logging
import os
import re
import sys

from stagegan.cli.parser import ArgumentParser, build_parser  # noqa: F401 - read from here too
from stagegan.config.cluster import check_batch_divides
from stagegan.config.memory import check_memory, format_count
from stagegan.config.numbers import brief, parse_number
from stagegan.config.objects import find_user_modules
from stagegan.config.schema import check_seed, load_config
from stagegan.data import prepare
from stagegan.errors import ConfigError, Interrupted, RunStopped, WriteError, out_of_memory


def one_line(text):
    """`text` on one line: newlines and other control characters (in a path, say) as escapes,
    so an error stays the one line a script or a person reads."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(text))


# What a launched worker process takes at least: Python, TensorFlow and a small run (measured
# on this kind of machine: 710 MB at most resident for a 4-step mog_ring train).
WORKER_BYTES = 700 * 10**6


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
        return command(args.command)(args)
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


def command(name):
    """The function that runs sub-command `name`: `cmd_<name>` of this module, looked up when
    it runs (so a test may replace one)."""
    return globals()[f"cmd_{name}"]


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
    units = [unit for _, unit in pieces]
    if len(set(units)) < len(units) or units != sorted(units, key="hms".index):
        raise ConfigError(
            key,
            f"expected a duration like 90s, 10m, 1.5h or 1h30m, each unit once, hours first. "
            f"Received: {brief(text)}",
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
