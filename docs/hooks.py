"""MkDocs hooks: the reference pages' tables, made at build time from the code's own definitions.

A page asks for a table with a marker line, ``<!-- generated: NAME -->``. The tables come from
the dataclasses that read profiles and params.yaml (each key with its type, default and the
comment the code gives it), the built-in profiles' YAML (each value with the comment that cites
its source), the Jinja templates (the variables each one uses) and the golden scripts (the
variables every task gets). A key, variable or template without a description fails the build,
and so does a description here of something the code no longer has: the pages cannot drift.

The CLI page is mkdocs-click's; it reads ``orchestrator_docs_cli:cli``, the ``orchestrator``
command tree with every lazily imported command resolved (see :func:`_full_tree`).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)

# Keys whose dataclass field carries no comment in the code: described here. A key listed here
# that the code does not have, or a key neither here nor commented in the code, fails the build.
PROFILE_KEYS = {
    "name": "The profile's name: what `--cluster`, `clusters.NAME` in params.yaml and the scripts' headers call it.",
    "description": "One line saying what the cluster is (`orchestrator clusters` lists it).",
    "scheduler": "How jobs are submitted: Slurm or none, partitions, accounts, limits.",
    "scheduler.kind": "`slurm`, or `none` for a machine without a scheduler (the `local` profile).",
    "scheduler.launcher": "The script form `render` and `run` use: `sbatch` (a batch job), `srun` (blocking) or `local`.",
    "scheduler.account_example": "The site documentation's example account; `render --check` warns of a job that uses it.",
    "scheduler.default_partition": "The partition of a GPU job that names none (unless `site.billing` picks a cheaper one).",
    "scheduler.default_time": "The time limit of a job that gives none (`run --time`, params' `orchestrator.time`).",
    "scheduler.retry_backoff_s": "Seconds to wait before a node-fault retry; doubled for each further retry.",
    "scheduler.max_requeues": "How many times a job requeues itself on the requeue signal before it fails.",
    "scheduler.partitions": "The partitions jobs may use, by name.",
    "scheduler.partitions.NAME.max_nodes": "The most nodes a job may ask for here.",
    "scheduler.partitions.NAME.max_time": "The longest time limit a job may ask for here (Slurm's `D-HH:MM:SS`).",
    "scheduler.partitions.NAME.mem": "`--mem` per node on a whole-node partition (a Slurm size); see `mem_per_gpu`.",
    "scheduler.partitions.NAME.qos": "`--qos` for every job on this partition.",
    "scheduler.partitions.NAME.constraint": "`--constraint` for every job on this partition.",
    "node": "One compute node: cores, threads, GPUs and which cores are closest to each GPU.",
    "node.cores": "Physical cores per node.",
    "node.threads_per_core": "Hardware threads per core.",
    "node.gpus": "GPUs per node as Slurm counts them (on LUMI a GCD is one); 0 for CPU-only nodes.",
    "node.gpu": "The GPU model, for MFU and energy estimates.",
    "node.gpu.model": "The GPU's name, as the report prints it.",
    "node.gpu.memory_gb": "Memory per GPU, GB.",
    "node.inter_node_gbps": "Per GPU, one direction, GB/s: its share of the node's network injection (`orchestrator layout`).",
    "node.memory_gb": "Memory per node, GB: a partition's memory request may not exceed it.",
    "container": "What the tasks run in: the runtime, image, GPU flag, binds and setup lines.",
    "container.build.builder": "How the build job builds without root: `fakeroot` or `proot`.",
    "environment": "Variables every task gets, and what is cleared before launch.",
    "storage": "Fast storage a job runs from (staging) and where compile caches go.",
    "site": "The site's power, emissions and billing figures, for the report and the partition choice.",
    "site.billing": "How the site bills GPU jobs: the report's cost, and the partition a job that names none goes to.",
    "login": "The cluster's login node, for `--remote` from a workstation.",
}
PARAMS_KEYS = {
    "cluster": "The profile this workspace runs on: a built-in name, a profile file, or `auto` "
    "(the built-in whose `cluster_name` is this Slurm's ClusterName). Unset: `auto` on a cluster, else `local`.",
    "account": "The Slurm account every job bills (`run --account` overrides it per stage).",
    "partition": "The partition GPU jobs go to (`run --partition` overrides it). Unset: the profile's default, "
    "or the one that bills least where the profile states how the site bills.",
    "time": "The time limit of every job that gives none with `run --time`. Unset: the profile's `default_time`.",
}
PLAN_FIELDS = {
    "item": "The DVC item's name (`stage@key`).",
    "profile": "The profile's name.",
    "profile_source": "`built-in`, or the path the profile was read from.",
    "form": "`sbatch`, `srun` or `local`: which template lays the script out.",
    "version": "The orchestrator's version, for the header.",
    "job_name": "The item's name made safe for files and Slurm (`--job-name`, the log's name).",
    "workspace": "The project's absolute path: the script `cd`s there first.",
    "log": "The job's log, relative to the workspace (`%j`: the job id).",
    "nodes": "Nodes the job asks for.",
    "tasks_per_node": "Tasks per node: one per GPU, or one for a CPU job.",
    "gpus_per_node": "GPUs per node the job asks for (0: none).",
    "account": "The account (`None` without Slurm).",
    "partition": "The partition (`None` without Slurm).",
    "time": "The time limit (`None` without Slurm).",
    "unset": "Variables cleared before launch: those an outer container or launcher leaks, and the profile's `environment.unset`.",
    "node_local_dirs": "Variables naming folders made on every node (caches).",
    "ranks": "RANK, WORLD_SIZE, MASTER_ADDR and the others, as shell: what each task sets (see Rank environment).",
    "container.runtime": "`apptainer` or `singularity`.",
    "container.image": "The image's path, quoted (`${NAME}` references expand on the node).",
    "binding.cores": "Per task, the cores it is bound to.",
    "container": "The container call (runtime, flags, image, setup), or `None` on the host.",
    "staging": "What is copied to fast storage and back, or `None` when the job runs in the workspace.",
    "command": "The command after `orchestrator run ... --`, as words.",
    "binding": "The CPU masks of the tasks on whole-node partitions, else `None`.",
    "problems": "Everything that does not fit the cluster; a plan with problems is never rendered.",
}
# The variables the scripts export to every task (from the goldens): what each is for.
TASK_VARIABLES = {
    "USER": "Set from `id -un` where the launcher does not set it (profiles refer to it).",
    "OMP_NUM_THREADS": "The task's cores: OpenMP and torch's intra-op threads use no more.",
    "ORCH_ITEM": "The DVC item the job runs (`stage@key`).",
    "ORCH_PROFILE": "The profile's name.",
    "ORCH_NUM_NODES": "Nodes of the job.",
    "ORCH_DEVICES": "Processes per node: GPUs, or CPU processes standing in for them.",
    "ORCH_ACCELERATOR": "`gpu` or `cpu`: the experiments' `--accelerator` default (decided by the plan, never `auto`).",
    "ORCH_REQUEUE_SIGNAL": "The signal the training traps to checkpoint and exit 75 (the profile's `requeue_signal`).",
    "ORCH_PEAK_TFLOPS": "The profile's peak bf16 TFLOP/s per device, for MFU.",
    "ORCH_REQUEUE_MARKER": "A file a task leaves when it checkpointed on the requeue signal: the batch script then requeues the job.",
    "ORCH_WORKDIR": "The job's folder on fast storage (the profile's `storage.workdir_root`), per item and workspace.",
    "ORCH_STAGE": "Where the staged copy of the inputs lives: the tasks run there.",
    "TORCHINDUCTOR_CACHE_DIR": "torch.compile's Inductor cache, under the profile's `storage.compile_cache`.",
    "TRITON_CACHE_DIR": "Triton's kernel cache, under the profile's `storage.compile_cache`.",
    "TMPDIR": "Temporary files on fast storage (staged jobs only).",
    "CUDA_VISIBLE_DEVICES": "Empty for a CPU item: its processes open no GPU.",
    "HIP_VISIBLE_DEVICES": "Empty for a CPU item.",
    "ROCR_VISIBLE_DEVICES": "Empty for a CPU item (ROCr filters whenever it is set, so empty leaves none).",
    "PYTHONPATH": "The code's folder first, so a job runs the project's code, not an image's copy.",
    "RANK": "The task's global rank (Slurm's `SLURM_PROCID`; locally, the process's number).",
    "LOCAL_RANK": "The task's rank on its node (`SLURM_LOCALID`): the GPU it should use.",
    "WORLD_SIZE": "Tasks in the job (`SLURM_NTASKS`).",
    "LOCAL_WORLD_SIZE": "Tasks on the node (`SLURM_NTASKS_PER_NODE`).",
    "NODE_RANK": "The node's rank in the job (`SLURM_NODEID`).",
    "MASTER_ADDR": "Rank 0's node: the first of the job's nodes, plus the profile's `master_addr_suffix`; `127.0.0.1` locally.",
    "MASTER_PORT": "Rank 0's port: 15000 plus the job id's last 4 digits, as Lightning's; locally, a free one per run.",
}
TEMPLATES = {
    "_common.sh.j2": "Macros every job form shares: the header, environment hygiene, the task function, staging, the job step.",
    "sbatch.sh.j2": "A batch job (`sbatch`): `#SBATCH` directives, then one `srun` step of the task function.",
    "srun.sh.j2": "The blocking form: `srun` allocates and runs every task, and returns its exit status.",
    "local.sh.j2": "No scheduler: one process of the task function per device on this machine, each with its rank, output teed to the log.",
    "array.sh.j2": "A job array: task i runs item i's own script, frozen under a name made from its content.",
    "record.sh.j2": "The recording job of a detached `submit` or `sweep`: records results, submits the next wave, runs `dvc repro`.",
    "container_build.sh.j2": "`container build --on-cluster`: builds the image in a job, where the jobs read it.",
}


# The command line, every command resolved (mkdocs-click lists a group's eagerly registered commands only).


def _full_tree(command, ctx=None):
    import click

    if not isinstance(command, click.Group):
        return command
    ctx = click.Context(command, info_name=command.name, parent=ctx)
    subs = {}
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is not None:
            subs[name] = _full_tree(sub, ctx)
    copy = click.Group(
        name=command.name,
        commands=subs,
        params=command.params,
        help=command.help,
        epilog=command.epilog,
        short_help=command.short_help,
        hidden=command.hidden,
        context_settings=command.context_settings,
    )
    return copy


def on_config(config, **kwargs):
    from orchestrator.cli import main

    module = types.ModuleType("orchestrator_docs_cli")
    module.cli = _full_tree(main)
    module.cli.name = "orchestrator"
    sys.modules["orchestrator_docs_cli"] = module
    return config


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    def generate(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise PluginError(f"{page.file.src_uri}: no generated table named {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(generate, markdown)


# Field descriptions from the code: the comment on a field's line, else the comment lines above it.


def _field_comments(cls: type) -> dict[str, str]:
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    tree = ast.parse(source)
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for node in body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        text = []
        above = node.lineno - 2
        block: list[str] = []
        while above >= 0 and lines[above].strip().startswith("#"):
            block.insert(0, lines[above].strip().lstrip("#").strip())
            above -= 1
        text += block
        inline = _inline_comment(lines[node.end_lineno - 1])  # type: ignore[operator]
        if inline:
            text.append(inline)
        found[node.target.id] = " ".join(t for t in text if t)
    return found


def _inline_comment(line: str) -> str | None:
    """The comment ending a Python line (outside strings), without linters' directives."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line + "\n").readline))
    except (tokenize.TokenError, IndentationError):
        return None
    comment = next((t.string for t in tokens if t.type == tokenize.COMMENT), None)
    if comment is None:
        return None
    comment = re.sub(r"\s*(noqa|fmt|type):.*$", "", comment.lstrip("#").strip())
    comment = re.sub(r"^noqa\b.*$", "", comment)
    return comment or None


