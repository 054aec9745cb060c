"""YAML at the boundary: read a file into plain data, or one clear error.

Typed structures are built from that data exactly once (see :mod:`profile`);
no ``dict[str, Any]`` travels further into the core.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from orchestrator.errors import ConfigError, UnreadableFile
from orchestrator.util import files

T = TypeVar("T")


class Hex(str):
    """Text holding a hex number: YAML reads an unquoted 0xfe as the int 254."""

    __slots__ = ()


# libyaml's loader and dumper where PyYAML was built with it: four to five times faster on
# big files (a 1,000-stage dvc.lock: 0.16 s against 0.76 s to read), the same documents.
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BASE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _yaml_1_2(cls: Any) -> Any:
    """``cls`` (a PyYAML loader or dumper) reading plain scalars as YAML 1.2 does, with the very
    patterns of ruamel.yaml, DVC's reader: ``1e-3`` a float, ``on``/``yes`` text, ``1:30`` text,
    ``0o17`` an int. PyYAML is YAML 1.1, so params.yaml read by it and by DVC differed in type
    (a value written back as ``'1e-3'`` was then text to DVC as well). A dumper with them quotes
    exactly the text YAML 1.2 would read as something else."""
    from ruamel.yaml.resolver import implicit_resolvers

    cls.yaml_implicit_resolvers = {}
    for versions, tag, pattern, first in implicit_resolvers:
        if (1, 2) in versions and not tag.endswith(":yaml"):
            # ruamel's patterns are lazy proxies, each match an attribute lookup in Python
            # (a third of the time to read a big file): compiled here once, as they are.
            cls.add_implicit_resolver(tag, re.compile(pattern.pattern, pattern.flags), first)
    return cls


class _Dumper(_BASE_DUMPER):  # type: ignore[valid-type,misc]
    pass


_DUMPER = _yaml_1_2(_Dumper)


class _Loader(_BASE_LOADER):  # type: ignore[valid-type,misc]
    """The safe loader, reading YAML 1.2 as DVC does (:func:`_yaml_1_2`), and refusing a key a
    mapping has twice: PyYAML keeps the last, DVC's reader (ruamel) refuses the file, so a
    duplicate read here would plan what DVC never runs."""

    def construct_yaml_int(self, node: Any) -> int:
        """YAML 1.2's ints: ``017`` is seventeen (1.1 read it as octal), ``0o17`` octal."""
        written = str(self.construct_scalar(node))
        value = written.replace("_", "")
        sign = -1 if value[:1] == "-" else 1
        value = value[1:] if value[:1] in "+-" else value
        try:
            for prefix, base in (("0b", 2), ("0o", 8), ("0x", 16)):
                if value.startswith(prefix):
                    return sign * int(value[2:], base)
            return sign * int(value)
        except ValueError:  # `_`, `0x_`: YAML 1.2's pattern for ints takes them, no number is one
            raise _no_number(written, node) from None

    def construct_yaml_float(self, node: Any) -> float:
        try:
            return super().construct_yaml_float(node)
        except ValueError:  # `._`: as for ints
            raise _no_number(str(self.construct_scalar(node)), node) from None

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """A node's tag, as the base class finds it, with a plain scalar's remembered: a big file
        repeats its keys and many values, and matching each against the patterns again was the
        most of the time to read it."""
        if kind is yaml.ScalarNode and implicit[0]:
            try:
                return _RESOLVED[value]
            except KeyError:
                if len(_RESOLVED) > 1 << 20:  # a process reading many big files: bounded
                    _RESOLVED.clear()
                tag = _RESOLVED[value] = super().resolve(kind, value, (True, False))
                return tag
        if kind is yaml.ScalarNode:
            return self.DEFAULT_SCALAR_TAG
        return self.DEFAULT_SEQUENCE_TAG if kind is yaml.SequenceNode else self.DEFAULT_MAPPING_TAG

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<:` may stand more than once
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: the base class says so
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark
                    )
        return super().construct_mapping(node, deep)


def _no_number(written: str, node: Any) -> yaml.YAMLError:
    """What YAML 1.2's patterns take for a number and no number is (DVC's reader stops on it
    with a ValueError): said as a YAML error at its place."""
    return yaml.constructor.ConstructorError(None, None, f"{written!r} is no number (quote it for text)", node.start_mark)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
_LOADER = _yaml_1_2(_Loader)
# The tag of each plain scalar seen (one set of resolvers, no path resolvers: a pure function of its text).
_RESOLVED: dict[str, str] = {}


# Values that aliases (``*name``) may add to a document beyond those written out. Each alias
# shares its anchor's value, so a few lines can stand for a billion values ("billion laughs"):
# cheap to parse, but whatever walks or copies the data (DVC's params context, a dump, a hash)
# runs out of time or memory. Real params files use an anchor for a few defaults.
MAX_ALIASED_VALUES = 1_000_000


class AliasBomb(yaml.YAMLError):
    """A document whose aliases expand past :data:`MAX_ALIASED_VALUES`, or into themselves."""


# Nesting past this is no file a person writes, and DVC's reader (recursive) fails on it with a
# RecursionError at some hundreds of levels: refused here first, with one message.
MAX_DEPTH = 100


def parse(text: str) -> Any:
    """``yaml.safe_load``, fast; raises ``yaml.YAMLError`` (callers that must name the file use
    :func:`load_text`), :class:`AliasBomb` and :class:`TooDeep` among them."""
    data = yaml.load(text, Loader=_LOADER)
    if "*" in text:  # no alias without one: plain documents skip the walk
        _check_expansion(data)
    if _may_be_deep(text):
        _check_depth(data)
    return data


class TooDeep(yaml.YAMLError):
    """A document nested past :data:`MAX_DEPTH`."""


def _may_be_deep(text: str) -> bool:
    """Cheap: whether ``text`` has enough brackets or indentation to nest past :data:`MAX_DEPTH`."""
    if text.count("[") + text.count("{") > MAX_DEPTH:
        return True
    return any(len(line) - len(line.lstrip(" -")) > MAX_DEPTH for line in text.splitlines())


def _check_depth(data: Any) -> None:
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen: set[int] = set()
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (list, dict)) or id(node) in seen:
            continue
        if depth >= MAX_DEPTH:
            raise TooDeep(f"it nests deeper than {MAX_DEPTH} levels")
        seen.add(id(node))
        stack.extend((c, depth + 1) for c in (node.values() if isinstance(node, dict) else node))


def _check_expansion(data: Any) -> None:
    """Raise :class:`AliasBomb` when the document, its aliases expanded, holds more than
    :data:`MAX_ALIASED_VALUES` values beyond its distinct ones. Each distinct list or mapping is
    visited once (its expanded size remembered), so the walk costs what the parsed data does."""
    sizes: dict[int, int] = {}
    distinct = 0
    # Post-order without recursion: (node, children pushed yet?)
    stack: list[tuple[Any, bool]] = [(data, False)]
    open_: set[int] = set()
    while stack:
        node, expanded = stack.pop()
        if not isinstance(node, (list, dict)):
            continue
        key = id(node)
        if expanded:
            children = node.values() if isinstance(node, dict) else node
            sizes[key] = 1 + sum(sizes.get(id(c), 1) for c in children)
            open_.discard(key)
            if sizes[key] - distinct > MAX_ALIASED_VALUES:
                raise AliasBomb(f"its aliases (*name) expand it past {MAX_ALIASED_VALUES:,} values")
            continue
        if key in sizes:
            continue
        if key in open_:
            raise AliasBomb("an alias (*name) refers to a value that holds it: the value never ends")
        open_.add(key)
        distinct += 1 + len(node)
        stack.append((node, True))
        stack.extend((c, False) for c in (node.values() if isinstance(node, dict) else node))


def load_text(text: str, source: str) -> Any:
    try:
        return parse(text)
    except AliasBomb as exc:
        raise ConfigError(f"{source} is refused: {exc}", hints=["write the values out, or use anchors for a few shared defaults"]) from None
    except TooDeep as exc:
        raise ConfigError(f"{source} is refused: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source} is not valid YAML{where}: {problem}") from exc


# params.yaml, images.yaml: files a person writes. Past this size a file is not one of them,
# and reading it whole could exhaust memory.
MAX_FILE_BYTES = 64 << 20


def read_file(path: Path) -> str:
    """The text of a YAML file a person writes: a regular file (or a link to one: the user's
    own) under :data:`MAX_FILE_BYTES`, UTF-8; else one ConfigError naming it."""
    try:
        return files.read_text(path, MAX_FILE_BYTES, follow_symlinks=True)
    except UnreadableFile as exc:
        raise ConfigError(f"{path}: no such file" if exc.missing else f"{path} {exc.reason}") from None


def load_file(path: Path) -> Any:
    """The data of :func:`read_file`, aliases bounded."""
    return load_text(read_file(path), str(path))


def load_mapping(path: Path) -> Mapping[str, Any]:
    return mapping_of(load_file(path), path)


def mapping_of(data: Any, path: Path | str) -> Mapping[str, Any]:
    """``data`` read from ``path`` as its top-level mapping ({} for an empty file)."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level, found {type(data).__name__}")
    return data


# --- typed structuring ----------------------------------------------------------


@functools.cache
def _converter():
    # cattrs is imported lazily: `orchestrator --help` does not need it.
    import cattrs

    conv = cattrs.Converter(forbid_extra_keys=True)

    def strict(kind: type, accept: tuple[type, ...]):
        def hook(value: Any, _: type) -> Any:
            if isinstance(value, bool) and kind is not bool:
                raise TypeError(f"expected {kind.__name__}, found a boolean")
            if not isinstance(value, accept):
                raise TypeError(f"expected {kind.__name__}, found {type(value).__name__} {value!r}")
            return kind(value)

        return hook

    conv.register_structure_hook(bool, strict(bool, (bool,)))
    conv.register_structure_hook(int, strict(int, (int,)))
    conv.register_structure_hook(float, strict(float, (int, float)))
    # Numbers are accepted where text is expected (an account such as 465000858).
    conv.register_structure_hook(str, strict(str, (str, int, float)))
    conv.register_structure_hook(
        Hex, lambda v, _: Hex(hex(v) if isinstance(v, int) and not isinstance(v, bool) else strict(str, (str,))(v, str))
    )

    # cattrs makes a tuple of any iterable: a mapping's keys, a string's characters.
    # YAML that means a list must be one.
    def sequence(value: Any, kind: type) -> Any:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list, found {type(value).__name__} {value!r}")
        return conv._structure_tuple(value, kind)

    # typeshed's first get_origin overload (ParamSpecArgs -> ParamSpec) is the one an untyped argument picks.
    conv.register_structure_hook_func(lambda t: typing.get_origin(t) is tuple, sequence)  # type: ignore[comparison-overlap]
    return conv


def structure(data: Any, cls: type[T], source: str) -> T:
    """Build ``cls`` (a frozen dataclass tree) from YAML data, reporting every problem."""
    from cattrs.errors import BaseValidationError

    try:
        return _converter().structure(data, cls)
    except BaseValidationError as exc:
        raise ConfigError(f"{source} is invalid", _describe(exc, cls)) from exc


def _describe(exc: Any, cls: type) -> list[str]:
    import cattrs
    from cattrs.errors import ForbiddenExtraKeysError

    def fmt(err: BaseException, typ: Any) -> str:
        if isinstance(err, ForbiddenExtraKeysError):
            valid = ", ".join(f.name for f in dataclasses.fields(err.cl))
            unknown = ", ".join(sorted(err.extra_fields))
            return f"unknown key(s) {unknown}; valid keys: {valid}"
        if isinstance(err, KeyError):
            return "required key missing"
        if isinstance(err, TypeError) and "expected" in str(err):
            return str(err)
        origin = typing.get_origin(typ)
        if typ is not None and origin in (dict, Mapping) and not isinstance(err, TypeError):
            return f"{err}"
        return f"invalid value ({err})"

    out = []
    for line in cattrs.transform_error(exc, format_exception=fmt):
        msg, _, path = line.rpartition(" @ $")
        out.append(f"{path.lstrip('.') or '(top level)'}: {msg}")
    return out


def dump(data: Any) -> str:
    """``yaml.safe_dump`` in the document's own key order, fast."""
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True)
