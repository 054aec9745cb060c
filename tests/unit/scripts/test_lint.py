"""Checks of rendered scripts (orchestrator/scripts/lint.py, matrix.check_rendered): bash -n
per script, and shellcheck required unless skipped."""

from fakes import NoShellcheck

from orchestrator.scripts import lint, matrix
from orchestrator.util.runner import SubprocessRunner


def test_check_fails_without_shellcheck_unless_skipped(project, monkeypatch):
    rendered = matrix.render_matrix(project, "lumi", SubprocessRunner())
    assert any("shellcheck is not installed" in p for p in matrix.check_rendered(rendered, NoShellcheck()))
    assert matrix.check_rendered(rendered, NoShellcheck(), shellcheck=False) == []


def test_bash_syntax_errors_are_attributed_to_their_script():
    scripts = {"a.sh": "echo 'unclosed\n", "b.sh": "echo fine\n", "c.sh": "echo 'also unclosed\n"}
    problems = lint.bash_problems(scripts, SubprocessRunner())
    # a.sh and c.sh's quotes would pair up in one file; the batch check still catches both
    assert [p.split(":")[0] for p in problems] == ["bash -n a.sh", "bash -n c.sh"]
    assert lint.bash_problems({"ok.sh": "echo ok\n"}, SubprocessRunner()) == []