def _type_words(hint: Any) -> str:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is type(None):
        return "null"
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_words(a) for a in args)
    if origin is tuple:
        return f"list of {_type_words(args[0])}"
    if origin is dict:
        return f"mapping of {_type_words(args[0])} to {_type_words(args[1])}"
    if dataclasses.is_dataclass(hint):
        return "mapping (below)"
    names = {str: "text", int: "integer", float: "number", bool: "boolean"}
    if hint in names:
        return names[hint]
    return getattr(hint, "__name__", str(hint))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "see below"
    if value in ((), {}):
        return "empty"
    if value is None:
        return "`null`"
    return f"`{yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix('...').strip()}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")


def _dataclass_inner(hint: Any) -> tuple[type | None, str]:
    """The dataclass a field holds (unwrapping Optional and dict values), and the path step it adds."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if dataclasses.is_dataclass(hint):
        return hint, ""
    if typing.get_origin(hint) is dict and dataclasses.is_dataclass(args[1]):
        return args[1], ".NAME"
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 and dataclasses.is_dataclass(args[0]):
        return args[0], ""
    return None, ""


def _key_tables(root: type, supplement: dict[str, str], heading: str, prefix: str = "") -> str:
    """One table per dataclass under ``root`` (depth first), each key with type, default and description."""
    sections: list[tuple[str, type]] = [(prefix, root)]
    source = Path(inspect.getsourcefile(root) or "").resolve().relative_to(ROOT)
    out: list[str] = [f"Generated from `{source.as_posix()}`.\n"]
    described: set[str] = set()
    missing: list[str] = []
    while sections:
        path, cls = sections.pop(0)
        hints = typing.get_type_hints(cls)
        comments = _field_comments(cls)
        rows, nested = [], []
        for f in dataclasses.fields(cls):
            key = f"{path}.{f.name}" if path else f.name
            inner, step = _dataclass_inner(hints[f.name])
            text = supplement.get(key) or comments.get(f.name) or ""
            text = text[:1].upper() + text[1:]
            if key in supplement:
                described.add(key)
            if not text:
                missing.append(key)
            if inner is not None:
                nested.append((key + step, inner))
            rows.append(f"| `{f.name}` | {_cell(_type_words(hints[f.name]))} | {_cell(_default(f))} | {_cell(text)} |")
        if path:
            doc = inspect.getdoc(cls) or ""
            intro = supplement.get(path.removesuffix(".NAME")) if not doc or doc.startswith(cls.__name__ + "(") else doc.split("\n\n")[0]
            out.append(f"{heading} `{path}`\n\n{_cell(' '.join((intro or '').split()))}\n")
        out.append("| key | type | default | what it is |\n| --- | --- | --- | --- |\n" + "\n".join(rows) + "\n")
        sections = nested + sections  # a section's own sections right after it
    stale = sorted(k for k in supplement if k not in described and not _is_section(k, supplement, root, prefix))
    if missing or stale:
        raise PluginError(
            f"keys of {root.__name__} without a description (comment the field, or describe it in docs/hooks.py): {missing}; "
            f"described in docs/hooks.py but not in the code: {stale}"
        )
    return "\n".join(out)


def _is_section(key: str, supplement: dict[str, str], root: type, prefix: str) -> bool:
    """Whether ``key`` is a section whose intro the supplement gives (used as the table's heading text)."""
    cls: Any = root
    for part in key.split("."):
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        cls, _ = _dataclass_inner(hints[part])
        if cls is None:
            return False
    return True


def profile_keys() -> str:
    from orchestrator.config.profile import Profile

    return _key_tables(Profile, PROFILE_KEYS, "###")


def params_keys() -> str:
    from orchestrator.config.params import Settings

    return _key_tables(Settings, PARAMS_KEYS, "###", prefix="")


def plan_fields() -> str:
    from orchestrator.scripts.plan import Plan

    return _key_tables(Plan, PLAN_FIELDS, "####")


# The built-in profiles: each value with the comment that gives its source.


def builtin_profiles() -> str:
    from orchestrator.config.profile import BUILTIN_DIR, builtin_names

    out = []
    for name in builtin_names():
        path = BUILTIN_DIR / f"{name}.yaml"
        text = path.read_text()
        lines = text.splitlines()
        data = yaml.safe_load(text)
        header: list[str] = []
        for line in lines:
            if not line.startswith("#"):
                break
            header.append(line[1:].removeprefix(" "))
        out.append(f"### `{name}`\n\n{_cell(data.get('description', ''))}. From `orchestrator/config/profiles/{name}.yaml`.\n")
        if header:
            out.append("```text\n" + "\n".join(header) + "\n```\n")
        rows = []
        for key, node in _leaf_nodes(yaml.compose(text)):
            if key in (("name",), ("description",)):
                continue
            value = _lookup(data, key)
            shown = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
            source = _yaml_comment(lines, node, len(header))
            rows.append(f"| `{'.'.join(key)}` | `{_cell(shown)}` | {_cell(source)} |")
        out.append("| key | value | source |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def _leaf_nodes(node: yaml.Node, prefix: tuple[str, ...] = ()):
    """(path, key node) of each value to show: a block mapping is descended, anything else is one row."""
    for key, value in node.value:
        path = (*prefix, key.value)
        if isinstance(value, yaml.MappingNode) and not value.flow_style:
            yield from _leaf_nodes(value, path)
        else:
            yield path, (key, value)


def _lookup(data: Any, key: tuple[str, ...]) -> Any:
    for part in key:
        data = data[int(part) if isinstance(data, list) else part]
    return data


def _yaml_comment(lines: list[str], nodes: tuple[yaml.Node, yaml.Node], header: int) -> str:
    """The comment on the value's last line, else the comment lines right above its key."""
    key, value = nodes
    end = value.end_mark
    line = lines[end.line] if end.line < len(lines) else ""
    rest = line[end.column :] if end.line != key.start_mark.line or end.column else line
    texts = []
    above = key.start_mark.line - 1
    block: list[str] = []
    while above >= header and lines[above].strip().startswith("#"):
        block.insert(0, lines[above].strip().lstrip("#").strip())
        above -= 1
    texts += block
    if "#" in rest and rest.split("#", 1)[0].strip() == "":
        texts.append(rest.split("#", 1)[1].strip())
    return " ".join(t for t in texts if t)


# The templates and what they are given.


def templates() -> str:
    from jinja2 import meta

    from orchestrator.scripts.render import environment

    env = environment()
    folder = ROOT / "templates"
    users = _template_users()
    rows = []
    names = sorted(p.name for p in folder.glob("*.j2"))
    unknown = [n for n in names if n not in TEMPLATES]
    stale = [n for n in TEMPLATES if n not in names]
    if unknown or stale:
        raise PluginError(f"templates without a description in docs/hooks.py: {unknown}; described but gone: {stale}")
    for name in names:
        variables = sorted(meta.find_undeclared_variables(env.parse((folder / name).read_text())))
        shown = ", ".join(f"`{v}`" for v in variables) or "(macros: called with `plan`)"
        rendered_by = ", ".join(f"`{u}`" for u in users.get(name, [])) or "-"
        rows.append(f"| `{name}` | {_cell(TEMPLATES[name])} | {shown} | {rendered_by} |")
    return "| template | what it lays out | variables | rendered by |\n| --- | --- | --- | --- |\n" + "\n".join(rows) + "\n"


def _template_users() -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        text = path.read_text()
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for name in re.findall(r"[\"']([a-z_]+\.sh\.j2)[\"']", text):
            users.setdefault(name, []).append(module)
        if "{plan.form}.sh.j2" in text:
            for form in ("sbatch", "srun", "local"):
                users.setdefault(f"{form}.sh.j2", []).append(module)
    return {k: sorted(set(v)) for k, v in users.items()}


def task_variables() -> str:
    exported: dict[str, set[str]] = {}
    for golden in sorted((ROOT / "tests/golden").glob("*.sh")):
        text = golden.read_text()
        names = re.findall(r"^\s*export ([A-Z_][A-Z0-9_]*)=", text, re.MULTILINE)
        # Set first, then exported by name (the rank variables: `export RANK LOCAL_RANK ...`).
        # One way to split the names only (a name, then space and name): `(?:NAME ?)+` backtracked
        # exponentially on every `export NAME=...` line, minutes of a docs build.
        names += [
            n for line in re.findall(r"^\s*export ([A-Z_][A-Z0-9_]*(?: [A-Z_][A-Z0-9_]*)*)$", text, re.MULTILINE) for n in line.split()
        ]
        for name in names:
            exported.setdefault(name, set()).add(golden.name)
    site = {n for n in exported if not n.startswith("ORCH_") and n not in TASK_VARIABLES}
    unknown = sorted(n for n in exported if n.startswith("ORCH_") and n not in TASK_VARIABLES)
    if unknown:
        raise PluginError(f"variables the scripts export without a description in docs/hooks.py: {unknown}")
    rows = [
        f"| `{name}` | {_cell(TASK_VARIABLES[name])} | {len(exported[name])} of {len(list((ROOT / 'tests/golden').glob('*.sh')))} |"
        for name in sorted(exported)
        if name in TASK_VARIABLES
    ]
    note = f"\nBesides these, the profile's own `environment.variables` ({', '.join(f'`{n}`' for n in sorted(site))} in the built-ins).\n"
    return "| variable | what it is | in golden scripts |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n" + note


def packages() -> str:
    """The packages of ``orchestrator/``, each with what its docstring says it owns and may import."""
    import importlib

    rows = []
    for folder in sorted(p.parent for p in (ROOT / "orchestrator").glob("*/__init__.py")):
        doc = inspect.getdoc(importlib.import_module(f"orchestrator.{folder.name}")) or ""
        if not doc:
            raise PluginError(f"orchestrator/{folder.name}/__init__.py has no docstring saying what the package owns")
        paragraphs = [" ".join(part.split()) for part in doc.split("\n\n")]
        imports = next((p for p in paragraphs[1:] if "mport" in p), "")
        rows.append(f"| `{folder.name}` | {_cell(_rst(paragraphs[0]))} | {_cell(_rst(imports))} |")
    return "| package | what it owns | its rules |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n"


def _rst(text: str) -> str:
    """reStructuredText roles and literals as Markdown code."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


GENERATORS = {
    "packages": packages,
    "profile-keys": profile_keys,
    "builtin-profiles": builtin_profiles,
    "params-keys": params_keys,
    "plan-fields": plan_fields,
    "templates": templates,
    "task-variables": task_variables,
}
