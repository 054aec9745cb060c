"""Stage commands (orchestrator/pipeline/cmdline.py): plain argv is split as a shell would,
and anything a shell would interpret is refused."""

import shlex
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from orchestrator.pipeline import cmdline


def test_plain_argv_accepts_words_and_quotes():
    cmd = "orchestrator run -N 2 -- python x.py --ds 'a; $(b) `c`' \"it's\" --x=1"
    assert cmdline.split_plain(cmd)[1] == []
    assert shlex.split(cmd)[-3:] == ["a; $(b) `c`", "it's", "--x=1"]


def test_plain_argv_rejects_what_a_shell_would_interpret():
    cases = {
        "a; b": "';'",
        "a && b": "'&'",
        "a | b": "'|'",
        "a > f": "'>'",
        "a $(b)": "command substitution",
        "a `b`": "command substitution",
        'a "$HOME"': "variable expansion",
        "a *.py": "'*'",
        "a ~/x": "'~'",
        "a #c": "'#'",
        "a\nb": "'\\n'",
        "a 'b": "unbalanced",
    }
    for cmd, expected in cases.items():
        problems = cmdline.split_plain(cmd)[1]
        assert problems and expected in " ".join(problems), (cmd, problems)


@settings(max_examples=examples(500), deadline=None)
@given(st.text(alphabet=" \t'\"\\abc-=;$`\n*~#", max_size=30))
def test_split_plain_agrees_with_shlex_on_plain_commands(cmd):
    argv, problems = cmdline.split_plain(cmd)
    if not problems:
        assert argv == shlex.split(cmd)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\x00'$`\\", blacklist_categories=("Cs",)), max_size=12), min_size=1, max_size=5
    )
)
def test_split_plain_agrees_with_the_shell(words):
    """Single-quoted words (as dvc.yaml should quote values) come out as sh passes them."""
    cmd = " ".join(f"'{w}'" for w in words)
    argv, problems = cmdline.split_plain(cmd)
    assert problems == [] and argv == words
    assert echo_back_sh(cmd) == words


def echo_back_sh(cmd):
    out = subprocess.run(["sh", "-c", "printf '%s\\0' " + cmd], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]
