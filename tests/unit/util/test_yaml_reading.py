"""YAML read as DVC will read it where the two could part: a key written twice (PyYAML keeps
the last, DVC refuses the file) and nesting deep enough to end DVC's recursive reader. Each is
one message and exit status 2 in the commands that read the user's files, nothing written."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import dvc_init, examples, invoke

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


SCALAR_PARTS = ["0", "1", "7", "9", "17", ".", "e", "E", "-", "+", "_", ":", "o", "x", "b", "inf", "nan", "Inf", "~", "null", "on"]
SCALAR_PARTS += ["off", "yes", "no", "y", "n", "true", "False", "TRUE", "0x", "0o", "0b", "1e-3", "3e-4", "1:30", "2024-01-01", "a", " "]


@settings(max_examples=examples(400), deadline=None)
@given(parts=st.lists(st.sampled_from(SCALAR_PARTS), min_size=1, max_size=5))
def test_every_plain_scalar_reads_as_dvc_reads_it(parts):
    """params.yaml's values as the tool reads them are what DVC's own reader (ruamel, YAML 1.2)
    gives, type and value, and what the tool writes reads back the same in DVC."""
    from dvc.utils.serialize import parse_yaml

    text = f"k: {''.join(parts).strip()}\n"
    try:
        dvc = parse_yaml(text, "params.yaml")
    except Exception:  # noqa: BLE001 - not YAML to DVC: then not to the tool either
        with pytest.raises(ConfigError):
            yamlio.load_text(text, "params.yaml")
        return
    ours = yamlio.load_text(text, "params.yaml")
    assert repr(ours) == repr(dvc), text  # repr: nan == nan, and 1 (int) != 1.0 (float)
    assert repr(parse_yaml(yamlio.dump(ours), "params.yaml")) == repr(dvc)
