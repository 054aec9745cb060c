"""An image's definition file: its Jinja template, the filters that quote values, rendering.

Templates are strict (an undefined name is an error) and never escape anything on
their own: every value goes through a filter that checks it for the place it lands in.
``q`` makes a shell word for ``%post``; ``path`` a ``%files`` path, which Apptainer
splits and expands itself, so only plain characters pass; ``label`` a header or label
value. No value may hold a line break, which would start a new section of the file.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from orchestrator.containers.images import SAFE_PATH, ContainerError

_LABEL = re.compile(r"[A-Za-z0-9._/+@:=~-]+")


def load(path: Path):
    """The Jinja template (StrictUndefined; filters q, path, label) and the names it uses."""
    import jinja2
    from jinja2 import meta

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(path.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(q=_q, path=_path, label=_label)
    try:
        source = path.read_text()
        used = meta.find_undeclared_variables(env.parse(source))
        return env.from_string(source), set(used)
    except jinja2.TemplateSyntaxError as exc:
        raise ContainerError(f"{path}:{exc.lineno}: {exc.message}") from exc


def render(template, variables: Mapping[str, object], *, context: str, content_hash: str, git_commit: str) -> str:
    """The definition text; staged inputs are named inside ``context`` (``src_dir``: empty
    unless the image copies project paths in, images.yaml's ``source``)."""
    values = {"src_dir": "", **variables}
    for key in ("torch_wheel", "ca_bundle", "src_dir"):
        if values.get(key):
            values[key] = f"{context}/{values[key]}"
    values.update(content_hash=content_hash, git_commit=git_commit)
    import jinja2

    try:
        return template.render(**values)
    except jinja2.TemplateError as exc:  # e.g. an undefined attribute
        raise ContainerError(f"cannot render the definition: {exc}") from exc


def _no_newline(value: object) -> str:
    text = str(value)
    if "\n" in text or "\r" in text or "\0" in text:
        raise ContainerError(f"value {text!r} holds a line break: it cannot go into a definition file")
    return text


def _q(value: object) -> str:
    """A shell word for %post."""
    return shlex.quote(_no_newline(value))


def _path(value: object) -> str:
    """A %files path. Apptainer splits %files lines itself (double quotes only) and
    expands sources with bash, so only plain characters are accepted."""
    text = _no_newline(value)
    if not text:
        # src_dir is empty unless images.yaml's `source` names project paths to copy in.
        raise ContainerError("an empty path cannot go into a definition file's %files (does the image set `source` in images.yaml?)")
    if not SAFE_PATH.fullmatch(text):
        raise ContainerError(f"path {text!r} cannot go into a definition file (only letters, digits and ._/+@%:,=~- are safe)")
    return f'"{text}"'


def _label(value: object) -> str:
    text = _no_newline(value)
    if not _LABEL.fullmatch(text):
        raise ContainerError(f"value {text!r} cannot go into a definition file's header or labels")
    return text
