"""The hostile classes of the params issue, each a property at its boundary: any cluster name
(refused unless one, nothing written or sent), any edit made while switched (refused naming it,
never dropped), any damage to params.yaml (one message or a faithful switch, never a
traceback), and any leading assignments of a wrapped stage (they reach the program)."""

from __future__ import annotations

import subprocess

from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main
from orchestrator.config import params, profile
from orchestrator.pipeline import wrap

BASE = (
    "# params\nlr: 1e-3  # tuned\nmodel:\n  width: 10\n  seeds: [0, 1]\norchestrator:\n  cluster: local\n  account: null\n"
    "clusters:\n  testbed:\n    lr: 3e-4\n    model:\n      seeds: [2]\n    orchestrator:\n      account: project_465000858\n"
)
ONE_DIR = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def invoke(root, *args):
    return CliRunner().invoke(main, [*args, "--project", str(root)] if args[0] == "use" else list(args))


def one_message(result) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output


@ONE_DIR
@given(name=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20))
def test_any_name_that_is_no_cluster_is_refused_and_nothing_is_written_or_run(tmp_path, name):
    assume(name.strip() and name not in profile.builtin_names() and name != "local" and not name.startswith("-"))
    assume("/" not in name and not name.endswith((".yaml", ".yml")))  # a profile file's path: its own tests
    (tmp_path / "params.yaml").write_text(BASE)
    one_message(invoke(tmp_path, "use", name))
    one_message(CliRunner().invoke(main, ["exp", "run", "--cluster", name, "--print", "--project", str(tmp_path)]))
    assert (tmp_path / "params.yaml").read_text() == BASE


# An edit made while switched: (where, the line as the switch wrote it, the line edited).
EDITS = [
    ("here", "lr: 3e-4  # tuned", "lr: {v}  # tuned"),
    ("entry", "    lr: 3e-4\n", "    lr: {v}\n"),
    ("here", "  seeds: [2]", "  seeds: [{v}]"),
    ("entry", "      seeds: [2]", "      seeds: [{v}]"),
]


@ONE_DIR
@given(edit=st.sampled_from(EDITS), value=st.integers(3, 10**6), target=st.sampled_from(["local", "testbed"]))
def test_any_edit_made_while_switched_is_refused_naming_it_never_dropped(tmp_path, edit, value, target):
    (tmp_path / "params.yaml").write_text(BASE)
    assert invoke(tmp_path, "use", "testbed").exit_code == 0
    _, old, new = edit
    switched = (tmp_path / "params.yaml").read_text()
    assert old in switched
    edited = switched.replace(old, new.format(v=value), 1)
    (tmp_path / "params.yaml").write_text(edited)
    result = invoke(tmp_path, "use", target)
    one_message(result)
    assert "differ from clusters.testbed" in result.output and str(value) in result.output
    assert (tmp_path / "params.yaml").read_text() == edited  # the edit is there still


@ONE_DIR
@given(
    at=st.integers(0, len(BASE)),
    cut=st.integers(0, 8),
    junk=st.lists(st.sampled_from(list("\t\n :-#&*![]{}'\"|>~@`%,?\\") + ["\r\n", "\ufeff", "é", "0", "a"]), max_size=6).map("".join),
)
def test_any_damage_to_params_yaml_is_one_message_or_a_faithful_switch(tmp_path, at, cut, junk):
    damaged = BASE[:at] + junk + BASE[at + cut :]
    (tmp_path / "params.yaml").write_bytes(damaged.encode())
    result = invoke(tmp_path, "use", "testbed")
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit), result.output
    if result.exit_code != 0:
        one_message(result)
        assert (tmp_path / "params.yaml").read_bytes() == damaged.encode()
        return
    back = invoke(tmp_path, "use", "local")
    assert back.exit_code == 0, back.output
    section = params.from_text(damaged, "params.yaml").data.get("orchestrator") or {}
    if section.get("cluster", "local") == "local":  # else the way back is to that cluster
        assert (tmp_path / "params.yaml").read_bytes() == damaged.encode()


@given(
    names=st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=3, unique=True),
    values=st.lists(st.text(st.characters(codec="ascii", min_codepoint=32, max_codepoint=126), max_size=8), min_size=3, max_size=3),
)
def test_any_leading_assignments_of_a_wrapped_command_reach_the_program(names, values):
    """What `init --wrap` makes of `A=x B=y python3 ...`: the words after `--` start as a program
    (`orchestrator run` execs them), and each variable reaches it with the value the shell gave it."""
    import shlex

    assignments = " ".join(f"{n}={shlex.quote(v)}" for n, v in zip(names, values, strict=False))
    show = "; ".join(f"print(repr(__import__('os').environ[{n!r}]))" for n in names)
    cmd = f'{assignments} python3 -c "{show}"'
    after = wrap.wrapped(cmd).removeprefix(wrap.PREFIX).strip()
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {after}"], capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    out = subprocess.run(words, capture_output=True, text=True, check=True).stdout  # as `orchestrator run` starts them
    assert out.splitlines() == [repr(v) for v in values[: len(names)]]


@ONE_DIR
@given(
    hops=st.lists(st.tuples(st.sampled_from(["inside", "outside"]), st.booleans()), min_size=1, max_size=3),
    exists=st.booleans(),
)
def test_any_chain_of_links_is_written_through_inside_the_project_only(tmp_path_factory, hops, exists):
    """params.yaml a link, through 1 to 3 hops (each inside or outside the project, relative or
    absolute), to a file or to nothing: `use` edits the file the chain ends at when that is in the
    project, else refuses with one message, and nothing outside the project is written or made."""
    import os

    base = tmp_path_factory.mktemp("links")
    project, outside = base / "p", base / "elsewhere"
    project.mkdir()
    outside.mkdir()
    link = project / "params.yaml"
    for n, (where, relative) in enumerate(hops):
        folder = project / "sub" if where == "inside" else outside
        folder.mkdir(exist_ok=True)
        target = folder / f"hop{n}.yaml"
        link.symlink_to(os.path.relpath(target, link.parent) if relative else target)
        link = target
    if exists:
        link.write_text(BASE)
    final = link.resolve()
    before = {p: p.read_bytes() for p in base.rglob("*") if p.is_file() and not p.is_symlink()}
    result = invoke(project, "use", "testbed")
    after = {p: p.read_bytes() for p in base.rglob("*") if p.is_file() and not p.is_symlink()}
    inside = project.resolve() in final.parents
    if inside and exists:
        assert result.exit_code == 0, result.output
        assert after.keys() == before.keys() and (project / "params.yaml").is_symlink()
        assert {p for p in after if after[p] != before[p]} == {final}
    else:
        one_message(result)
        assert after == before
