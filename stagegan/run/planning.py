"""`stagegan plan`: what each stage and update will train, shown before training."""

from stagegan.core.optimizers import describe
from stagegan.core.precision import loss_scaled, policy_of
from stagegan.core.until import never_checked
from stagegan.core.variables import count_parameters, scope_of
from stagegan.data.sources import tfrecord_label_counts


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


def describe_networks(task, scopes):
    """The plan's lines on each network: its architecture (the task's words for its built-in
    ones) and trainable parameters; the discriminator's packing and spectral norm."""
    words = task.describe_networks()
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
    lines += trainer.task.describe_inputs()
    lines += describe_networks(trainer.task, scopes)
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
        )
        if stage.until is not None:
            lines.append(f"  until: {stage.until.describe()}; at most {stage.steps} steps")
            warning = never_checked(stage)
            if warning is not None:
                lines.append(f"  warning: {warning}")
        lines += describe_augment(stage, config)
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
    source = task.source
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
