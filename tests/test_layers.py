"""The floor plan holds: one concept per subpackage, in a strict layer order (no module imports
one of a layer to its right), no import circle but the documented one, a thin front desk.

Every import counts: module-level, function-local and ``TYPE_CHECKING`` ones (docs/design.md,
"The layer order").
"""

from __future__ import annotations

import ast
import collections
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = {"recipe_spec": "recipe_spec", "recipe_spec_torch": "backends/torch", "recipe_spec_keras": "backends/keras"}

#: The layers of ``recipe_spec``, left to right: a module may import its own layer and those
#: to its left. The names are the top-level modules and subpackages of ``recipe_spec``.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("atomic", "diagnostics", "text", "masks", "quantization"),
    ("recipe",),
    ("modifiers",),
    ("schedule", "params", "registry"),
    ("checks", "pruning"),
    ("core_dialect",),
    ("oneshot",),
    ("loader",),
    ("validation",),
    ("lint", "lint_scheme", "parallel", "fix", "convert"),
    ("runtime",),
    ("oneshot.api", "oneshot.objects"),
    ("manager",),
    ("create", "integrations", "docgen"),
    ("cli", "commands", "commands_oneshot", "commands_fix", "__init__", "__main__"),
)

#: The one documented exception (docs/design.md): ``Recipe.plan/compile/to_yaml`` delegate to
#: the schedule, the registry and the YAML writer.
DELEGATES = {
    ("recipe_spec.recipe.model", "recipe_spec.schedule"),
    ("recipe_spec.recipe.model", "recipe_spec.registry"),
    ("recipe_spec.recipe.model", "recipe_spec.recipe.serialize"),
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [pkg, *path.relative_to(ROOT / folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    target = ".".join(base[: len(base) - node.level + 1] + [node.module or ""]).strip(".")
                else:
                    target = node.module or ""
                found = [f"{target}.{a.name}" for a in node.names]
                edges[name].update(f for f in found if f in MODULES)
                if target in MODULES and any(f not in MODULES for f in found):
                    edges[name].add(target)
            elif isinstance(node, ast.Import):
                edges[name].update(a.name for a in node.names if a.name in MODULES)
        edges[name].discard(name)
    return edges


EDGES = _edges()


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(MODULES):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _layer(module: str) -> int:
    """The layer of ``module``: of its longest dotted name in :data:`LAYERS` (``oneshot.api``
    before ``oneshot``)."""
    parts = module.split(".")[1:] or ["__init__"]
    for size in range(len(parts), 0, -1):
        name = ".".join(parts[:size])
        for i, names in enumerate(LAYERS):
            if name in names:
                return i
    raise AssertionError(f"{module} is in no layer of tests/test_layers.py: place it in docs/design.md's order")


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        if name.startswith("recipe_spec.") or name == "recipe_spec":
            _layer(name)


def test_no_module_imports_a_layer_to_its_right() -> None:
    wrong = [
        f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
        for a, targets in EDGES.items() if a.split(".")[0] == "recipe_spec"
        for b in targets if b.split(".")[0] == "recipe_spec" and _layer(b) > _layer(a) and (a, b) not in DELEGATES
    ]
    assert not wrong, "\n".join(wrong)


def test_the_only_import_circle_is_the_documented_recipe_delegates() -> None:
    circles = _circles(EDGES)
    assert len(circles) <= 1, circles
    without = {a: {b for b in bs if (a, b) not in DELEGATES} for a, bs in EDGES.items()}
    assert _circles(without) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above could fail: a made-up back arrow is seen as a circle."""
    edges = {a: set(b) for a, b in EDGES.items()}
    edges["recipe_spec.masks.ops"].add("recipe_spec.masks.algorithms")
    assert any("recipe_spec.masks.ops" in c for c in _circles(edges))


def test_backends_import_neither_each_other_nor_their_manager_from_helpers() -> None:
    for name, targets in EDGES.items():
        pkg = name.split(".")[0]
        if pkg == "recipe_spec":
            continue
        other = {"recipe_spec_torch": "recipe_spec_keras", "recipe_spec_keras": "recipe_spec_torch"}[pkg]
        assert not any(t.split(".")[0] == other for t in targets), name


def test_the_front_desk_is_thin() -> None:
    top = sorted(p.stem for p in (ROOT / "recipe_spec").glob("*.py"))
    assert len(top) <= 14, top


@pytest.mark.parametrize("folder", ["recipe_spec", "backends"])
def test_no_module_is_over_450_lines(folder: str) -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / folder).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert not long, long
