"""Every class of the package has a name of its own: a reader (and a grep) that meets
``Outcome`` or ``Row`` knows which one it is without looking at the import."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import orchestrator

PACKAGE = Path(orchestrator.__file__).parent


def classes(root: Path) -> dict[str, list[str]]:
    """Class name -> where each class of that name is defined (``path:line``), nested ones included."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_two_classes_share_a_name():
    shared = {name: where for name, where in classes(PACKAGE).items() if len(where) > 1}
    assert not shared, "classes that share a name (rename one to say what it is):\n" + "\n".join(
        f"  {name}: {', '.join(where)}" for name, where in sorted(shared.items())
    )


def test_the_check_sees_a_shared_name(tmp_path):
    (tmp_path / "a.py").write_text("class Outcome:\n    pass\n")
    (tmp_path / "b.py").write_text("def f():\n    class Outcome:\n        pass\n")
    assert classes(tmp_path)["Outcome"] == ["a.py:1", "b.py:2"]
