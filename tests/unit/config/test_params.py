"""params.yaml's orchestrator section: values checked when read, one message each."""

from __future__ import annotations

import pytest

from orchestrator.config import params
from orchestrator.errors import ConfigError


def test_read_in_place_takes_paths_inside_the_project():
    loaded = params.from_data({"orchestrator": {"read_in_place": ["data/lm/tokens", "corpora"]}}, "params.yaml")
    assert loaded.settings.read_in_place == ("data/lm/tokens", "corpora")


@pytest.mark.parametrize("bad", ["/scratch/corpus", "../elsewhere", "data/../../x", ""])
def test_read_in_place_refuses_paths_outside_it(bad):
    with pytest.raises(ConfigError) as caught:
        params.from_data({"orchestrator": {"read_in_place": [bad]}}, "params.yaml")
    assert f"orchestrator.read_in_place: {bad!r} is not a path inside the project" in caught.value.render()
