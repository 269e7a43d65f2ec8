"""The import structure of ``src/envfleet`` and of the repository's ``benchmarks/`` (not installed):
no import cycle, no import from a lower layer to a higher one (docs/ARCHITECTURE.md, "Layers");
``benchmarks`` is the top layer, so the installed package never imports it; the env families
(``envs/``), the guide's code and the examples reach the native layer only through the kernel
contract, ``envfleet.kernels``.

The graph is read from the source with ``ast``: every ``import`` of an envfleet module counts,
at module level or inside a function (a lazy import is still a dependency), except in an
``if __name__ == "__main__":`` block (it runs only when the module is the program itself, so
nothing that imports the module depends on it). ``from package import name`` counts as an
import of ``package.name`` when that is a module, else of ``package``. Importing a module runs
its parent packages' ``__init__`` too; that is not counted (it is how Python imports, not a
choice of the importing module).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "envfleet"

#: the one module of the native layer that a family (``envfleet.envs``) and the guide's code
#: (docs, examples) import: the kernel contract
CONTRACT = "envfleet.kernels"
#: the pages whose code teaches writing a family, and the examples
GUIDE = ("README.md", "docs/USAGE.md", "docs/NATIVE_ENVS.md")
GUIDE_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: the measurement tree at the repository's root (studies, chess peers, GPU check, scripts)
BENCHMARKS = ROOT / "benchmarks"
#: the top-level packages whose imports make the graph
TOP_LEVEL = ("envfleet", "benchmarks")

#: the layers, lowest first: a module may import its own layer's modules and lower layers'
#: (module name prefixes; the longest matching prefix places a module)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the vector contract, the machine's cores and CPU accounting, the backend tables,
    # what every subcommand shares: no envfleet imports
    ("base", ("envfleet.contract", "envfleet.machine", "envfleet.backends",
              "envfleet.command")),
    # the kernel contract (``envfleet.kernels``, the public face of what ``native/`` holds for
    # a family) and the engines, native construction, make()'s memory estimate: nothing
    # env-specific
    ("native", ("envfleet.native", "envfleet.kernels")),
    # the native families, and the batched engines over C simulators (Atari, MuJoCo)
    ("envs", ("envfleet.envs", "envfleet.atari", "envfleet.mujoco")),
    ("executors", ("envfleet.executors",)),  # N copies of any Gymnasium env
    ("registry", ("envfleet.registry",)),  # make(): env id + backend -> VectorEnv
    # the public faces over make(): the package itself, SB3, Chess-v0's API
    ("facades", ("envfleet", "envfleet.sb3", "envfleet.chess")),
    ("train", ("envfleet.train",)),  # PPO (`envfleet train` / `eval`)
    # measuring everything below, training included (the e2e studies run PPO); tune is
    # bench's measurements put to a question
    ("bench", ("envfleet.bench", "envfleet.tune")),
    ("cli", ("envfleet.cli", "envfleet.__main__")),  # the command line
    # the measurements that are not installed: they use anything above, nothing uses them
    ("benchmarks", ("benchmarks",)),
)


def module_names() -> dict[str, Path]:
    """Every module of the package and of ``benchmarks/`` by dotted name (a package by its own
    name)."""
    names = {}
    for top in (PACKAGE, BENCHMARKS):
        for path in top.rglob("*.py"):
            parts = path.relative_to(top.parent).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of ``module``: its longest matching prefix."""
    best, length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best


def _is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``."""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__"
                    for c in test.comparators))


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree``, at any depth, outside ``__main__`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if _is_main_block(node):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {envfleet or benchmarks module it imports: line of the first such import}."""
    names = module_names()

    def resolve(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in names.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        deps: dict[str, int] = {}
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names
                           if a.name.partition(".")[0] in TOP_LEVEL]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                if base.partition(".")[0] not in TOP_LEVEL:
                    continue
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else resolve(base)
                           for a in node.names]
            for target in targets:
                if target is not None and target != module:
                    deps.setdefault(target, node.lineno)
        graph[module] = deps
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    for module in module_names():
        layer_of(module)


