"""The package's layers, checked: each module may import only from its own layer or lower ones,
and the TF-free surface (the config, the run folder and what the CLI reads before it decides to
train) imports no TensorFlow. A new module must be given a layer here."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "stagegan"

# Lowest first. The package's folders are its layers: a module's layer is its folder (or,
# at the top, its name).
LAYERS = {
    "surface": {"errors", "config", "runfolder"},  # TF-free: the schema, the run folder
    "core": {"core"},  # the engine: schedule, replicas and steps, guard, optimizers, ...
    "data": {"data"},
    "evaluation": {"evaluation"},  # evaluation maths, feature extractors, Evaluation
    "tasks": {"tasks"},
    "training": {"training"},  # the Trainer, the loop and its callbacks
    "run": {"run"},  # the run plan, start, resume, warm start, reading run folders
    "doors": {"cli", "api", "__main__", "__init__"},
}
RANK = {module: i for i, modules in enumerate(LAYERS.values()) for module in modules}
NAMES = list(LAYERS)
# Every module of these folders, and these modules, import no TensorFlow.
TF_FREE_FOLDERS = ("config", "runfolder")
TF_FREE_MODULES = (
    "errors", "core.monitor", "core.schedule", "core.until", "core.variables", "run.resume",
    "run.reading", "run.trainplan", "cli.main", "cli.parser", "cli.launch", "api", "__main__",
    "data.records", "data.images",
    "evaluation.registry", "run.compare",
)  # fmt: skip


def modules():
    """`(dotted name below stagegan, path)` of every module of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(parts), path


def layer(name):
    """The layer key of a module's dotted name: its folder, or its own name at the top."""
    return name.split(".")[0]


TF_FREE = sorted([m for m, _ in modules() if layer(m) in TF_FREE_FOLDERS] + list(TF_FREE_MODULES))


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
    unmapped = [name for name, _ in modules() if layer(name) not in RANK]
    assert not unmapped, f"give these folders a layer in {__file__}: {unmapped}"
    upward = []
    for name, path in modules():
        for target in imported(path):
            here, there = RANK[layer(name)], RANK.get(layer(target))
            if there is not None and there > here:
                upward.append(f"{name} ({NAMES[here]}) imports {target} ({NAMES[there]})")
    assert not upward, "\n".join(upward)


def test_the_folders_are_the_layers():
    """No module left at the top but the doors and the errors; every folder a layer."""
    top = sorted(m for m, p in modules() if p.parent == PACKAGE)
    assert top == ["__init__", "__main__", "api", "errors"]
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert all(f in RANK for f in folders), folders


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
    path.write_text("def f():\n    from stagegan.training.loop import train\n")
    assert list(imported(path)) == ["training.loop"]
    assert RANK[layer("training.loop")] > RANK[layer("core.steps")]
