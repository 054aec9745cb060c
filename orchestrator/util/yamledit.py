"""A YAML file edited as text: each change replaces, inserts or removes the few characters of
one value or entry, and every other byte (comments, layout, quoting, number spelling, anchors,
line endings, a byte-order mark) stays as the person wrote it.

A round trip through a YAML library (load, change, dump) cannot promise that: it re-spells
numbers, moves comments, expands aliases into copies and drops what it has no node for. Here
the document is composed once (the same YAML 1.2 reading as :mod:`yamlio`, so what is edited
is what DVC reads), its nodes give the spans, and the edits are applied to the text at the end.
What cannot be edited so without changing another value (a value an alias shares, a key of a
flow mapping to insert into) raises :class:`Unfaithful`, and nothing is written.

A value copied from one place to another (:meth:`Document.source`) keeps its spelling; a block
collection or a multi-line scalar is moved by whole columns (every line after the first shifted
alike), so copying it back shifts it back to the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from orchestrator.errors import ConfigError
from orchestrator.util import yamlio

Key = tuple[str, ...]
BOM = "\ufeff"
MERGE_TAG = "tag:yaml.org,2002:merge"
# An anchor (&name) or a tag (!name, !!str) before a value: part of its node, not of its value.
_PROPERTIES = re.compile(r"(?:[&!][^\s]*[ \t]+)*")


class Unfaithful(ConfigError):
    """An edit that would change more than the one value it is for, or that the text cannot hold
    as written: refused, nothing written."""


@dataclass(frozen=True)
class ValueText:
    """A value's text as written (its anchor and tag left out), the column it starts at, and for
    a block collection (``- a`` or ``k: v`` lines) how far right of its key it stands: a copy
    keeps that, so that copying it back gives the same bytes."""

    text: str
    column: int
    block: bool = False
    offset: int = 2


class Document:
    """One YAML document's text and the edits to make to it (applied by :meth:`text`)."""

    def __init__(self, text: str, source: str) -> None:
        self.source_name = source
        self.bom = text.startswith(BOM)
        self.body = text[1:] if self.bom else text  # libyaml counts no BOM in its marks
        # The line break of most lines: the one a line added at the end of the file gets.
        self.newline = "\r\n" if self.body.count("\r\n") * 2 > self.body.count("\n") else "\n"
        try:
            self.root = yaml.compose(self.body, Loader=yamlio._LOADER)
        except yaml.YAMLError as exc:
            yamlio.load_text(self.body, source)  # the one message for it, with the place
            raise ConfigError(f"{source} is not valid YAML: {exc}") from None
        self._uses: dict[int, int] = {}
        if self.root is not None:
            self._count_uses(self.root)
        self._anchored = self._anchor_places() if ("&" in self.body or "*" in self.body) else []
        self._edits: list[tuple[int, int, int, str]] = []

    # --- reading -------------------------------------------------------------------------

    def entry(self, key: Key) -> tuple[yaml.MappingNode, yaml.ScalarNode, yaml.Node] | None:
        """The mapping, key node and value node of ``key`` written in this document, to edit
        (:meth:`editable`); None where absent."""
        if not key:
            return None
        parent = self.editable(key[:-1]) if len(key) > 1 else self.root
        if not isinstance(parent, yaml.MappingNode):
            return None
        for key_node, value in self.entries(parent):
            if key_node.value == key[-1]:
                if self.shared(value):
                    raise self._shared_error(key)
                return parent, key_node, value
        return None

    def node(self, key: Key) -> yaml.Node | None:
        """The node written at ``key`` in this document's own mappings (not one a merge key
        ``<<`` brings in), to read; None where no mapping on the way holds it."""
        node = self.root
        for part in key:
            if not isinstance(node, yaml.MappingNode):
                return None
            node = self._child(node, part)
            if node is None:
                return None
        return node

    def editable(self, key: Key) -> yaml.Node | None:
        """:meth:`node`, to change: :class:`Unfaithful` where the way passes through a value an
        alias shares, as an edit there would change its other uses too."""
        node = self.root
        for depth, part in enumerate(key):
            if not isinstance(node, yaml.MappingNode):
                return None
            node = self._child(node, part)
            if node is None:
                return None
            if self.shared(node):
                raise self._shared_error(key[: depth + 1])
        return node

    def mapping(self, key: Key) -> yaml.MappingNode | None:
        """The block or flow mapping at ``key``, to edit."""
        node = self.root if not key else self.editable(key)
        return node if isinstance(node, yaml.MappingNode) else None

    def shared(self, node: yaml.Node) -> bool:
        """Whether an alias (``*name``) uses ``node`` besides its own place."""
        return self._uses.get(id(node), 0) > 1

    def source(self, key: Key) -> ValueText | None:
        """The value at ``key`` as written (None where absent); :class:`Unfaithful` where it holds
        an anchor or alias, which a copy would duplicate or cut off from its anchor."""
        found = self._found(key)
        if found is None:
            return None
        key_node, node = found
        start, end = self._span(node)
        if any(start <= at < end for at in self._anchored):
            raise Unfaithful(
                f"{self.source_name}: {'.'.join(key)} holds an anchor or alias (&name, *name): it cannot be copied without "
                "changing what its aliases mean; write it out"
            )
        block = isinstance(node, yaml.CollectionNode) and not node.flow_style and bool(node.value)
        column = self._column(start)
        return ValueText(self.body[start:end], column, block, column - key_node.start_mark.column if block else 2)

    def line_of(self, node: yaml.Node) -> str:
        """The whole line ``node`` starts on (its key's line, for a value on the same line)."""
        start = node.start_mark.index
        begin = self.body.rfind("\n", 0, start) + 1
        end = self.body.find("\n", start)
        return self.body[begin : len(self.body) if end < 0 else end]

    def entries(self, mapping: yaml.MappingNode) -> Iterator[tuple[yaml.ScalarNode, yaml.Node]]:
        for key_node, value in mapping.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != MERGE_TAG:
                yield key_node, value

    # --- editing -------------------------------------------------------------------------

    def replace(self, key: Key, new: ValueText | str) -> None:
        """Write ``new`` in place of the value at ``key`` (its anchor and tag kept in front): a
        block collection on the lines below its key, anything else on the key's line."""
        found = self.entry(key)
        if found is None:
            raise Unfaithful(f"{self.source_name}: {'.'.join(key)} is not written in this file")
        _, key_node, node = found
        start, end = self._span(node)
        old_block = isinstance(node, yaml.CollectionNode) and not node.flow_style and bool(node.value)
        new_block = isinstance(new, ValueText) and new.block
        if old_block or new_block:
            # From the key's colon (or the line after its comment): a value moves between the key's
            # line and the lines below as its form changes.
            start, commented = self._after_key(key_node, start)
            lead = "" if commented else self._newline_at(start)
            if isinstance(new, ValueText) and new.block:
                column = key_node.start_mark.column + new.offset
                text = lead + " " * column + _shifted(new.text, column - new.column, self.source_name)
            elif commented:
                column = key_node.start_mark.column + 2
                text = " " * column + self._placed(new, column)
            else:
                placed = self._placed(new, self._column(start) + 1)
                text = " " + placed if placed else ""  # an empty value is written ``key:``
        else:
            text = self._placed(new, self._column(start))
            if start == end and isinstance(node, yaml.ScalarNode) and text:
                text = " " + text  # an empty value (``key:``): its place is right after the colon
            elif not text:
                while start and self.body[start - 1] in " \t":  # back to ``key:``, as an empty value is written
                    start -= 1
        self._edit(start, end, text)

    def insert(self, mapping: yaml.MappingNode | None, name: str, value: ValueText | str | dict[str, Any], mark: str) -> None:
        """Add ``name: value`` as the last entry of the block mapping ``mapping`` (None: the top
        level of an empty document), with the comment ``mark`` on its first line; ``value`` a dict
        writes a nested block of entries."""
        if mapping is None:
            if self.root is not None:
                raise Unfaithful(f"{self.source_name}: the document is not a mapping, so {name} cannot be added to it")
            newline = self._newline_at(len(self.body))
            lines = newline.join(self._entry_lines(name, value, 0, f"  {mark}"))
            ends = not self.body or self.body.endswith("\n")
            self._edit(len(self.body), len(self.body), lines + newline if ends else newline + lines)
            return
        if mapping.flow_style or not mapping.value:
            raise Unfaithful(
                f"{self.source_name}: the mapping at line {mapping.start_mark.line + 1} is written in flow style ({{...}}): "
                f"a key ({name}) cannot be added to it as its own line; write it as a block mapping"
            )
        column = mapping.value[0][0].start_mark.column
        line_end = self.body.find("\n", self._content_end(mapping))
        newline = self._newline_at(self._content_end(mapping))
        lines = newline.join(self._entry_lines(name, value, column, f"  {mark}"))
        if line_end < 0:  # the last line, with no line break: the file still ends without one
            self._edit(len(self.body), len(self.body), newline + lines)
        else:
            self._edit(line_end + 1, line_end + 1, lines + newline)

    def delete(self, mapping: yaml.MappingNode, key_node: yaml.ScalarNode) -> None:
        """Remove the entry ``key_node`` of the block mapping ``mapping``: its lines, whole."""
        value = dict(mapping.value)[key_node]
        begin = self.body.rfind("\n", 0, key_node.start_mark.index) + 1
        if self.body[begin : key_node.start_mark.index].strip(" "):
            raise Unfaithful(f"{self.source_name}: the entry at line {key_node.start_mark.line + 1} does not stand on lines of its own")
        end = self.body.find("\n", self._content_end(value))
        if end < 0 and begin:  # the last line, with no line break: the one before it loses its own
            begin -= 2 if self.body[begin - 2 : begin] == "\r\n" else 1
        self._edit(begin, len(self.body) if end < 0 else end + 1, "")

    def text(self) -> str:
        """The document with every edit made."""
        out = self.body
        last = len(out) + 1
        # Two insertions at one place keep the order they were made in.
        for start, end, _, new in sorted(self._edits, reverse=True):
            if end > last:
                raise Unfaithful(f"{self.source_name}: two changes overlap at character {start}")
            out = out[:start] + new + out[end:]
            last = start
        return (BOM if self.bom else "") + out

    def scalar(self, value: Any, like: yaml.Node | None = None) -> str:
        """``value`` as one line of YAML 1.2 (what DVC's reader takes back as ``value``); text in
        the quotes of ``like`` where it was quoted and they can carry it."""
        if isinstance(value, str) and isinstance(like, yaml.ScalarNode) and like.style in ("'", '"'):
            if like.style == "'" and all(c.isprintable() for c in value):
                return "'" + value.replace("'", "''") + "'"
            if like.style == '"':
                import json

                return json.dumps(value, ensure_ascii=False)
        text = yaml.dump(value, Dumper=yamlio._DUMPER, default_flow_style=True, width=1 << 30, allow_unicode=True)
        text = text.removesuffix("\n").removesuffix("\n...").removesuffix("...")
        if "\n" in text:
            import json

            text = json.dumps(value, ensure_ascii=False)
        return text

    # --- inside --------------------------------------------------------------------------

    def _found(self, key: Key) -> tuple[yaml.ScalarNode, yaml.Node] | None:
        node: yaml.Node | None = self.root
        found = None
        for part in key:
            if not isinstance(node, yaml.MappingNode):
                return None
            found = next(((k, v) for k, v in self.entries(node) if k.value == part), None)
            if found is None:
                return None
            node = found[1]
        return found

    def _after_key(self, key_node: yaml.ScalarNode, value_start: int) -> tuple[int, bool]:
        """Where a value that moves onto or off its key's line begins: just past the ``:``, or,
        where a comment follows it, the start of the next line (the comment stays); and which."""
        colon = self.body.index(":", key_node.end_mark.index) + 1
        between = self.body[colon:value_start]
        if "#" not in between:
            return colon, False
        return colon + between.index("\n") + 1, True

    def _child(self, mapping: yaml.MappingNode, part: str) -> yaml.Node | None:
        for key_node, value in self.entries(mapping):
            if key_node.value == part and key_node.style in ("", None, "'", '"'):
                return value
        return None

    def _count_uses(self, root: yaml.Node) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            seen = self._uses.get(id(node), 0)
            self._uses[id(node)] = seen + 1
            if seen:
                continue
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    stack += [k, v]
            elif isinstance(node, yaml.SequenceNode):
                stack += node.value

    def _anchor_places(self) -> list[int]:
        """Where each anchor and alias of the text stands."""
        places = []
        for event in yaml.parse(self.body, Loader=yamlio._LOADER):
            if (isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None)) and event.start_mark is not None:
                places.append(event.start_mark.index)
        return places

    def _shared_error(self, key: Key) -> Unfaithful:
        return Unfaithful(
            f"{self.source_name}: {'.'.join(key)} is shared with other values through a YAML anchor and alias (&name, *name): "
            "changing it here would change them too",
            hints=["write the value out where it differs per cluster (no alias), then switch again"],
        )

    def _span(self, node: yaml.Node) -> tuple[int, int]:
        """Where ``node``'s value is written: past its anchor and tag, up to its last character
        (a block collection's trailing comments and blank lines, and a block scalar's final line
        breaks, are the document's, not the value's)."""
        start = node.start_mark.index
        start += _PROPERTIES.match(self.body, start).end() - start  # type: ignore[union-attr]
        end = self._content_end(node)
        return start, max(start, end)

    def _content_end(self, node: yaml.Node) -> int:
        if isinstance(node, yaml.ScalarNode):
            end = node.end_mark.index
            if node.style in ("|", ">"):
                while end > node.start_mark.index and self.body[end - 1] in "\r\n":
                    end -= 1
            return end
        assert isinstance(node, yaml.CollectionNode)
        if node.flow_style or not node.value:
            return node.end_mark.index
        last = node.value[-1]
        return self._content_end(last[1] if isinstance(node, yaml.MappingNode) else last)

    def _column(self, index: int) -> int:
        return index - (self.body.rfind("\n", 0, index) + 1)

    def _line_start(self, index: int) -> int:
        return self.body.rfind("\n", 0, index) + 1

    def _placed(self, new: ValueText | str, column: int) -> str:
        if isinstance(new, str):
            return new
        return _shifted(new.text, column - new.column, self.source_name)

    def _entry_lines(self, name: str, value: ValueText | str | dict[str, Any], column: int, comment: str) -> list[str]:
        head = " " * column + self.scalar(name) + ":"
        if isinstance(value, dict):
            lines = [head + comment]
            for key, sub in value.items():
                lines += self._entry_lines(key, sub, column + 2, "")
            return lines
        if isinstance(value, ValueText) and value.block:
            body = _shifted(value.text, column + value.offset - value.column, self.source_name)
            return [head + comment, " " * (column + value.offset) + body]
        text = self._placed(value, len(head) + 1) if isinstance(value, ValueText) else value
        return [f"{head} {text}{comment}" if text else head + comment]

    def _edit(self, start: int, end: int, new: str) -> None:
        self._edits.append((start, end, len(self._edits), new))

    def _newline_at(self, index: int) -> str:
        """The line break of the line ``index`` is on (a file may mix them: each edit keeps its line's)."""
        end = self.body.find("\n", index)
        if end < 0:
            return self.newline
        return "\r\n" if end and self.body[end - 1] == "\r" else "\n"