def test_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    lines = []
    for component in found:
        members = set(component)
        edges = [f"    {m} -> {d} (line {line})" for m in component
                 for d, line in sorted(graph[m].items()) if d in members]
        lines.append(f"  {', '.join(component)}:\n" + "\n".join(edges))
    assert not found, "import cycles in src/envfleet or benchmarks:\n" + "\n".join(lines)


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    upward = []
    for module, deps in sorted(import_graph().items()):
        mine = layer_of(module)
        for dep, line in sorted(deps.items()):
            theirs = layer_of(dep)
            if theirs > mine:
                upward.append(f"  {module} ({LAYERS[mine][0]}) imports {dep} "
                              f"({LAYERS[theirs][0]}) at line {line}")
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_the_checks_see_cycles_and_upward_imports() -> None:
    """The graph and the checks themselves: a lazy import in a function counts, a cycle is
    found, ``__main__`` blocks are not counted."""
    tree = ast.parse("def f():\n    import envfleet.cli\nif __name__ == '__main__':\n"
                     "    import envfleet.bench\n")
    assert [n.names[0].name for n in _imports(tree)] == ["envfleet.cli"]
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == \
        [["a", "b", "c"]]
    assert layer_of("envfleet.executors.ray") > layer_of("envfleet.native.build")
    assert layer_of("benchmarks.chess.games") > layer_of("envfleet.train.cli")
    assert _native_imports("import envfleet.kernels\nfrom envfleet.native import rng\n"
                           "from envfleet import kernels\nimport envfleet.native.spec\n") == \
        ["envfleet.native", "envfleet.native.spec"]


def test_families_import_only_the_kernel_contract_from_the_native_layer() -> None:
    native = layer_of("envfleet.native")
    found = [f"  {module} imports {dep} at line {line}"
             for module, deps in sorted(import_graph().items())
             if module == "envfleet.envs" or module.startswith("envfleet.envs.")
             for dep, line in sorted(deps.items())
             if layer_of(dep) == native and dep != CONTRACT]
    assert not found, (f"a family imports the native layer other than through {CONTRACT}:\n"
                       + "\n".join(found))


def _native_imports(source: str) -> list[str]:
    """The envfleet modules of the native layer other than ``CONTRACT`` that ``source``
    imports."""
    found = []
    for node in _imports(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""])
        found += [n for n in names if n.startswith("envfleet.")
                  and layer_of(n) == layer_of("envfleet.native") and n != CONTRACT]
    return found


def test_the_guide_and_the_examples_import_only_the_kernel_contract() -> None:
    """The guide's code (its ``python`` blocks) and the examples name ``envfleet.kernels``,
    never a module of ``envfleet.native``, in their imports and in their text."""
    found = []
    for page in GUIDE:
        text = (ROOT / page).read_text()
        found += [f"  {page}:{text.count(chr(10), 0, m.start()) + 1}: {m.group()}"
                  for m in re.finditer(r"envfleet\.native[\w.]*", text)]
        for block in GUIDE_BLOCK.findall(text):
            found += [f"  {page}: imports {name}" for name in _native_imports(block)]
    for path in sorted((ROOT / "examples").glob("*.py")):
        found += [f"  examples/{path.name}: imports {name}"
                  for name in _native_imports(path.read_text())]
    assert not found, f"the guide reaches past {CONTRACT}:\n" + "\n".join(found)


def test_the_installed_package_never_imports_benchmarks() -> None:
    """``benchmarks/`` is not in the wheel: a module of ``src/envfleet`` that imports it would
    fail wherever envfleet is installed."""
    graph = import_graph()
    found = [f"  {module} imports {dep} at line {line}" for module, deps in sorted(graph.items())
             if module.startswith("envfleet") for dep, line in sorted(deps.items())
             if dep.startswith("benchmarks")]
    assert not found, "src/envfleet imports benchmarks:\n" + "\n".join(found)
