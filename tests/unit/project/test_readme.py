"""The README is the front page: short, the two quick-start commands CI and users rely on,
and links that lead somewhere."""

from __future__ import annotations

import re

from support import ROOT

README = ROOT / "README.md"


def test_the_readme_is_a_front_page_of_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_keeps_the_two_quick_start_commands():
    text = README.read_text()
    assert "pip install -e '.[train]' && dvc repro\n" in text
    assert "bash tests/run.sh\n" in text
    assert (ROOT / "tests/run.sh").is_file()


def test_every_relative_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert relative, "no links to the documentation"
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, f"README links to files that are not there: {missing}"
