"""docs/recipes.md, the recipe book: one card per preset in configs/, each card's commands ones
that `train` parses and whose config and `--set` flags validate, and every study a card links
to (benchmarks/results/, outside what `mkdocs build --strict` checks) there, with its
headings, pictures and links back."""

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from clihelp import inprocess
from PIL import Image

import stagegan
from stagegan.cli.main import build_parser
from stagegan.config.resources import builtin_names
from stagegan.tasks import make_task
from stagegan.tasks.base import RandomStreams

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "docs" / "recipes.md"
STUDIES = ROOT / "benchmarks" / "results"
FOLDER = "DIR"  # the cards' placeholder: `--set data.path=DIR`


def cards(text):
    """{preset: [argv after `python -m stagegan`, ...]} from each `## `name`` section's
    ```bash blocks."""
    found = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        blocks = re.findall(r"^```bash\n(.*?)^```", body, flags=re.M | re.S)
        found[title.strip().strip("`")] = [
            shlex.split(line)[3:]
            for block in blocks
            for line in block.splitlines()
            if line.startswith("python -m stagegan ")
        ]
    return found


def check(name, argv, folder):
    """The card `name`'s command `argv`: `train`'s parser takes it, it trains that card's
    preset, and its config with its `--set` flags (the placeholder folder replaced by
    `folder`) validates: the config (`stagegan.load`), then the task's own checks of its
    `data`, `model` and `loss` options, what `plan` runs before it builds any network.
    Returns the config's name and the flags.

    Raises:
        stagegan.ConfigError: an unknown preset, or a bad `--set` key or value.
    """
    args = build_parser().parse_args(argv)
    assert args.command == "train", argv
    name_given = args.config or "default"
    assert name_given == name, f"the card {name!r} runs --config {name_given!r}"
    sets = [re.sub(rf"^data\.path={FOLDER}$", f"data.path={folder}", s) for s in args.set]
    config = stagegan.load(name_given, sets)
    options = {"data": config.data, "model": config.model, "loss": config.loss}
    task = make_task(config.task, options, RandomStreams(config.seed))
    task.check(config.stages, config.batch_size, 1)
    return name_given, sets


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """64 PNGs in two subfolders (classes): a batch of every preset, and enough for its
    clusters."""
    root = tmp_path_factory.mktemp("images")
    for i in range(64):
        (root / "ab"[i % 2]).mkdir(exist_ok=True)
        pixels = np.full((40, 40, 3), 4 * i, np.uint8)
        Image.fromarray(pixels).save(root / "ab"[i % 2] / f"{i}.png")
    return root


def test_every_preset_has_one_card_and_every_card_a_command():
    text = RECIPES.read_text(encoding="utf-8")
    found = cards(text)
    assert sorted(found) == builtin_names("configs")
    assert all(found.values()), [name for name, commands in found.items() if not commands]
    assert len(text.splitlines()) <= 400  # a recipe book; the studies are in benchmarks/results


def test_every_command_of_the_cards_validates(folder):
    for name, commands in cards(RECIPES.read_text(encoding="utf-8")).items():
        for argv in commands:
            check(name, argv, folder)


def test_plan_accepts_the_cheapest_card(folder):
    default = cards(RECIPES.read_text(encoding="utf-8"))["default"][0]
    config, sets = check("default", default, folder)
    result = inprocess("plan", "--config", config, *[a for s in sets for a in ("--set", s)])
    assert result.returncode == 0, result.stderr
    assert "stage 0 'alternating'" in result.stdout and "stage 1 'polish'" in result.stdout


@pytest.mark.parametrize(
    "name, flags",
    [
        ("dcgan_folders", "--set data.path=DIR"),  # no such preset
        ("dcgan_folder", "--set data.pth=DIR"),  # no such key
        ("dcgan_folder", "--set stages[5].steps=10"),  # no such stage
        ("dcgan_folder", "--set data.size=many"),  # not a number
        ("dcgan_folder", "--set data.size=48"),  # not a size the networks take
        ("dcgan_folder", "--set model.widht=16"),  # a typo
    ],
)
def test_a_card_with_an_unknown_preset_or_a_bad_key_fails(name, flags, folder):
    card = f"## `{name}`\n\n```bash\npython -m stagegan train --config {name} {flags}\n```\n"
    with pytest.raises(stagegan.ConfigError):
        check(name, cards(card)[name][0], folder)


def github_anchor(heading):
    """The anchor GitHub gives a heading (the studies are read there, not in the site)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def links(page):
    """(target path, anchor or None) of every Markdown link and picture in `page` that is
    not a web address."""
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        if path.startswith("/"):
            resolved = ROOT / path.lstrip("/")
        else:
            resolved = (page.parent / path) if path else page
        yield resolved.resolve(), anchor or None


def test_every_study_is_a_link_from_a_card_and_every_link_of_both_resolves():
    studies = sorted(STUDIES.glob("*.md"))
    assert studies
    linked = set()
    for page in [RECIPES, *studies]:
        for target, anchor in links(page):
            assert target.exists(), f"{page.name}: {target}"
            if anchor and target.suffix == ".md":
                assert anchor in anchors(target), f"{page.name}: {target.name}#{anchor}"
            if page == RECIPES:
                linked.add(target)
    assert not [s.name for s in studies if s.resolve() not in linked]
    for study in studies:  # each says how to reproduce it, and leads back to a card
        text = study.read_text(encoding="utf-8")
        assert "```bash\npython " in text, study.name
        assert "../../docs/recipes.md#" in text, study.name
