"""The documentation builds: `mkdocs build --strict` without a WARNING line (a broken link, a
page missing from the navigation, an API reference that does not resolve, or an API docstring
whose parameters do not match the signature or have no type fails it), and the README's links
into `docs/` reach pages and headings that exist (MkDocs does not read the README)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def slug(heading):
    """MkDocs' (Python-Markdown's toc) anchor of a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page):
    lines, fence, found = page.read_text(encoding="utf-8").splitlines(), False, set()
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"^#{1,6} ", line):
            found.add(slug(line.lstrip("#")))
    return found


def test_the_site_builds_in_strict_mode_without_a_warning(tmp_path):
    """Not quiet (`-q` hides the warnings): a docstring that names a parameter the signature
    lacks, or one without a type, is a WARNING line, which fails the test."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert not warnings, "\n".join(warnings)
    assert result.returncode == 0, output
    assert "Documentation built" in output  # the build's own INFO lines were seen
    assert (tmp_path / "api" / "index.html").read_text().count('id="stagegan.api.train"') == 1


def test_every_page_is_in_the_navigation_and_the_readme_links_resolve():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = {page for entry in nav for page in entry.values()}
    assert listed == {p.name for p in (ROOT / "docs").glob("*.md")}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", readme)
    assert len(links) >= 8
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file(), target
        if anchor:
            assert anchor in anchors(page), f"{target}#{anchor}"
    assert len(readme.splitlines()) < 400  # a README of a few hundred lines; docs/ has the rest
