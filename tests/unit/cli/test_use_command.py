"""`orchestrator use NAME` and `orchestrator exp run --cluster NAME --print`: params.yaml switched, comments kept, nothing half-written."""

from __future__ import annotations

import shlex

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import main

PARAMS = """\
# the base: what a workstation runs
orchestrator:
  cluster: local   # switched by `orchestrator use`
  account: p1
  image: none
lm:
  models: [tiny]   # tiny on a laptop
  steps: 30
  cfgs:
    - {n: 1}
clusters:
  lumi:
    orchestrator: {image: lumi}
    lm: &big
      models: [large]
      steps: 2000
  frontier:
    orchestrator: {account: abc}
    lm: *big
"""


def use(project, *args):
    return CliRunner().invoke(main, ["use", *args, "--project", str(project)])


def test_use_writes_the_values_and_keeps_the_comments(tmp_path):
    (tmp_path / "params.yaml").write_text(PARAMS)
    result = use(tmp_path, "lumi")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "params.yaml").read_text()
    assert "# the base: what a workstation runs" in text and "# tiny on a laptop" in text
    data = yaml.safe_load(text)
    assert data["orchestrator"] == {"cluster": "lumi", "account": "p1", "image": "lumi"}
    assert data["lm"] == {"models": ["large"], "steps": 2000, "cfgs": [{"n": 1}]}
    assert data["clusters"]["local"] == {"orchestrator": {"image": "none"}, "lm": {"models": ["tiny"], "steps": 30}}
    assert data["clusters"]["frontier"]["lm"] == {"models": ["large"], "steps": 2000}  # the alias still the anchor's
    # and back: the base's values, every one
    assert use(tmp_path, "local").exit_code == 0
    back = yaml.safe_load((tmp_path / "params.yaml").read_text())
    original = yaml.safe_load(PARAMS)
    assert {k: v for k, v in back.items() if k != "clusters"} == {k: v for k, v in original.items() if k != "clusters"}
    again = use(tmp_path, "local")
    assert again.exit_code == 0 and "already holds local's values" in again.output


def test_bad_input_is_one_message_and_nothing_written(tmp_path):
    for bad in (
        PARAMS.replace("  frontier:", "  lumii:"),
        PARAMS.replace("steps: 2000", "steps: '2000'"),
    ):
        (tmp_path / "params.yaml").write_text(bad)
        result = use(tmp_path, "lumi")
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and result.output.count("error:") == 1
        assert (tmp_path / "params.yaml").read_text() == bad
        assert [p.name for p in tmp_path.iterdir()] == ["params.yaml"]  # no temporary file left


@pytest.mark.parametrize(
    "text",
    [
        "orchestrator: {cluster: local, account: null}\n",
        "orchestrator:\n  cluster: local\n  account:\n",
        "orchestrator:\n  cluster: local\n  account: ~\n",
    ],
)
def test_use_without_a_clusters_entry_changes_the_cluster_only_keeping_a_null_account_as_written(tmp_path, text):
    (tmp_path / "params.yaml").write_text(text)
    result = use(tmp_path, "testbed")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "params.yaml").read_text() == text.replace("local", "testbed")  # the key kept, its null spelled as it was
    assert use(tmp_path, "local").exit_code == 0
    assert (tmp_path / "params.yaml").read_text() == text


def test_a_null_the_switch_keeps_is_kept_as_written_and_put_back_so(tmp_path):
    """The kept copy spells a value as the file does (`account:`, `~`), and the way back gives the very bytes."""
    entry = "clusters:\n  testbed:\n    orchestrator:\n      account: project_465000858\n"
    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: local\n  account:\n  image: ~\n" + entry)
    assert use(tmp_path, "testbed").exit_code == 0
    switched = (tmp_path / "params.yaml").read_text()
    assert switched == (
        "orchestrator:\n  cluster: testbed\n  account: project_465000858\n  image: ~\n"
        + entry
        + "  local:  # added by orchestrator use; use local removes it\n    orchestrator:\n      account:\n"
    )
    assert use(tmp_path, "local").exit_code == 0
    assert (tmp_path / "params.yaml").read_text() == "orchestrator:\n  cluster: local\n  account:\n  image: ~\n" + entry


