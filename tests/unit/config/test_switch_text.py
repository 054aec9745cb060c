"""`orchestrator use` as an editor of the user's params.yaml: a switch and its way back give the
file's very bytes (spelling of numbers, quotes, comments, flow and block lists, anchors and
merge keys, CRLF, a BOM), or the switch is refused with nothing written; DVC's own reader takes
every switched value as the cluster's entry has it. Edits made while switched are refused,
naming them, never dropped; a cluster name set back by hand is caught."""

from __future__ import annotations

import pytest
from dvc.utils.serialize import parse_yaml
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.config import params, switching
from orchestrator.errors import ConfigError

# Values as people spell them, by the kind DVC reads them as (YAML 1.2): a cluster's value must
# have the kind of the one it replaces.
SPELLED = {
    "number": ["1e-3", "0.001", "3e-4", "1_000", "0o17", "017", "0x1F", ".5", "-2", "+3", ".inf", "1.0e+3", "42"],
    "text": ["on", "yes", "1:30", "'\\w+'", '"say \\"hi\\""', "plain text", "'it''s'", '"é ü"', "\\w+", "'3e-4'", "x#y"],
    "boolean": ["true", "false", "True"],
    "list": ["[0, 1]", "[]", "[a, 'b c']", "BLOCK", "COMPACT"],
}
NULLS = ["~", "null", ""]


@st.composite
def files(draw):
    """A params.yaml with top-level and nested values of every spelling, with comments, an
    anchor, an alias and a merge key, and clusters.testbed changing some of them."""
    lines, overlay = ["# my project's params"], []
    for group in ("", "group"):
        mine: list[str] = []
        theirs: list[str] = []
        indent = 2 if group else 0
        for i in range(draw(st.integers(0 if group else 1, 4))):
            kind = draw(st.sampled_from(sorted(SPELLED)))
            value = draw(st.sampled_from(SPELLED[kind] + (NULLS if kind != "list" else [])))
            comment = draw(st.sampled_from(["", "  # why", " # it's tuned"]))
            mine += _entry(f"k{i}", value, indent, comment)
            if draw(st.booleans()):
                theirs += _entry(f"k{i}", draw(st.sampled_from(SPELLED[kind])), indent + 4, "")
        lines += ([f"{group}:"] if group and mine else []) + mine
        overlay += ([f"    {group}:"] if group and theirs else []) + theirs
    if draw(st.booleans()):
        lines += ["defaults: &d {wd: 0, seed: 1}", "merged:", "  <<: *d", "  depth: 2"]
        if draw(st.booleans()):
            overlay += ["    merged:", "      seed: 7"]
    account = draw(st.sampled_from(["null", "p1", "'p1'", ""]))
    lines += ["orchestrator:", "  cluster: local  # switched by orchestrator use", f"  account: {account}".rstrip()]
    if not overlay or draw(st.booleans()):
        overlay += ["    orchestrator:", "      account: project_465000858"]
    text = "\n".join([*lines, "clusters:", "  testbed:", *overlay]) + "\n"
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.booleans()):
        text = "\ufeff" + text
    return text


def _entry(key: str, value: str, indent: int, comment: str) -> list[str]:
    pad = " " * indent
    if value == "BLOCK":
        return [f"{pad}{key}:{comment}", f"{pad}  - 1", f"{pad}  - 2"]
    if value == "COMPACT":
        return [f"{pad}{key}:{comment}", f"{pad}- a", f"{pad}- b"]
    return [f"{pad}{key}: {value}{comment}" if value else f"{pad}{key}:{comment}"]


def _switched_values_are_the_entrys(original: str, switched: str) -> None:
    """DVC's reader takes each value the entry sets as the entry has it, of its type."""
    before, after = parse_yaml(original.lstrip("\ufeff"), "params.yaml"), parse_yaml(switched.lstrip("\ufeff"), "params.yaml")
    for key, value in params._leaves(before["clusters"]["testbed"]):
        assert params.same(params._get(after, key), value), (key, value, params._get(after, key))


@given(files())
def test_a_switch_and_its_way_back_give_the_very_bytes_or_are_refused(text):
    try:
        there = switching.written(text, "testbed")
    except ConfigError:
        return  # refused: `use` writes nothing then (test_a_refused_switch_writes_nothing)
    _switched_values_are_the_entrys(text, there.text)
    back = switching.written(there.text, "local")
    assert back.text == text


