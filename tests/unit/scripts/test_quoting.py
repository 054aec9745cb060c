"""Quoting (orchestrator/scripts/quoting.py): every value survives bash unchanged and nothing in it is executed."""

import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from orchestrator.scripts import quoting

HOSTILE = [
    "a b",
    "it's",
    'say "hi"',
    "x; touch CANARY",
    "$(touch CANARY)",
    "`touch CANARY`",
    "line1\nline2",
    "tab\there",
    "back\\slash",
    "",
    "-n",
    "\x01",
]


def echo_back(words):
    """What bash hands a program for the quoted words (NUL-separated)."""
    script = "printf '%s\\0' " + " ".join(quoting.quote(w) for w in words)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_hostile_values_round_trip(tmp_path):
    assert echo_back(HOSTILE) == HOSTILE
    assert not (tmp_path / "CANARY").exists()


def test_quoted_values_never_span_lines():
    for value in HOSTILE:
        assert "\n" not in quoting.quote(value)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20), min_size=1, max_size=5
    )
)
def test_any_text_round_trips(words):
    assert echo_back(words) == words


def test_runtime_templates_expand_only_references():
    quoted = quoting.quote_runtime('/tmp/${USER}-"$(id)"-`id`-\\-${SLURM_NODEID}')
    out = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"], capture_output=True, text=True, env={"USER": "u", "SLURM_NODEID": "3"}
    ).stdout
    assert out == '/tmp/u-"$(id)"-`id`-\\-3'