def _shifted(text: str, delta: int, source: str) -> str:
    """``text`` with every line after the first moved ``delta`` columns (blank lines as they are)."""
    if not delta or "\n" not in text:
        return text
    first, *rest = text.split("\n")
    out = [first]
    for line in rest:
        if not line.strip(" \r"):
            out.append(line)
        elif delta > 0:
            out.append(" " * delta + line)
        elif line[:-delta].strip(" "):
            raise Unfaithful(f"{source}: a value's lines cannot be moved {-delta} columns left as written")
        else:
            out.append(line[-delta:])
    return "\n".join(out)


@dataclass(frozen=True)
class Entries:
    """A document's top-level entries, found by one pass of libyaml's parser (no node built):
    each key and the lines it owns, from its key's line to the next key's (comments after it
    included). An edit of a few entries then reads and writes only them: a 10 MB params.yaml
    whose switch touches three keys costs that pass, not composing the whole file twice."""

    body: str  # the text, its byte-order mark left out
    bom: bool
    keys: tuple[str, ...]
    starts: tuple[int, ...]  # where each key's lines begin; the text before the first is the head
    uses: tuple[frozenset[str], ...]  # the anchors each entry's aliases name
    defines: tuple[frozenset[str], ...]

    def region(self, i: int) -> str:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.body)
        return self.body[self.starts[i] : end]

    def head(self) -> str:
        return self.body[: self.starts[0]] if self.starts else self.body

    def with_anchors(self, keys: set[str]) -> set[str]:
        """``keys`` and every entry tied to them by an anchor: one whose anchor their aliases use,
        and one whose aliases use their anchors (an edit of a value they share must see it is shared)."""
        wanted = {i for i, k in enumerate(self.keys) if k in keys}
        while True:
            names = set().union(*(self.uses[i] | self.defines[i] for i in wanted)) if wanted else set()
            more = {i for i in range(len(self.keys)) if (self.defines[i] | self.uses[i]) & names} - wanted
            if not more:
                return {self.keys[i] for i in wanted}
            wanted |= more

    def part(self, keys: set[str]) -> str:
        """The document of the head and these entries alone, in their order (a BOM kept)."""
        text = self.head() + "".join(self.region(i) for i, k in enumerate(self.keys) if k in keys)
        return (BOM if self.bom else "") + text

    def splice(self, edited_part: str, keys: set[str], source: str) -> str:
        """The whole document with ``edited_part`` (a :meth:`part` of ``keys``, edited) in place:
        each of those entries' lines replaced by its edited lines, one it lost left out, one it
        gained placed after the last of them, every other byte as it was."""
        edited = entries(edited_part)
        if edited is None:
            raise Unfaithful(f"{source}: the edited entries no longer read as top-level entries")
        new = {k: edited.region(i) for i, k in enumerate(edited.keys)}
        last = max((i for i, k in enumerate(self.keys) if k in keys), default=-1)
        out = [edited.head() if self.starts else ""]
        for i, key in enumerate(self.keys):
            if key not in keys:
                out.append(self.region(i))
            elif key in new:
                out.append(new.pop(key))
            if i == last:
                out.extend(new.pop(k) for k in [k for k in edited.keys if k in new and k not in self.keys])
        out.extend(new.values())
        return (BOM if edited.bom else "") + "".join(out)


