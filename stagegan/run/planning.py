"""`stagegan plan`: what each stage and update will train, shown before training."""

from stagegan.config.schema import Plateau
from stagegan.core.optimizers import describe
from stagegan.core.precision import loss_scaled, policy_of
from stagegan.core.until import never_checked
from stagegan.core.variables import count_parameters, scope_of
from stagegan.data.sources import tfrecord_label_counts
from stagegan.evaluation import registry
from stagegan.run.compare import length_overrides


def describe_checkpoints(config):
    """The plan's lines on the checkpoints a run keeps and the one it starts from."""
    lines = []
    if config.checkpoint.keep_best is not None:
        lines.append(f"checkpoints: {config.checkpoint.keep_best.describe()}")
    if config.init is not None:
        which = ", ".join(config.init.only) if config.init.only else "every network variable"
        step = "newest" if config.init.checkpoint is None else f"step {config.init.checkpoint}"
        lines.append(f"warm start: {which} from {config.init.run} (checkpoint: {step})")
    return lines


def describe_evaluation(trainer):
    """The plan's line on the run's evaluations: when, on how many samples, and each metric
    with the way it is better (`stagegan.evaluation.registry`)."""
    config, task = trainer.config, trainer.task
    plateaus = [s.name for s in config.stages if isinstance(s.until, Plateau)]
    if config.eval is None and not plateaus:
        return []
    when = []
    if config.eval is not None:
        every = config.eval.every
        when.append(f"every {every} steps and at stage ends" if every else "at stage ends")
    when += [f"at the until checks of {', '.join(repr(n) for n in plateaus)}"] if plateaus else []
    count = config.eval.count if config.eval is not None else None
    metrics = registry.task_metrics(task) + list(trainer.added_metrics)
    samples = f"{count} samples" if count else f"the task's {registry.usual_count(metrics)} samples"
    names = registry.gives(metrics)
    shown = ", ".join(f"{n} ({registry.better(n)})" if registry.better(n) else n for n in names)
    return [f"evaluation: {'; '.join(when)}; {samples}: {shown or 'as the task computes'}"]


def describe_networks(task, words, scopes):
    """The plan's lines on each network: its architecture (the task's `words` for its
    built-in ones) and trainable parameters; the discriminator's packing and spectral
    norm."""
    pack, norm = task.pack, task.model.get("spectral_norm")
    extra = [f"packs {pack} samples per input (PacGAN)"] if pack > 1 else []
    extra += ["spectral normalisation"] if norm else []
    lines = []
    for scope, line in words.items():
        trainable = [v for v in scopes.get(scope, []) if v.trainable]
        parts = [line, f"{count_parameters(trainable):,} trainable parameters"]
        lines.append(f"{scope}: " + ", ".join(parts + (extra if scope == "discriminator" else [])))
    if extra and "discriminator" not in words:
        lines.append("discriminator: " + ", ".join(extra))
    return lines


