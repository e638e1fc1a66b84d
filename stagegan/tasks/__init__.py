"""Task registry: built-in tasks by name, or any `package.module:factory` path.

A factory is called as `factory(options, rngs)` and returns a `stagegan.tasks.base.Task`;
a Task subclass is itself such a factory.
"""

from stagegan.config.objects import (  # noqa: F401
    REGISTERED,
    call_user,
    load_object,
    register_objects,
)
from stagegan.errors import ConfigError

BUILTIN = {
    "mog2d": "stagegan.tasks.mog2d:Mog2D",
    "completion": "stagegan.tasks.completion:Completion",
    "unconditional": "stagegan.tasks.unconditional:Unconditional",
}


def make_task(name, options, rngs):
    """Build the task `name` (built-in or `package.module:factory`)."""
    if ":" in name:
        factory = load_object(name, "task")
    elif name in BUILTIN:
        factory = load_object(BUILTIN[name], "task")
    else:
        raise ConfigError(
            "task",
            f"unknown task {name!r} (built-in: {', '.join(sorted(BUILTIN))}; "
            "or give 'package.module:factory')",
        )
    from stagegan.tasks.base import Task

    if ":" in name:  # a user's factory: whatever it raises is one line naming `task`
        task = call_user("task", name, factory, options, rngs)
    else:
        task = factory(options, rngs)
    if not isinstance(task, Task):
        raise ConfigError(
            "task",
            f"{name!r} returned a {type(task).__name__}, not a stagegan.tasks.base.Task "
            "(subclass Task: the trainer relies on its defaults and declared capabilities)",
        )
    if callable(getattr(task, "evaluate", None)) and not task.metrics:
        raise ConfigError(
            "task",
            f"{name!r} defines evaluate(), which stagegan no longer calls: declare its metrics "
            "with @stagegan.register_metric(name, mode) and list them in the task's `metrics`",
        )
    return task