def entries(text: str) -> Entries | None:
    """:class:`Entries` of ``text``; None where it is not one plain block mapping of scalar keys
    (a directive, ``---``, more than one document, a complex key, a key twice), which is then
    edited whole. A document nested past :data:`yamlio.MAX_DEPTH` is refused, as reading it is."""
    bom = text.startswith(BOM)
    body = text[1:] if bom else text
    keys: list[str] = []
    seen: set[str] = set()
    starts: list[int] = []
    uses: list[set[str]] = []
    defines: list[set[str]] = []
    depth = 0
    expect_key = False
    # Below the root, each open collection: None for a sequence, [nodes so far, its keys] for a mapping.
    nested: list[Any] = []
    try:
        events: Iterator[Any] = yaml.parse(body, Loader=yamlio._LOADER)  # told apart by class, for speed
        for event in events:
            kind = event.__class__
            if kind is yaml.DocumentStartEvent:
                if event.explicit or event.version or event.tags or keys:
                    return None
                continue
            if kind in (yaml.StreamStartEvent, yaml.StreamEndEvent):
                continue
            if kind is yaml.DocumentEndEvent:
                if event.explicit:
                    return None
                continue
            if depth == 1 and expect_key:
                if kind is yaml.MappingEndEvent:
                    depth = 0
                    continue
                if kind is not yaml.ScalarEvent or event.value in seen or event.anchor:
                    return None
                keys.append(event.value)
                seen.add(event.value)
                starts.append(body.rfind("\n", 0, event.start_mark.index) + 1)
                uses.append(set())
                defines.append(set())
                expect_key = False
                continue
            if depth == 0:
                if kind is not yaml.MappingStartEvent or event.flow_style or event.anchor or keys:
                    return None
                depth, expect_key = 1, True
                continue
            if kind is yaml.AliasEvent:
                uses[-1].add(event.anchor)
            elif getattr(event, "anchor", None):
                defines[-1].add(event.anchor)
            if kind is yaml.ScalarEvent or kind is yaml.AliasEvent:
                if nested and nested[-1] is not None:
                    mapping = nested[-1]
                    if not mapping[0] % 2 and kind is yaml.ScalarEvent and event.value != "<<":
                        if event.value in mapping[1]:  # a key twice (or 1 and '1'): read whole, refused there if one
                            return None
                        mapping[1].add(event.value)
                    mapping[0] += 1
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                if len(nested) + 2 > yamlio.MAX_DEPTH:
                    raise yamlio.TooDeep(f"it nests deeper than {yamlio.MAX_DEPTH} levels")
                nested.append([0, set()] if kind is yaml.MappingStartEvent else None)
            else:  # the end of one
                nested.pop()
                if nested and nested[-1] is not None:
                    nested[-1][0] += 1
            expect_key = not nested
    except yaml.YAMLError:
        return None  # read whole, it gets its one message
    return _ended(body, bom, keys, starts, uses, defines)


def _ended(body: str, bom: bool, keys: list[str], starts: list[int], uses: list[set[str]], defines: list[set[str]]) -> Entries:
    return Entries(body, bom, tuple(keys), tuple(starts), tuple(map(frozenset, uses)), tuple(map(frozenset, defines)))
