"""The package's layers, checked: each module may import only from its own layer or lower ones,
and the TF-free surface (the config, the run folder and what the CLI reads before it decides to
train) imports no TensorFlow. A new module must be given a layer here."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "stagegan"

# Lowest first. Every module of the package is in exactly one layer.
LAYERS = {
    # TF-free: config records, schedules, the run folder's files, messages
    "surface": {
        "errors", "config", "rundirs", "memory", "cluster", "schedule", "variables", "until",
        "checkpoints", "logs", "pictures", "samples", "resources",
    },
    # the engine: replicas and steps, the guard, precision, optimizers, EMA, placement, staging
    "core": {
        "replicas", "steps", "guard", "precision", "optimizers", "ema", "placement", "staging",
        "layers", "losses", "augment", "regularisers",
    },
    "data": {"data", "prepare"},
    "measures": {"metrics", "realism", "shapes_net"},  # evaluation maths, feature extractors
    "tasks": {"tasks", "tasks.base", "tasks.completion", "tasks.mog2d", "tasks.unconditional"},
    "evaluation": {"evaluation"},
    "training": {"training", "loop"},
    "run": {"runner", "runs", "resume", "warmstart", "planning", "trainplan"},  # runs
    "doors": {"cli", "api", "__main__", "launch", "__init__"},
}  # fmt: skip
RANK = {module: i for i, modules in enumerate(LAYERS.values()) for module in modules}
NAMES = list(LAYERS)
TF_FREE = sorted(
    LAYERS["surface"] | {"resume", "runs", "trainplan", "cli", "launch", "api", "__main__"}
)


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield ("tasks" if parts == ("tasks", "__init__") else ".".join(parts)), path


def imported(path):
    """The stagegan modules a file imports, at any depth (functions' imports too)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("stagegan"):
            base = node.module.removeprefix("stagegan").removeprefix(".")
            yield from [base] if base else [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("stagegan."):
                    yield alias.name.removeprefix("stagegan.")


def test_every_module_has_a_layer_and_imports_no_higher_one():
    unmapped = [name for name, _ in modules() if name not in RANK]
    assert not unmapped, f"give these modules a layer in {__file__}: {unmapped}"
    upward = []
    for name, path in modules():
        for target in imported(path):
            target = target if target in RANK else target.split(".")[0]
            if target in RANK and RANK[target] > RANK[name]:
                upward.append(
                    f"{name} ({NAMES[RANK[name]]}) imports {target} ({NAMES[RANK[target]]})"
                )
    assert not upward, "\n".join(upward)


def test_the_surface_imports_no_tensorflow():
    code = (
        "import sys\n"
        + "".join(f"import stagegan.{m}\n" for m in TF_FREE)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_rule_can_fail(tmp_path):
    """The checker sees an upward import inside a function."""
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from stagegan.loop import train\n")
    assert list(imported(path)) == ["loop"]