def test_exp_run_prints_dvc_exp_run_with_the_values(tmp_path):
    (tmp_path / "params.yaml").write_text(PARAMS)
    result = CliRunner().invoke(main, ["exp", "run", "--cluster", "lumi", "--print", "--project", str(tmp_path), "-n", "on-lumi"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "dvc exp run -n on-lumi -S orchestrator.cluster=lumi -S orchestrator.image=lumi -S 'lm.models=[large]' -S lm.steps=2000"
    )
    assert (tmp_path / "params.yaml").read_text() == PARAMS


@pytest.mark.parametrize("argv", [["use", "nosuchcluster"], ["exp", "run", "--cluster", "nosuch", "--print"]])
def test_an_unknown_cluster_is_refused_with_the_valid_ones_and_nothing_written(tmp_path, argv):
    (tmp_path / "params.yaml").write_text(PARAMS)
    result = CliRunner().invoke(main, [*argv, "--project", str(tmp_path)])
    assert result.exit_code == 2 and "unknown cluster" in result.output and "built-in profiles: " in result.output, result.output
    assert "Traceback" not in result.output and (tmp_path / "params.yaml").read_text() == PARAMS


def test_exp_runs_own_options_are_its_own_wherever_they_stand(tmp_path):
    """`--print` (or `--cluster`) after a DVC argument is still ours: nothing runs."""
    (tmp_path / "params.yaml").write_text(PARAMS)
    result = CliRunner().invoke(main, ["exp", "run", "--project", str(tmp_path), "-n", "on-lumi", "--cluster=lumi", "--print"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("dvc exp run -n on-lumi -S orchestrator.cluster=lumi ") and "--print" not in result.output
    from orchestrator.cli.use import _own_options

    # After `--` every word is DVC's, as written.
    assert _own_options(("-n", "x", "--", "--print", "--cluster", "c")) == (("-n", "x", "--", "--print", "--cluster", "c"), {})
    assert _own_options(("--project", "p", "-n", "x")) == (("-n", "x"), {"project": "p"})


def test_a_users_own_set_of_a_key_the_cluster_sets_wins_and_is_said(tmp_path):
    (tmp_path / "params.yaml").write_text(PARAMS)
    result = CliRunner().invoke(main, ["exp", "run", "--cluster", "lumi", "--print", "--project", str(tmp_path), "-S", "lm.steps=5"])
    assert result.exit_code == 0, result.output
    assert "your -S lm.steps=... wins over lumi's (lm.steps=2000)" in result.output
    assert result.output.strip().splitlines()[-1] == (
        "dvc exp run -S lm.steps=5 -S orchestrator.cluster=lumi -S orchestrator.image=lumi -S 'lm.models=[large]'"
    )


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_use_follows_a_params_link_inside_the_project_and_refuses_one_leading_out(tmp_path, where):
    root, outside = tmp_path / "p", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    target = (root if where == "inside" else outside) / "shared-params.yaml"
    target.write_text(PARAMS)
    (root / "params.yaml").symlink_to(target)
    result = use(root, "lumi")
    if where == "inside":
        assert result.exit_code == 0, result.output
        assert (root / "params.yaml").is_symlink() and yaml.safe_load(target.read_text())["lm"]["steps"] == 2000
    else:
        assert result.exit_code == 2 and "outside the project" in result.output, result.output
        assert (root / "params.yaml").is_symlink() and target.read_text() == PARAMS


@pytest.mark.parametrize(("flags", "put_back"), [((), False), (("--temp",), True), (("--queue",), True)])
def test_exp_run_switches_params_yaml_for_values_s_cannot_carry(tmp_path, flags, put_back):
    """A dotted key (no -S override can name it) or any ${...} in the file (DVC's -S would expand
    it): the experiment runs with params.yaml switched as `use` switches it."""
    text = "orchestrator:\n  cluster: local\n'a.b': 1\nnote: ${oc.env:TOKEN}\nclusters:\n  lumi:\n    'a.b': 2\n"
    (tmp_path / "params.yaml").write_text(text)
    args = ["exp", "run", "--cluster", "lumi", "--print", "--project", str(tmp_path), "-n", "x", *flags]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    command = shlex.join(["dvc", "exp", "run", "-n", "x", *flags])
    assert result.output.strip() == f"orchestrator use lumi && {command}" + ("  # params.yaml put back as it was after" if put_back else "")
    assert (tmp_path / "params.yaml").read_text() == text
    refused = CliRunner().invoke(main, [*args, "-S", "note=x"])
    assert refused.exit_code == 2 and "holds ${...}, which DVC's -S resolves" in refused.output
