"""Rendering: a plan becomes the text of a bash script, through Jinja templates.

Like HTML autoescaping, every value a template prints is shell-quoted on output
(``finalize``) unless it is a :class:`~orchestrator.scripts.quoting.Shell` fragment the code
already quoted, or the template marks template-authored text with ``| raw``.
A template cannot print an unquoted value by forgetting a filter.
``StrictUndefined`` turns a missing variable into an error, never an empty string,
and nothing time- or host-dependent is rendered, so output is byte-identical
across runs.
"""

from __future__ import annotations

import functools
from pathlib import Path

from orchestrator.scripts.plan import REQUEUE_EXIT, Plan
from orchestrator.scripts.quoting import Shell, quote

PACKAGE_DIR = Path(__file__).parents[1]  # orchestrator/
# A wheel carries the templates inside the package; a source checkout has them
# in the project's top-level templates/ folder.
TEMPLATE_DIRS = (PACKAGE_DIR / "_templates", PACKAGE_DIR.parent / "templates")


def _finalize(value: object) -> str:
    if isinstance(value, Shell):
        return value
    if value is None:
        raise ValueError("a template printed None: the plan is missing a value")
    return quote(value)


@functools.cache
def environment():
    import jinja2

    dirs = [str(d) for d in TEMPLATE_DIRS if d.is_dir()]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["raw"] = Shell
    env.globals["REQUEUE_EXIT"] = Shell(str(REQUEUE_EXIT))
    # Comments are code too: a value with a newline must not end the comment.
    env.filters["comment"] = quote
    return env


def render(plan: Plan) -> str:
    return environment().get_template(f"{plan.form}.sh.j2").render(plan=plan)


def filename(plan: Plan) -> str:
    return f"{plan.job_name}.{'sbatch' if plan.form == 'sbatch' else 'sh'}"
