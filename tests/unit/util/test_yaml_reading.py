"""YAML read as DVC will read it where the two could part: a key written twice (PyYAML keeps
the last, DVC refuses the file) and nesting deep enough to end DVC's recursive reader. Each is
one message and exit status 2 in the commands that read the user's files, nothing written."""

from __future__ import annotations

import pytest
from support import dvc_init, invoke

from orchestrator.errors import ConfigError
from orchestrator.util import yamlio

DEEP_BLOCK = "x:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(400)) + "  " * 401 + "v: 1\n"
DEEP_FLOW = "x: " + "[" * 400 + "]" * 400 + "\n"


def test_a_key_twice_is_refused_naming_it_and_merge_keys_still_merge():
    with pytest.raises(ConfigError, match=r"params.yaml is not valid YAML at line 3, column 1: found the key 'lr' twice"):
        yamlio.load_text("orchestrator: {}\nlr: 1\nlr: 2\n", "params.yaml")
    with pytest.raises(ConfigError, match="found the key 'a' twice"):
        yamlio.load_text("x: {a: 1, a: 2}\n", "params.yaml")
    base = "base: &b {lr: 1, wd: 0}\nrun:\n  <<: *b\n  <<: {seed: 3}\n  lr: 2\n"  # a merge key, and a key it merges overridden
    assert yamlio.load_text(base, "params.yaml")["run"] == {"lr": 2, "wd": 0, "seed": 3}


@pytest.mark.parametrize("text", [DEEP_BLOCK, DEEP_FLOW])
def test_nesting_past_the_limit_is_refused_and_a_deep_file_a_person_writes_is_not(text):
    with pytest.raises(ConfigError, match=f"params.yaml is refused: it nests deeper than {yamlio.MAX_DEPTH} levels"):
        yamlio.load_text(text, "params.yaml")
    fine = "x: " + "[" * 50 + "]" * 50 + "\n"
    data = yamlio.load_text(fine, "params.yaml")["x"]
    for _ in range(49):
        (data,) = data
    assert data == []


DUPLICATE = ("params.yaml", "orchestrator:\n  cluster: local\nlr: 1\nlr: 2\n", "found the key 'lr' twice")
DEEP_PARAMS = ("params.yaml", "orchestrator:\n  cluster: local\n" + DEEP_BLOCK, "nests deeper than")
DEEP_PIPELINE = ("dvc.yaml", "stages:\n  s:\n    cmd: echo\nvars:\n  - " + DEEP_FLOW, "nests values too deep for DVC's reader")


@pytest.mark.parametrize(
    ("command", "case"),
    [
        (["use", "lumi"], DUPLICATE),
        (["use", "lumi"], DEEP_PARAMS),
        (["render"], DUPLICATE),
        (["render"], DEEP_PARAMS),
        (["render"], DEEP_PIPELINE),
    ],
)
def test_use_and_render_say_it_in_one_message_and_write_nothing(tmp_path, command, case):
    file, text, said = case
    dvc_init(tmp_path, scm=False)
    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: local\n")
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: echo\n")
    (tmp_path / file).write_text(text)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    done = invoke(*command, "--project", str(tmp_path))
    assert done.exit_code == 2 and said in done.output and "Traceback" not in done.output, done.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