def describe_plan(trainer):
    """A human-readable plan of a built and traced `Trainer`."""
    config, schedule = trainer.config, trainer.schedule
    placement = trainer.placement
    towers = placement.labels
    per_tower = config.batch_size // len(towers)
    lines = [
        f"run {config.name}: task {config.task}, seed {config.seed}, "
        f"{len(config.stages)} stages, {schedule.total_steps} steps"
        + (" at most" if any(s.until for s in config.stages) else ""),
        placement.describe(),
        *([f"warning: {placement.warning}"] if placement.warning else []),
        f"backend: {placement.backend}; batch {config.batch_size} ({per_tower} per "
        + ("tower)" if placement.strategy is None else "replica), ")
        + (type(placement.strategy).__name__ if placement.strategy is not None else "")
        + (", XLA" if config.devices.jit else "")
        + describe_precision(config.devices.mixed_precision, placement.towers),
        f"NaN/Inf guard: {config.guard.policy}"
        + (
            f" (stop after {config.guard.max_consecutive} skips in a row)"
            if config.guard.policy == "skip"
            else ""
        ),
    ]
    lines += describe_checkpoints(config)
    lines += describe_evaluation(trainer)
    scopes = {}
    for variable in trainer.variables:
        scopes.setdefault(scope_of(variable), []).append(variable)
    lines.append(
        "scopes: "
        + ", ".join(
            f"{scope}/ ({len(vs)} variables, {count_parameters(vs):,} parameters)"
            for scope, vs in scopes.items()
        )
    )
    lines += describe_data(trainer.task)
    description = trainer.task.describe(config.stages)
    lines += description.inputs
    lines += describe_networks(trainer.task, description.networks, scopes)
    if config.ema is not None:
        ema = config.ema
        lines.append(
            f"ema: {ema.network}/ ({len(trainer.ema.averages)} weights), decay {ema.decay:g} "
            f"from step {ema.start}; samples come from the average"
        )
    users = {}
    for stage in config.stages:
        for update in stage.updates:
            users.setdefault(update.optimizer, []).append(f"{stage.name}/{update.name}")
    for index, stage_step in enumerate(trainer.stage_steps):
        stage = stage_step.stage
        first = schedule.starts[index]
        lines.append("")
        lines.append(
            f"stage {index} {stage.name!r}: {stage.steps} steps "
            f"(global {first}..{first + stage.steps - 1}), mode {stage.mode}"
            + (
                ""
                if stage.batch_size is None
                else f", batch {stage.batch_size} ({stage.batch_size // len(towers)} per "
                + ("tower)" if placement.strategy is None else "replica)")
            )
        )
        if stage.until is not None:
            lines.append(f"  until: {stage.until.describe()}; at most {stage.steps} steps")
            warning = never_checked(stage)
            if warning is not None:
                lines.append(f"  warning: {warning}")
        lines += describe_augment(stage, config)
        lines += description.stages.get(stage.name, [])
        for plan in stage_step.plans:
            update = plan.update
            loss = " + ".join(f"{w:g}*{t}" for t, w in update.loss)
            lines.append(
                f"  update {update.name!r}: train {', '.join(update.train)}; loss {loss}; "
                f"repeat {update.repeat}, every {update.every}"
                + (f", lazy (loss weights x {update.every})" if update.lazy else "")
            )
            spec = config.optimizers[update.optimizer]
            if plan.shared:
                sharing = f"shared {update.optimizer!r} with {', '.join(users[update.optimizer])}"
            else:
                sharing = "private"
            lines.append(f"    optimizer: {describe(spec)}, {sharing}")
            lines.append(
                f"    variables: {len(plan.variables)} "
                f"({count_parameters(plan.variables):,} parameters)"
            )
            dropped = stage_step.traced[update.name].dropped
            lines.append(
                "    no gradient (dropped): " + (", ".join(dropped) if dropped else "none")
            )
    return "\n".join(lines)


def describe_precision(setting, towers):
    """The plan's words on `devices.mixed_precision` ("" when off)."""
    policy = policy_of(setting, towers)
    if policy is None:
        return ""
    return f", mixed precision ({policy}{', loss scaling' if loss_scaled(setting, policy) else ''})"


def describe_augment(stage, config):
    """The line saying how a stage augments its discriminator's inputs (none: no line, unless
    the run augments and this stage turns it off)."""
    if stage.augment is not None:
        return [f"  augment ({stage.augment.key}): {stage.augment.describe()}"]
    return ["  augment: none in this stage"] if config.augment is not None else []


def describe_data(task):
    """The data lines of a plan: the source, and the classes with their image counts."""
    source = task.source if "images" in task.capabilities else None
    if source is None:
        return []
    options = source.options
    where = f" {options['path']}" if options.get("path") else ""
    how = "streamed" if source.iterator is not None else "in memory"
    if options["cache"] != "none":
        how += f", {options['cache']} cache"
    count = f"{source.count:,} images, " if source.count is not None else ""
    lines = [
        f"data: {options['source']}{where} ({count}{how}), {options['size']} px, "
        f"{options['channels']} channel{'s' if options['channels'] > 1 else ''}"
        + (f" (data.channels auto: {task.channels_decided})" if task.channels_decided else "")
    ]
    if source.classes is not None:
        counts = source.class_counts
        if counts is None:  # a tfrecord source: its labels are read now
            counts = tfrecord_label_counts(options)
        lines.append(
            f"classes: {len(source.classes)}: "
            + ", ".join(f"{name} ({n:,})" for name, n in zip(source.classes, counts, strict=True))
        )
        if task.conditional:
            how = (
                "class embedding" if task.model.get("arch") != "resnet" else "class-wise batch norm"
            )
            lines.append(f"conditional: {how} in the generator, projection discriminator")
    return lines


