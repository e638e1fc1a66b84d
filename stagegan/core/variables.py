"""Variable selection: glob patterns over Keras variable paths, and the scope partition.

Every trainable variable of a task's networks must live under exactly one top-level scope
(`generator/...`, `discriminator/...`). Patterns are matched with `fnmatch`, where `*` also
crosses `/`: `generator/*` selects every generator variable.
"""

import fnmatch
import re

from stagegan.errors import ConfigError


def scope_of(variable):
    """The top-level scope of a Keras variable: `generator` for `generator/dense/kernel`."""
    return variable.path.split("/", 1)[0]


def check_partition(networks):
    """Check that the networks' trainable variables split cleanly into top-level scopes.

    Args:
        networks: mapping of scope name to Keras model; each model's variables must have paths
            under `<scope>/` (build functional models inside `keras.name_scope(scope)`).

    Returns:
        All trainable variables, in network order, each exactly once.

    Raises:
        ConfigError: listing the variables that sit outside their network's scope, that belong
            to two networks, or whose paths collide.
    """
    owner, by_path, ordered = {}, {}, []
    outside, shared, collisions = [], [], []
    for scope, network in networks.items():
        for variable in network.trainable_variables:
            if id(variable) in owner:
                shared.append(f"{variable.path} ({owner[id(variable)]} and {scope})")
                continue
            owner[id(variable)] = scope
            if scope_of(variable) != scope:
                outside.append(f"{variable.path} (in network {scope!r})")
            if variable.path in by_path:
                collisions.append(variable.path)
            by_path[variable.path] = variable
            ordered.append(variable)
    if shared:
        raise ConfigError("task", f"variables belong to two networks: {', '.join(shared)}")
    if outside:
        raise ConfigError(
            "task",
            "variables outside their network's scope (build functional models inside "
            f"keras.name_scope(<scope>)): {', '.join(outside[:5])}"
            + (f" and {len(outside) - 5} more" if len(outside) > 5 else ""),
        )
    if collisions:
        raise ConfigError(
            "task", f"two variables share a path: {', '.join(sorted(set(collisions)))}"
        )
    return ordered


def select_variables(patterns, variables, key):
    """The variables whose path matches any of `patterns`, in their original order.

    Args:
        patterns: glob patterns over variable paths.
        variables: candidate variables (trainable variables of all networks).
        key: config key of the patterns, for the error message.

    Returns:
        A list of variables, never empty.

    Raises:
        ConfigError: when a pattern matches no variable; lists the known scopes.
    """
    selected, seen = [], set()
    for pattern in patterns:
        matched = [v for v in variables if fnmatch.fnmatchcase(v.path, pattern)]
        if not matched:
            scopes = sorted({scope_of(v) + "/" for v in variables})
            raise ConfigError(
                key, f"pattern {pattern!r} matches no variable (known scopes: {', '.join(scopes)})"
            )
        for variable in matched:
            if id(variable) not in seen:
                seen.add(id(variable))
                selected.append(variable)
    order = {id(v): i for i, v in enumerate(variables)}
    return sorted(selected, key=lambda v: order[id(v)])


def count_parameters(variables):
    total = 0
    for variable in variables:
        size = 1
        for dim in variable.shape:
            size *= int(dim)
        total += size
    return total


def slug(key):
    """Checkpoint-safe name for a config key: `stages[0].updates[1]` -> `stages_0_updates_1`."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_")


# A checkpoint's names of the networks, the optimizers (`Trainer.trackables`) and the staged
# batch (`core.staging`), made here only.

STAGED_PREFIX = "data_staged_"


def network_key(scope):
    """The checkpoint object name of the network of `scope`."""
    return f"network_{scope}"


def optimizer_key(key):
    """The checkpoint object name of the optimizer of config key `key`."""
    return f"optimizer_{slug(key)}"
