"""`orchestrator exp run --cluster NAME` passes the cluster's values to `dvc exp run -S`: what DVC
then writes into the experiment's params.yaml reads back as exactly the overlay's value
(backslashes, quotes, floats such as 3e-4), through DVC's own override code; what it cannot
carry (a key with a dot or a space, a line break, and any ${...}, which DVC's -S expands) is
refused, naming it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from orchestrator.config import params
from orchestrator.errors import ConfigError

# No "${": refused, as DVC's -S would expand it (test below).
TEXT = st.text(alphabet=st.sampled_from(list("\\\"'${}aw +:.=,[]()#*&!%@`|>-1e~?é")), max_size=10).filter(lambda t: "${" not in t)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b_1", "c-d"]), inner, max_size=3),
    max_leaves=6,
).filter(lambda v: not isinstance(v, dict))  # a mapping merges key by key: each key is one of the values above


def sent(tmp_path, value):
    """``value`` as `orchestrator exp run` sends it, applied by DVC's own -S code, read back by DVC."""
    from dvc.utils.hydra import apply_overrides
    from dvc.utils.serialize import parse_yaml

    from orchestrator.util import yamlio

    base = {"orchestrator": {"cluster": "local"}, "v": _same_kind(value)}  # a cluster's value keeps the type it replaces
    prm = params.from_data({**base, "clusters": {"lumi": {"v": value}}}, "params.yaml")
    path = tmp_path / "params.yaml"
    path.write_text(yamlio.dump({"v": base["v"]}))
    sets = [s for s in params.dvc_sets(prm, "lumi") if not s.startswith("orchestrator.")]
    if sets:
        apply_overrides(str(path), sets)
    return parse_yaml(path.read_text(), "params.yaml")["v"]


def _same_kind(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return 0
    return type(value)() if value is not None else None


@settings(max_examples=examples(150), deadline=None)
@given(value=VALUES)
def test_every_value_reads_back_in_dvc_as_the_overlay_wrote_it(tmp_path_factory, value):
    assert repr(sent(tmp_path_factory.mktemp("s"), value)) == repr(value)


@pytest.mark.parametrize("value", ["\\w+", "end\\", 'say "hi"', 3e-4, "3e-4", "on", "1:30", "017", "$x", "{a}", "$ {x}"])
def test_the_values_the_issue_names(tmp_path, value):
    assert repr(sent(tmp_path, value)) == repr(value)


def test_an_interpolation_anywhere_in_params_is_refused_as_dvc_would_expand_it():
    """DVC's -S resolves every ${...} of params.yaml as it writes the file back (OmegaConf): an
    ${oc.env:TOKEN} in the overlay, or anywhere else in the file, would be written expanded
    into the experiment's params.yaml and commit. Refused, naming each."""
    data = {"orchestrator": {"cluster": "local"}, "t": "x", "note": ["a", "${oc.env:HOME}"], "clusters": {"lumi": {"t": "${oc.env:TOKEN}"}}}
    with pytest.raises(ConfigError) as refused:
        params.dvc_sets(params.from_data(data, "params.yaml"), "lumi")
    text = refused.value.render()
    assert "note: " in text and "clusters.lumi.t: " in text and "holds ${...}, which DVC's -S resolves" in text, text


@pytest.mark.parametrize(
    ("overlay", "said"),
    [
        ({"t": "two\nlines"}, 't: "two\\nlines" has a line break or a control character'),
        ({"a.b": 1}, "a.b: the key 'a.b' cannot be named in a -S override"),
        ({"a b": 1}, "a b: the key 'a b' cannot be named in a -S override"),
        ({"m": {"x y": 2}}, "the key 'x y' cannot be named"),
    ],
)
def test_what_the_override_grammar_cannot_carry_is_refused_naming_it(overlay, said):
    data = {"orchestrator": {"cluster": "local"}, "t": "", "a.b": 0, "a b": 0, "m": {"x y": 1}, "clusters": {"lumi": overlay}}
    with pytest.raises(ConfigError) as refused:
        params.dvc_sets(params.from_data(data, "params.yaml"), "lumi")
    text = refused.value.render()
    assert "cannot pass lumi's values to `dvc exp run -S`: nothing was run" in text and said in text, text
    assert "orchestrator use lumi" in text
