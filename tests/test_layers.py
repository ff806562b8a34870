"""The floor plan holds: one concept per subpackage, in a strict layer order (no module imports
one of a layer to its right), no import circle but the documented one, between modules or
between packages, no framework in the core, no private name imported across modules, a thin
front desk.

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
    ("atomic", "diagnostics", "text", "masks", "compressed_tensors", "quantization"),
    ("recipe",),
    ("modifiers",),
    ("schedule", "params", "registry"),
    ("checks", "pruning"),
    ("stage_dialect",),
    ("oneshot",),
    ("loader",),
    ("validation",),
    ("lint", "lint_scheme", "parallel", "fix", "convert"),
    ("runtime",),
    ("oneshot.api", "oneshot.objects", "one_shot", "datasets"),
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


#: The frameworks only the backends import (``recipe_spec`` reaches them through a backend).
FRAMEWORKS = frozenset({"torch", "tensorflow", "keras", "jax", "transformers", "keras_hub", "lightning"})


def _imported_roots(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_core_imports_no_framework() -> None:
    """No module of ``recipe_spec`` imports torch, TensorFlow, Keras, JAX, transformers,
    keras-hub or Lightning, at module level or inside a function: framework code lives in the
    backends (``import recipe_spec`` and ``validate`` importing none is tested at run time too)."""
    found = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & FRAMEWORKS)
             for p in (ROOT / "recipe_spec").rglob("*.py")}
    assert not {k: v for k, v in found.items() if v}


def test_the_framework_check_finds_a_framework_import(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import torch.nn as nn\n    from transformers import AutoConfig\n")
    assert _imported_roots(module) & FRAMEWORKS == {"torch", "transformers"}


def _unit(module: str) -> str:
    """The layer-table entry ``module`` belongs to (its package, or a dotted entry such as
    ``oneshot.api``)."""
    parts = module.split(".")[1:] or ["__init__"]
    names = {n for layer in LAYERS for n in layer}
    for size in range(len(parts), 0, -1):
        if ".".join(parts[:size]) in names:
            return ".".join(parts[:size])
    return parts[0]


#: Package-level arrows kept on purpose (docs/design.md): the backend contract in ``registry``
#: names ``params``' record type, and ``params`` asks the backends for a model's records.
PACKAGE_EXCEPTIONS = {("params", "registry"), ("registry", "params")}


def _package_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for a, targets in EDGES.items():
        if a.split(".")[0] != "recipe_spec":
            continue
        for b in targets:
            if b.split(".")[0] != "recipe_spec" or (a, b) in DELEGATES:
                continue
            ua, ub = _unit(a), _unit(b)
            if ua != ub and (ua, ub) not in PACKAGE_EXCEPTIONS:
                edges[f"recipe_spec.{ua}"].add(f"recipe_spec.{ub}")
    return edges


def test_no_import_circle_between_packages() -> None:
    """Circles between packages (one module of A imports B, one of B imports A), which the
    module-level check cannot see, are none but the documented exceptions."""
    edges = _package_edges()
    assert _circles(edges) == [], _circles(edges)


def test_the_package_circle_finder_finds_one() -> None:
    edges = {a: set(b) for a, b in _package_edges().items()}
    edges.setdefault("recipe_spec.masks", set()).add("recipe_spec.oneshot")
    edges.setdefault("recipe_spec.oneshot", set()).add("recipe_spec.masks")
    assert any("recipe_spec.masks" in c for c in _circles(edges))


def _private_imports(path: pathlib.Path, module: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = "recipe_spec"  # relative: one of this project's modules
            else:
                target = node.module or ""
            if target.split(".")[0] not in PACKAGES:
                continue  # the standard library's and other packages' own business
            out += [f"{module}:{node.lineno} imports {a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_private_name_is_imported_across_modules() -> None:
    """A name another module needs is part of its module's interface: public, not ``_name``
    (a split along an interface, not along a line count)."""
    found = [line for name, path in MODULES.items() for line in _private_imports(path, name)]
    assert not found, "\n".join(found)


#: Modules over ~400 lines, each with the reason it is one module (none today).
LONG_MODULES: dict[str, str] = {}


@pytest.mark.parametrize("folder", ["recipe_spec", "backends"])
def test_a_long_module_has_a_reason(folder: str) -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / folder).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert not {k: n for k, n in long.items() if k not in LONG_MODULES}, long