# Budget sizing (`plan --budget`) ---------------------------------------------------------------

WARMUP_STEPS = 2  # untimed: the first traces and compiles
TIMED_STEPS = 10  # at least; more when an update runs every N steps (up to MAX_TIMED_STEPS)
MAX_TIMED_STEPS = 32


def time_stages(trainer):
    """Seconds per step of each stage of a traced `trainer`, measured by running a few of its
    steps on this machine (`WARMUP_STEPS` untimed, then `TIMED_STEPS` or, when an update runs
    every N steps, N of them, at most `MAX_TIMED_STEPS`): `[(stage, seconds per step, timed
    steps)]`. The trainer's state moves on: a plan's trainer is thrown away after."""
    import time

    schedule, out = trainer.schedule, []
    for index, stage in enumerate(trainer.config.stages):
        every = max((update.every for update in stage.updates), default=1)
        timed = min(max(TIMED_STEPS, every), MAX_TIMED_STEPS)
        steps = min(schedule.lengths[index], WARMUP_STEPS + timed)
        start = schedule.starts[index]
        began = None
        for offset in range(steps):
            if offset == min(WARMUP_STEPS, steps - 1):
                began = time.perf_counter()
            output = trainer.step(schedule.position(start + offset))
            for value in output.metrics.values():  # the step has finished
                float(value)
                break
        counted = steps - min(WARMUP_STEPS, steps - 1)
        out.append((stage, (time.perf_counter() - began) / counted, counted))
    return out


def describe_budget(trainer, budget, timings=None):
    """The plan's lines on `budget` seconds: each stage's measured time per step, what the
    config's steps cost, and how many steps fit (in the config's proportions), with the
    `--set`s that give them (`compare.length_overrides`: a schedule spanning a stage too)."""
    timings = time_stages(trainer) if timings is None else timings
    total = sum(s.steps * per_step for s, per_step, _ in timings)
    lines = [
        f"budget {format_seconds(budget)} on this machine (training steps only: evaluations, "
        "sample dumps and checkpoints add to it; each stage timed over a few steps after "
        f"{WARMUP_STEPS} untimed):"
    ]
    for stage, per_step, counted in timings:
        lines.append(
            f"  stage {stage.name!r}: {milliseconds(per_step)} ms a step ({counted} timed), "
            f"{stage.steps:,} steps: {format_seconds(stage.steps * per_step)}"
        )
    steps = sum(stage.steps for stage, _, _ in timings)
    share = total / budget
    lines.append(
        f"  the config's {steps:,} steps: about {format_seconds(total)}, "
        f"{100 * share:.0f}% of the budget"
    )
    factor, fitted = fit_budget(timings, budget)
    # A polish's decaying rate is given the polish's new length too, as `compare --budget`
    # gives it: scaled stages alone would leave the rate short of 0 at the end, or at 0 early.
    sets = " ".join(f"--set {item}" for item in length_overrides(trainer.config, fitted))
    lines.append(
        f"  {format_seconds(budget)} fits about {sum(fitted):,} steps in these proportions "
        f"(x{factor:.2f})" + (f": {sets}" if sets else "")
    )
    return lines


def fit_budget(timings, budget):
    """`(factor, steps)`: the factor by which the config's stage lengths fit `budget` seconds
    at the timed seconds per step (`time_stages`), and each stage's length so scaled (at
    least 1: a stage the budget cannot pay a step of still runs one; `plan --budget` says
    the fit, `compare --budget` refuses a budget that small)."""
    total = sum(stage.steps * per_step for stage, per_step, _ in timings)
    factor = budget / total if total > 0 else float("inf")
    return factor, [max(1, int(stage.steps * factor)) for stage, _, _ in timings]


def milliseconds(seconds):
    """Milliseconds to 3 significant digits (`0.734`, `73.6`), whole from 100 (`1512`)."""
    ms = 1000 * seconds
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def format_seconds(seconds):
    """`45s`, `3m 20s`, `1h 05m`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m" if rest == 0 else f"{minutes}m {rest:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
