"""The layering rules of docs/architecture.md, checked on every module's imports.

Each package may import only the packages its rule lists (a rule may narrow a package to
some of its modules, e.g. engine sees only transport's tensor refs); grpc only where the
gRPC edge is. Imports are read with `ast` (function-level and TYPE_CHECKING imports
included), so a lazy import is an arrow like any other. A failure names the file, the
line and the import, and says what that package may import.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# package -> what it may import: a package name allows all of it, a dotted name allows
# that module (and anything below it) only.
RULES: dict[str, tuple[str, ...]] = {
    "core": (),
    "protos": (),
    "graph": ("core",),
    "transport": ("core", "protos"),
    "engine": ("core", "graph.chunking", "transport.refs", "transport.dtypes"),
    "runtime": ("core", "graph", "transport", "engine", "protos"),
    "services": ("core", "graph", "transport", "engine", "runtime"),
    "conductor": ("core", "graph", "transport", "runtime", "protos"),
    "pipelines": ("core", "graph", "engine", "conductor.model", "conductor.placement"),
    "client": ("core", "transport", "protos", "runtime.run_client", "runtime.telemetry", "runtime.tls"),
    "cluster": ("core", "conductor", "runtime", "services", "pipelines", "engine.checkpoints", "transport"),
    "gateway": ("core", "client"),
    "cli": ("core", "protos", "graph", "transport", "engine", "runtime", "services", "conductor", "pipelines",
            "cluster", "client", "gateway", "cli"),
    "bench": ("core", "protos", "graph", "transport", "engine", "runtime", "services", "conductor", "pipelines",
              "cluster", "client", "gateway", "cli", "bench"),
}
GRPC_ALLOWED = {"runtime", "conductor", "client", "gateway", "cluster", "protos", "cli", "bench"}
GRPC_MODULES = ("grpc", "grpc_health", "grpc_reflection", "grpc_status")


@dataclass(frozen=True)
class Arrow:
    path: Path  # the importing file, relative to the repository
    line: int
    target: str  # the imported module, absolute and dotted

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[Arrow]:
    """Every import statement of one file, relative imports resolved to absolute names."""
    rel = path.relative_to(REPO)
    package = module_name(rel).split(".") if rel.name == "__init__.py" else module_name(rel).split(".")[:-1]
    arrows = []
    for node in ast.walk(ast.parse(path.read_text(), str(rel))):
        if isinstance(node, ast.Import):
            arrows += [Arrow(rel, node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            # `from pkg import mod` imports the module pkg.mod when it is one
            names = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
            arrows += [Arrow(rel, node.lineno, t) for t in (names or [target])]
    return arrows


def _is_module(dotted: str) -> bool:
    p = REPO.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def violation(arrow: Arrow) -> str | None:
    """Why `arrow` breaks the rules, or None when it is allowed."""
    src = arrow.path.parts[0]
    top = arrow.target.split(".")[0]
    if top in GRPC_MODULES and src not in GRPC_ALLOWED:
        return f"{arrow}: grpc is imported only in {sorted(GRPC_ALLOWED)}"
    if top == "tests":
        return f"{arrow}: only tests import tests (a fixture others need belongs in their package)"
    if top not in RULES or top == src and src != "cli":
        return None  # third-party, standard library, or the package itself
    allowed = RULES[src]
    if any(arrow.target == a or arrow.target.startswith(a + ".") for a in allowed):
        return None
    return f"{arrow}: {src} may import only {list(allowed) or 'nothing of the project'}"


def project_files() -> list[Path]:
    files = []
    for package in RULES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "_pb2" not in path.name and "__pycache__" not in path.parts:
                files.append(path)
    return files


def test_every_import_follows_the_layering():
    problems = [v for path in project_files() for a in imports_of(path) if (v := violation(a))]
    assert not problems, "imports against the layering rules:\n" + "\n".join(problems)


def test_every_package_has_a_rule():
    tops = {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()}
    assert tops - {"tests"} <= set(RULES), f"packages without a layering rule: {sorted(tops - set(RULES))}"


@pytest.mark.parametrize("src, line, expected", [
    ("engine/x.py", "from runtime.items import OpenNode", "engine may import only"),
    ("graph/x.py", "import transport.refs", "graph may import only"),
    ("engine/x.py", "from transport.arena import Arena", "engine may import only"),
    ("services/x.py", "import grpc", "grpc is imported only"),
    ("core/x.py", "from graph.chunking import FixedChunk", "nothing of the project"),
    ("bench/x.py", "from tests.fixtures import x", "only tests import tests"),
])
def test_a_wrong_import_is_named(tmp_path, src, line, expected):
    """The checker itself: a deliberately wrong arrow fails, naming file, line and import."""
    module = ast.parse(line).body[0]
    target = module.names[0].name if isinstance(module, ast.Import) else module.module
    problem = violation(Arrow(Path(src), 1, target))
    assert problem is not None and expected in problem and f"{src}:1: imports {target}" in problem


def test_allowed_imports_pass():
    for src, target in [("engine/x.py", "core.errors"), ("engine/x.py", "graph.chunking"),
                        ("cli/x.py", "cluster.registry"), ("runtime/x.py", "grpc"), ("engine/x.py", "torch")]:
        assert violation(Arrow(Path(src), 1, target)) is None, (src, target)


# ---- a model is its own folders: no generic module names a registered model -------------

def _model_forms() -> dict[str, str]:
    """Each spelling of a registered model with folders (served name, folder name, both
    without separators), lower case -> the served name."""
    from cluster.registry import model_folders

    forms = {}
    for folder, entry in model_folders().items():
        for form in (entry.name, folder, folder.replace("_", "")):
            forms[form] = entry.name
    return forms


def _owned_by_a_model(rel: Path, folders) -> bool:
    """Files the rule leaves alone: a model's own folders, the registry, tests, benchmarks."""
    parts = rel.parts
    if parts[0] in ("tests", "bench") or rel.as_posix() == "cluster/registry.py":
        return True
    owners = {("engine", "models"): 2, ("pipelines",): 1, ("services",): 1}
    return any(parts[:len(prefix)] == prefix and len(parts) > n + 1 and parts[n] in folders
               for prefix, n in owners.items())


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def model_names_in(path: Path, forms: dict[str, str]) -> list[str]:
    """Where a file names a model in code: identifiers, import paths and string literals;
    comments and docstrings may name one as an example."""
    import io
    import tokenize

    text = path.read_text()
    docstrings = _docstring_lines(ast.parse(text))
    kinds = {tokenize.NAME, tokenize.STRING} | {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in kinds or tok.start[0] in docstrings:
            continue
        low = tok.string.lower()
        for form, model in forms.items():
            if form in low:
                found.append(f"{path.relative_to(REPO)}:{tok.start[0]}: names model {model} ({tok.string[:60]!r})")
                break
    return found


def test_no_generic_module_names_a_registered_model():
    from cluster.registry import model_folders

    forms, folders = _model_forms(), set(model_folders())
    problems = [p for path in project_files() if not _owned_by_a_model(path.relative_to(REPO), folders)
                for p in model_names_in(path, forms)]
    assert not problems, ("generic modules that name a model (move the code into the model's folders, or take "
                          "it through a hook the model registers):\n" + "\n".join(problems))


def test_the_model_name_rule_catches_names_and_leaves_docstrings(tmp_path, monkeypatch):
    module = tmp_path / "mod.py"
    module.write_text('"""Serves e.g. qwen3-omni."""\nX = "sd3"  # orpheus in a comment is fine\n'
                      'from engine.models.vjepa2_ac import rope\ndef f():\n    """orpheus"""\n    return 1\n')
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    found = model_names_in(module, _model_forms())
    assert [f.split(": ")[0] for f in found] == ["mod.py:2", "mod.py:3"]
    assert _owned_by_a_model(Path("engine/models/sd3/dit.py"), {"sd3"})
    assert _owned_by_a_model(Path("services/orpheus/codec.py"), {"orpheus"})
    assert not _owned_by_a_model(Path("services/codec/factory.py"), {"orpheus"})
    assert not _owned_by_a_model(Path("engine/models/loader.py"), {"sd3"})
