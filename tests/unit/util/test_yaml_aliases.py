"""yamlio: aliases are shared values, so a few lines of YAML can stand for a billion values
(billion laughs). Such a document is one ConfigError naming the file; anchors for a few shared
defaults, and any document without aliases, read as before."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.util import yamlio


def laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused():
    with pytest.raises(ConfigError, match=r"params.yaml is refused: its aliases \(\*name\) expand it past 1,000,000 values"):
        yamlio.load_text(laughs(), "params.yaml")


def test_an_alias_that_holds_itself_is_refused():
    with pytest.raises(ConfigError, match="never ends"):
        yamlio.load_text("a: &a [1, *a]\n", "params.yaml")


def test_anchors_for_shared_defaults_and_small_expansions_read_as_before(monkeypatch):
    text = "base: &base {lr: 0.1, seeds: [1, 2]}\nrun1: {<<: *base, lr: 0.2}\nrun2: *base\nstar: '*not an alias*'\n"
    assert yamlio.load_text(text, "p") == {
        "base": {"lr": 0.1, "seeds": [1, 2]},
        "run1": {"lr": 0.2, "seeds": [1, 2]},
        "run2": {"lr": 0.1, "seeds": [1, 2]},
        "star": "*not an alias*",
    }
    assert len(yamlio.load_text(laughs(5), "p")) == 5  # 10,000 values through aliases: allowed
    # The limit scaled down (two million values written out took a minute to read): values written
    # out count for nothing, however many more than the limit.
    monkeypatch.setattr(yamlio, "MAX_ALIASED_VALUES", 20_000)
    big = yamlio.load_text("x: [" + ", ".join(["1"] * 40_000) + "]\n", "p")  # many values written out: no aliases
    assert len(big["x"]) == 40_000