@pytest.mark.parametrize(
    "text",
    [
        "lr: 1e-3  # tuned\nflag: on\nwindow: 1:30\nrx: '\\w+'\norchestrator:\n  cluster: local\nclusters:\n  testbed:\n    lr: 3e-4\n",
        "\ufefflr: 0.001\r\ndevices: [0, 1]\r\norchestrator: {cluster: local}\r\nclusters:\r\n  testbed:\r\n    devices:\r\n      - 0\r\n",
        "seeds:\n- 0\norchestrator:\n  cluster: 'local'\nclusters:\n  testbed:\n    seeds: [1, 2]\n",
        "base: &b {lr: 1, wd: 0}\nrun:\n  <<: *b\n  depth: 2\norchestrator:\n  cluster: local\nclusters:\n  testbed:\n    run: {lr: 5}\n",
        "lr: 1e-3\nunused: &u 7\norchestrator:\n  cluster: local\n  account:\nclusters:\n  testbed:\n    lr: 2e-3\n"
        "    orchestrator: {account: p, partition: debug}\n",
    ],
    ids=["yaml-1.2-scalars", "crlf-bom-flow-to-block", "compact-block-quoted-name", "merge-key", "unused-anchor-empty-null-added-key"],
)
def test_files_people_write_switch_and_come_back_byte_for_byte(text):
    there = switching.written(text, "testbed")
    _switched_values_are_the_entrys(text, there.text)
    assert switching.written(there.text, "local").text == text


def test_what_the_switch_keeps_is_spelled_as_the_file_spells_it():
    text = "lr: 1e-3  # tuned\norchestrator:\n  cluster: local\nclusters:\n  testbed:\n    lr: 3e-4\n"
    there = switching.written(text, "testbed").text
    assert there == (
        "lr: 3e-4  # tuned\norchestrator:\n  cluster: testbed\nclusters:\n  testbed:\n    lr: 3e-4\n"
        f"  local:  {switching.MARK}\n    lr: 1e-3\n"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("shared: &s {lr: 1}\nalso: *s\norchestrator:\n  cluster: local\nclusters:\n  testbed:\n    shared: {lr: 2}\n", "alias"),
        ("lr: 1\norchestrator: {cluster: local}\nclusters: {testbed: {lr: 2}}\n", "flow style"),
        ("lr: 1\nother:\n  x: 1\n  x: 2\norchestrator: {cluster: local}\nclusters:\n  testbed: {lr: 2}\n", "found the key 'x' twice"),
    ],
    ids=["alias-shared-with-a-value-it-changes", "flow-clusters-gets-no-entry", "a-key-twice-in-an-entry-it-does-not-touch"],
)
def test_what_cannot_be_switched_faithfully_is_refused(text, said):
    with pytest.raises(ConfigError, match=said):
        switching.written(text, "testbed")


BASE = "lr: 1e-3\norchestrator:\n  cluster: local\nclusters:\n  testbed:\n    lr: 3e-4\n"


@pytest.mark.parametrize("edited", ["lr: 3e-4\norchestrator", "    lr: 3e-4\n"])
def test_an_edit_made_while_switched_is_refused_naming_it_not_dropped(edited):
    there = switching.written(BASE, "testbed").text
    changed = there.replace(edited, edited.replace("3e-4", "5e-4"), 1)
    assert changed != there
    for target in ("local", "testbed"):
        with pytest.raises(ConfigError, match=r"lr: 0.000[35] here, 0.000[35] in clusters.testbed") as err:
            switching.written(changed, target)
        assert "write the value testbed should run with in both places" in err.value.render()
    with pytest.raises(ConfigError, match="one or the other was edited"):
        params.require_switched(params.from_text(changed, "params.yaml"), "testbed", "run")


def test_a_cluster_name_set_back_by_hand_is_caught_and_the_kept_values_stay():
    there = switching.written(BASE, "testbed").text
    by_hand = there.replace("cluster: testbed", "cluster: local")
    for attempt in (lambda: switching.written(by_hand, "local"), lambda: switching.written(by_hand, "testbed")):
        with pytest.raises(ConfigError, match="orchestrator.cluster was changed by hand") as err:
            attempt()
        assert "set orchestrator.cluster back to testbed" in err.value.render()
    with pytest.raises(ConfigError, match="changed by hand"):
        params.require_switched(params.from_text(by_hand, "params.yaml"), "local", "run")
    # set back as the message says, the way back is the original file
    assert switching.written(by_hand.replace("cluster: local", "cluster: testbed"), "local").text == BASE


def test_a_name_set_by_hand_without_a_switch_is_switched_from_the_files_values():
    named = BASE.replace("cluster: local", "cluster: testbed")  # as `dvc exp run -S orchestrator.cluster=testbed` writes it
    there = switching.written(named, "testbed").text
    assert parse_yaml(there, "p")["lr"] == 3e-4 and "local:" in there
    assert switching.written(there, "local").text == BASE


def test_a_refused_switch_writes_nothing(tmp_path):
    from click.testing import CliRunner

    from orchestrator.cli import main

    text = "shared: &s {lr: 1}\nalso: *s\norchestrator:\n  cluster: local\nclusters:\n  testbed:\n    shared: {lr: 2}\n"
    (tmp_path / "params.yaml").write_text(text)
    result = CliRunner().invoke(main, ["use", "testbed", "--project", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output and result.output.count("error:") == 1
    assert (tmp_path / "params.yaml").read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["params.yaml"]
