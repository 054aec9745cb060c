"""``orchestrator use NAME`` written into params.yaml: the switch :func:`params.switch` describes,
made as edits to the user's own text (:mod:`orchestrator.util.yamledit`).

Each value the switch changes is given the text it has where it comes from: a cluster's value
is written as its ``clusters.NAME`` entry spells it, a value kept under ``clusters.local`` as the
file spelled it, and the way back copies that text again. So ``use NAME`` and then ``use local``
give back the very bytes of the file (comments, layout, quoting, ``1e-3`` as ``1e-3``, anchors,
CRLF, a BOM). What a switch adds (the ``clusters.local`` entry, a key the file lacked) carries
the comment :data:`MARK`, and the way back removes what carries it.

Switching from one cluster to another goes back to ``local`` first, then on: one path for both.
While a cluster is active, params.yaml's values and the cluster's entry must agree: a value
edited in one of them is refused at the next switch, naming it, not dropped or guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from orchestrator.config import params
from orchestrator.config.params import HOME, PARAMS_FILE, Key, Params
from orchestrator.errors import ConfigError
from orchestrator.util import yamledit
from orchestrator.util.yamledit import Document, Unfaithful, ValueText

MARK = params.SWITCH_MARK
CLUSTER_KEY: Key = ("orchestrator", "cluster")


@dataclass(frozen=True)
class Written:
    """params.yaml's text with the switch made: the values it changed, the entry it applied
    (None: none), and whether values are kept under clusters.local now."""

    text: str
    changes: list[tuple[Key, Any]]
    entry: str | None
    keeps: bool


def written(text: str, cluster: str, source: str = PARAMS_FILE) -> Written:
    """params.yaml's ``text`` switched to ``cluster``; ConfigError, nothing changed, for what
    cannot be switched faithfully.

    Only the entries a switch can touch are read and edited: ``orchestrator``, ``clusters``, the
    top-level keys any cluster's entry sets, and those whose anchors they use. The rest of the
    file, however big, is passed over once by the parser and kept as it is."""
    try:
        found = yamledit.entries(text)
    except yaml.YAMLError as exc:  # nested too deep
        raise ConfigError(f"{source} is refused: {exc}") from None
    if found is None:
        return _written(text, cluster, source)
    own = {"orchestrator", "clusters"}
    heads = params.from_text(found.part(found.with_anchors(own)), source)
    keys = found.with_anchors(own | {key[0] for entry in heads.overlays.values() for key, _ in params._leaves(params._plain(entry))})
    if len(keys) == len(found.keys):
        return _written(text, cluster, source)
    done = _written(found.part(keys), cluster, source)
    return replace(done, text=found.splice(done.text, keys, source))


def _written(text: str, cluster: str, source: str) -> Written:
    prm = params.from_text(text, source)
    wanted = params.switch(prm, cluster)  # every refusal of the values themselves first
    active = _active(prm)
    doc = Document(text, source)
    away = prm.overlay_key(cluster) != HOME and cluster != HOME
    if active != HOME:
        params.require_agreement(prm, active, "switched")
        now = _back(doc, prm)
        if away:
            now = _away(Document(now, source), params.from_text(now, source), cluster)
    elif params.kept_by_switch(text):
        raise params.hand_edit_error(prm)
    elif away:
        now = _away(doc, prm, cluster)
    elif prm.settings.cluster not in (None, HOME):
        now = _named(doc, HOME)  # named by hand, never switched: the name alone
    else:
        now = text
    after = _check(now, prm, cluster, wanted, source)
    return Written(now, wanted.changes(prm), prm.overlay_key(cluster), HOME in after.overlays and cluster != HOME)


def _active(prm: Params) -> str:
    """The cluster whose values params.yaml holds: the one it names, once a switch has kept the
    values it replaced (a name set by hand or by ``dvc exp run -S`` switched nothing)."""
    name = prm.settings.cluster
    if name in (None, "auto", HOME) or HOME not in prm.overlays or prm.overlay_key(name) == HOME:
        return HOME
    return name


def _set_by(overlay: Mapping[str, Any]) -> list[tuple[Key, Any]]:
    return [(k, v) for k, v in params._leaves(params._plain(overlay)) if k != CLUSTER_KEY]


def _back(doc: Document, prm: Params) -> str:
    """The text with ``local`` active again: each kept value back where it came from, in the
    spelling it is kept in; what a switch added removed."""
    kept = params._plain(prm.overlays.get(HOME, {}))
    gone: list[Key] = []
    for key, value in params._leaves(kept):
        if key == CLUSTER_KEY or any(key[: len(g)] == g for g in gone):
            continue
        added = _added(doc, key)
        if added is not None:  # not written before the switch: the file reads its value without it
            parent, key_node, _ = doc.entry(added)  # type: ignore[misc]
            doc.delete(parent, key_node)
            gone.append(added)
            continue
        whole = _replaced_whole(doc, key)
        if whole is not None:  # the cluster's value replaced the mapping around it: the mapping back
            doc.replace(whole, doc.source(("clusters", HOME, *whole)) or doc.scalar(params._get(kept, whole)))
            gone.append(whole)
            continue
        entry = doc.entry(key)
        new: ValueText | str = doc.source(("clusters", HOME, *key)) or doc.scalar(value)  # else kept through a merge key
        if entry is None:
            parent_map = doc.mapping(key[:-1])
            if parent_map is None:
                raise Unfaithful(f"{PARAMS_FILE}: {'.'.join(key[:-1])} is gone, so {'.'.join(key)} cannot be put back")
            doc.insert(parent_map, key[-1], new, "")
        elif _text(doc, key) != _spelled(new):
            doc.replace(key, new)
    cluster = doc.entry(CLUSTER_KEY)
    if cluster is not None:
        if _added(doc, CLUSTER_KEY) is not None:
            parent, key_node, _ = doc.entry(_added(doc, CLUSTER_KEY))  # type: ignore[arg-type,misc]
            if not any(CLUSTER_KEY[: len(g)] == g for g in gone):
                doc.delete(parent, key_node)
        else:
            doc.replace(CLUSTER_KEY, doc.source(("clusters", HOME, *CLUSTER_KEY)) or doc.scalar(HOME, like=cluster[2]))
    home = doc.entry(("clusters", HOME))
    if home is not None:
        if _marks(doc, home[1]):
            doc.delete(home[0], home[1])
        else:
            _delete_marked(doc, home[2])
    return doc.text()


def _replaced_whole(doc: Document, key: Key) -> Key | None:
    """The outermost key on the way to ``key`` that params.yaml holds as no mapping (a cluster's
    null or number replaced the mapping the kept ``key`` was in), if any."""
    for depth in range(1, len(key)):
        node = doc.node(key[:depth])
        if node is None:
            return None
        if not isinstance(node, yaml.MappingNode):
            return key[:depth]
    return None


def _away(doc: Document, prm: Params, cluster: str) -> str:
    """The text (``local`` active) with ``cluster``'s values written, those they replace kept
    under ``clusters.local``."""
    sw = params.switch(prm, cluster)
    key = sw.key
    if sw.kept is not None:
        _keep(doc, prm, sw.kept)
    for path, _ in _set_by(prm.overlays.get(key, {}) if key else {}):
        new = doc.source(("clusters", key, *path)) or doc.scalar(params._get(prm.overlays[key], path))  # type: ignore[arg-type,index]
        _put(doc, path, new)
    return _named(doc, cluster)


def _named(doc: Document, cluster: str) -> str:
    """The text with orchestrator.cluster naming ``cluster`` (for local, without the entry a switch added for it)."""
    added = _added(doc, CLUSTER_KEY) if cluster == HOME else None
    if added is not None:
        parent, key_node, _ = doc.entry(added)  # type: ignore[misc]
        doc.delete(parent, key_node)
        return doc.text()
    cluster_node = doc.editable(CLUSTER_KEY)
    if cluster_node is not None:
        doc.replace(CLUSTER_KEY, doc.scalar(cluster, like=cluster_node))
    else:
        _put(doc, CLUSTER_KEY, doc.scalar(cluster))
    return doc.text()


def _keep(doc: Document, prm: Params, kept: dict[str, Any]) -> None:
    """``clusters.local`` made to hold ``kept``, each value spelled as params.yaml spells it."""
    top = params._top(prm.data)
    sources: dict[str, Any] = {}
    for key, value in params._leaves(kept):
        new = (doc.source(key) if params._has(top, key) else None) or doc.scalar(value)
        _nest(sources, key, new)
    named = doc.source(CLUSTER_KEY)
    if named is not None and named.text != HOME and prm.settings.cluster in (None, HOME):  # local spelled otherwise: kept so
        _nest(sources, CLUSTER_KEY, named)
        kept = {**kept, "orchestrator": {**kept.get("orchestrator", {}), "cluster": None}}
    home = doc.entry(("clusters", HOME))
    if home is None:
        clusters = doc.mapping(("clusters",))
        if clusters is None:
            raise Unfaithful(f"{PARAMS_FILE}: clusters is not a mapping written in this file")
        doc.insert(clusters, HOME, sources, MARK)
        return
    for key, _ in params._leaves(kept):
        _put(doc, ("clusters", HOME, *key), _get_nested(sources, key))


def _put(doc: Document, key: Key, new: ValueText | str) -> None:
    """``key`` given ``new``: its value replaced where the file has it (if spelled otherwise),
    else the missing entries added, marked, under the deepest mapping the file has."""
    if doc.editable(key) is not None:
        if _text(doc, key) != _spelled(new):
            doc.replace(key, new)
        return
    depth = len(key) - 1
    while depth and doc.mapping(key[:depth]) is None:
        depth -= 1
    parent = doc.mapping(key[:depth])
    if parent is None and depth == 0 and doc.root is None:  # an empty file
        doc.insert(None, key[0], _nested(key[1:], new), MARK)
        return
    if parent is None or doc.entry(key[: depth + 1]) is not None:
        where = ".".join(key[: depth + 1])
        raise Unfaithful(f"{PARAMS_FILE}: {where} is not a mapping written in this file, so {'.'.join(key)} cannot be added")
    doc.insert(parent, key[depth], _nested(key[depth + 1 :], new), MARK)


def _nested(key: Key, value: Any) -> Any:
    for part in reversed(key):
        value = {part: value}
    return value


def _added(doc: Document, key: Key) -> Key | None:
    """The outermost entry on the way to ``key`` that a switch added (its line carries :data:`MARK`)."""
    for depth in range(1, len(key) + 1):
        entry = doc.entry(key[:depth])
        if entry is None:
            return None
        if _marks(doc, entry[1]):
            return key[:depth]
    return None


def _marks(doc: Document, key_node: Any) -> bool:
    return doc.line_of(key_node).rstrip().endswith(MARK)


def _delete_marked(doc: Document, mapping: Any) -> None:
    """Remove each entry under ``mapping`` that a switch added."""
    import yaml

    if not isinstance(mapping, yaml.MappingNode):
        return
    for key_node, value in doc.entries(mapping):
        if _marks(doc, key_node):
            doc.delete(mapping, key_node)
        else:
            _delete_marked(doc, value)


def _text(doc: Document, key: Key) -> str:
    try:
        found = doc.source(key)
    except Unfaithful:
        return "\0"  # holds an anchor: never the same text as a value written out
    return "\0" if found is None else _spelled(found)


def _spelled(new: ValueText | str) -> str:
    return new.text if isinstance(new, ValueText) else new


def _nest(out: dict[str, Any], key: Key, value: Any) -> None:
    for part in key[:-1]:
        out = out.setdefault(part, {})
    out[key[-1]] = value


def _get_nested(data: dict[str, Any], key: Key) -> Any:
    for part in key:
        data = data[part]
    return data


def _normal(top: dict[str, Any]) -> dict[str, Any]:
    """``top`` without the orchestrator settings that hold their default (written or not, the
    same; local is the cluster named by none)."""
    from dataclasses import MISSING, fields

    defaults = {f.name: f.default for f in fields(params.Settings) if f.default is not MISSING}
    section = top.get("orchestrator")
    if not isinstance(section, Mapping):
        return top
    same = {k: (d, list(d or ())) for k, d in defaults.items()}
    kept = {k: v for k, v in section.items() if not (k in same and v in same[k] or (k, v) == ("cluster", HOME))}
    rest = {k: v for k, v in top.items() if k != "orchestrator"}
    return {**rest, "orchestrator": kept} if kept else rest


def _check(text: str, prm: Params, cluster: str, wanted: params.Switch, source: str) -> Params:
    """The switched text must read as the switch says (with DVC's YAML 1.2): params.yaml's values
    the cluster's, the way back giving the values of now, every other cluster's entry as it was."""
    back = params.from_text(text, source)
    problems = []
    if not params.same(_normal(params._top(back.data)), _normal(wanted.top)):
        problems.append(f"its values do not read as {cluster}'s")
    others = {k: v for k, v in prm.overlays.items() if k != HOME}
    if not params.same({k: v for k, v in back.overlays.items() if k != HOME}, others):
        problems.append("another cluster's entry changed")
    # The way back from the file of now: its own values where local is active (switch() would
    # check the entries' names against local alone, not the profile file switched to).
    if _active(prm) == HOME:
        top = params._top(prm.data)
        before = {**top, "orchestrator": {**(top.get("orchestrator") or {}), "cluster": HOME}}
    else:
        before = params.switch(prm, HOME).top
    if _active(back) != HOME and not params.same(_normal(params.switch(back, HOME).top), _normal(before)):
        problems.append(f"`orchestrator use {HOME}` would not give back the values of now")
    if problems:
        raise Unfaithful(
            f"{source}: the switch to {cluster} cannot be written without changing other values, so nothing was written",
            problems,
            hints=["write the values it changes out plainly (no anchors or aliases, block mappings), then switch again"],
        )
    return back
