"""The layout keeps the data flow visible (issue 12, docs/architecture.md): these tests fail the
moment a module imports against the flow, touches JAX internals outside the one package that
may, or speaks SQL outside the store."""
from __future__ import annotations

import ast
import functools

import pytest
from conftest import REPO

PKG = REPO / "jaxplace_cli"

# stage -> the stages it may import (besides itself). The order of the flow:
# model < store, sources, placement < capture, analysis < suggest < report < integrations, cli
ALLOWED = {
    "model": set(),
    "store": {"model"},
    "sources": {"model"},
    "placement": {"model"},
    "capture": {"model", "store", "placement"},
    "analysis": {"model", "store", "sources"},
    "suggest": {"model", "store", "analysis", "placement"},
    "report": {"model", "analysis", "suggest"},
    "integrations": {"model", "store", "placement", "capture", "analysis", "suggest", "report"},
    "cli": {"model", "store", "sources", "placement", "capture", "analysis", "suggest", "report",
            "integrations"},
}
JAX_INTERNALS_HOME = "capture/jaxhooks/"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
GENERATED = ("bench/results/", "jaxplace-runs/")  # outputs the docs name, ignored by git


@functools.cache
def _parsed(path) -> tuple[str, ast.Module]:
    """A source file's text and tree, parsed once for the whole file's tests (read only): each
    test parsing the package anew took ~10 s of the suite's CPU."""
    text = path.read_text()
    return text, ast.parse(text, filename=str(path))


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        yield (path.relative_to(PKG).as_posix(), *_parsed(path))


def _imported(tree) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
            out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return out


def test_every_module_belongs_to_a_stage():
    loose = [rel for rel, _, _ in _modules() if "/" not in rel and rel not in ("__init__.py", "__main__.py")]
    assert loose == [], "a module outside the stage packages: " + ", ".join(loose)
    stages = {rel.split("/")[0] for rel, _, _ in _modules() if "/" in rel}
    assert stages == set(ALLOWED)


def test_imports_only_run_down_the_flow():
    bad = []
    for rel, _, tree in _modules():
        if "/" not in rel:
            continue
        stage = rel.split("/")[0]
        for line, mod in _imported(tree):
            parts = mod.split(".")
            if parts[0] != "jaxplace_cli" or len(parts) < 2 or parts[1] in (stage, "__version__"):
                continue
            if parts[1] in ALLOWED and parts[1] not in ALLOWED[stage]:
                bad.append(f"{rel}:{line} ({stage}) imports {mod}")
    assert not bad, "\n".join(bad)


# Circles another branch of issue 23 removes (item 6): tolerated until it is merged, then dropped.
def _import_graph(modules) -> dict[str, dict[str, int]]:
    """module -> {module of the same stage it imports: line}, counting imports inside functions
    too (they run, only later). An import's target is the module defining the name: ``from
    pkg import sub`` is ``pkg/sub.py`` when that is a module, else ``pkg/__init__.py``. The
    parent packages' ``__init__`` that every import runs first are not counted (a package's
    ``__init__`` importing its own modules is not a circle)."""
    modules = {rel: tree for rel, tree in modules}
    by_name = {rel.removesuffix(".py").removesuffix("/__init__").replace("/", "."): rel for rel in modules}

    def target(name):
        parts = name.split(".")
        return by_name.get(".".join(parts[1:])) if parts[0] == "jaxplace_cli" else None

    graph: dict[str, dict[str, int]] = {}
    for rel, tree in modules.items():
        edges = graph[rel] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [target(f"{node.module}.{a.name}") or target(node.module) for a in node.names]
            elif isinstance(node, ast.Import):
                found = [target(a.name) for a in node.names]
            else:
                continue
            for dep in found:
                if dep and dep != rel and dep.split("/")[0] == rel.split("/")[0]:
                    edges.setdefault(dep, node.lineno)
    return graph


def _circles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_counts_imports_inside_functions():
    sources = {"a/x.py": "from jaxplace_cli.a.y import g\n",
               "a/y.py": "def g():\n    from jaxplace_cli.a import x\n",
               "a/z.py": "import jaxplace_cli.a.x\n",
               "b/w.py": "from jaxplace_cli.a import x\n"}
    graph = _import_graph((rel, ast.parse(text)) for rel, text in sources.items())
    assert graph == {"a/x.py": {"a/y.py": 1}, "a/y.py": {"a/x.py": 2}, "a/z.py": {"a/x.py": 1}, "b/w.py": {}}
    assert _circles(graph) == [["a/x.py", "a/y.py"]]


def test_no_import_circle_inside_a_stage():
    """Modules that import each other cannot be read, tested or split one at a time: inside a
    stage, imports run one way, as between stages."""
    graph = _import_graph((rel, tree) for rel, _, tree in _modules())
    bad = []
    for comp in _circles(graph):
        bad.append("circle: " + ", ".join(f"{rel}:{graph[rel][dep]} imports {dep}"
                                          for rel in comp for dep in graph[rel] if dep in comp))
    assert not bad, "\n".join(bad)


def test_jax_internals_only_in_one_package():
    bad = []
    for rel, _, tree in _modules():
        if rel.startswith(JAX_INTERNALS_HOME):
            continue
        bad += [f"{rel}:{line} imports {mod}" for line, mod in _imported(tree)
                if mod.startswith(("jax._src", "jaxlib."))]
        bad += [f"{rel}:{node.lineno} names module {node.value!r}" for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.value.startswith("jax._src")]  # importlib.import_module("jax._src...")
    assert not bad, "\n".join(bad)



def test_sql_only_in_the_store():
    bad = []
    for rel, _, tree in _modules():
        if rel.startswith("store/"):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("execute", "executemany", "executescript")):
                bad.append(f"{rel}:{node.lineno} .{node.func.attr}(")
    assert not bad, "\n".join(bad)



def test_no_module_or_function_too_long_to_read():
    """Over ~400 lines a module, over ~80 a function, needs a reason: a function says it in a
    ``# long: why`` comment on the line after its signature."""
    bad = []
    for rel, text, tree in _modules():
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            bad.append(f"{rel}: {n} lines")
        lines = text.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                head = "\n".join(lines[node.lineno - 1:node.body[0].lineno])
                if length > MAX_FUNCTION_LINES and "# long:" not in head:
                    bad.append(f"{rel}:{node.lineno} {node.name}() {length} lines")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_each_stage_says_what_it_owns(stage):
    doc = ast.get_docstring(ast.parse((PKG / stage / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"jaxplace_cli/{stage}/__init__.py needs a docstring saying what the stage owns"


def test_architecture_doc_names_every_stage():
    text = (REPO / "docs" / "architecture.md").read_text()
    for stage in ALLOWED:
        assert f"`{stage}/`" in text, stage


def test_docs_name_only_files_that_exist():
    """A doc that points at a file the repo does not contain misleads a newcomer."""
    import re

    bad = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for m in re.finditer(r"`((?:jaxplace_cli|tests|bench|sample_scripts|docs|audits)/[\w./-]+)`", doc.read_text()):
            target = m.group(1).rstrip(".")
            if "*" in target or "<" in target or target.startswith(GENERATED):
                continue
            if not (REPO / target).exists():
                bad.append(f"{doc.name}: {target}")
    assert not bad, "\n".join(bad)


def test_commands_raise_their_errors():
    """One error path (issue 23): a command raises a ``JaxplaceError`` and ``cli/main.py`` alone
    turns it into one line and an exit code; no command prints and exits by itself."""
    bad = [f"{path.relative_to(PKG)}:{i}" for path in sorted((PKG / "cli").glob("*.py"))
           for i, line in enumerate(path.read_text().splitlines(), 1) if "fail(" in line]
    assert not bad, "fail( in cli/: " + ", ".join(bad)

HOOKS_PKG = "jaxplace_cli.capture.jaxhooks"
HOOKS_HOME = "jaxplace_cli/capture/recording.py"  # capture.recording.Recording: reference counted
HOOKS_USE_ALLOWED = {
    "jaxplace_cli/capture/jaxhooks/__init__.py": "defines install/uninstall",
    "tests/scripts/faults/inject.py": "wraps jaxhooks.install to send a signal while hooks go in",
}


def _hook_installs(tree) -> list[int]:
    """Lines that name ``jaxhooks.install``/``uninstall``: imported by name, or read as an
    attribute of the jaxhooks package under any alias (``hooks.install(...)``)."""
    aliases, lines = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == HOOKS_PKG:
            lines += [node.lineno for a in node.names if a.name in ("install", "uninstall")]
        elif isinstance(node, ast.ImportFrom) and node.module == HOOKS_PKG.rsplit(".", 1)[0]:
            aliases.update(a.asname or a.name for a in node.names if a.name == "jaxhooks")
        elif isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name == HOOKS_PKG and a.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("install", "uninstall"):
            if (isinstance(node.value, ast.Name) and node.value.id in aliases) or ast.unparse(node.value) == HOOKS_PKG:
                lines.append(node.lineno)
    return sorted(lines)


def test_one_place_installs_hooks():
    """Only ``capture/recording.py`` installs or removes JAX's hooks: every user (jaxplace run,
    budget(), device_placement, the pytest plugin, the tests' in-process recorder) holds a
    ``Recording``, so nested and concurrent uses share one reference-counted install."""
    found = {}
    for path in sorted([*PKG.rglob("*.py"), *(REPO / "tests").rglob("*.py")]):
        rel = path.relative_to(REPO).as_posix()
        lines = _hook_installs(_parsed(path)[1])
        if lines:
            found[rel] = lines
    assert HOOKS_HOME in found, "the scan no longer sees capture/recording.py install the hooks"
    bad = [f"{rel}:{lines}" for rel, lines in found.items() if rel != HOOKS_HOME and rel not in HOOKS_USE_ALLOWED]
    assert not bad, "install/uninstall the hooks through capture.recording.Recording:\n" + "\n".join(bad)


# Names in comments and docstrings that are not this repo's files: placeholders of examples
# (a user's script, a policy file) and paths in other projects (JAX's source, pyinstrument's).
EXAMPLE_NAMES = {"train.py", "script.py", "x.py", "file.py", "FILE.py", "jaxplace_cli.py", "-odd-name.py",
                 "p.toml", "policy.toml", "rules.toml", "PATH.py"}
OTHER_PROJECTS = ("jax/", "examples/", "renderers/", "dir/", "pkg/")


def _comments_and_docstrings(path):
    import io
    import tokenize

    src, tree = _parsed(path)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def test_comments_name_only_files_that_exist():
    """A comment or docstring that cites a file the repo does not have (a design note kept
    elsewhere, a module renamed long ago) sends the reader looking for nothing (issue 23)."""
    import re

    pattern = re.compile(r"(?<![\w.$/-])((?:[\w-]+/)*[\w-]+\.(?:py|c|md|toml))\b")
    names = {p.name for d in ("jaxplace_cli", "tests", "bench", "docs", "sample_scripts", "audits")
             for p in (REPO / d).rglob("*")} | {p.name for p in REPO.iterdir()}
    bad = []
    for path in sorted(p for d in ("jaxplace_cli", "tests", "bench") for p in (REPO / d).rglob("*.py")):
        if "data" in path.relative_to(REPO).parts:
            continue
        for line, text in _comments_and_docstrings(path):
            for m in pattern.finditer(text):
                name = m.group(1)
                if name in EXAMPLE_NAMES or name.startswith(OTHER_PROJECTS):
                    continue
                if "/" in name:
                    ok = any((base / name).exists() for base in (REPO, PKG, path.parent, path.parent.parent))
                else:
                    ok = name in names
                if not ok:
                    bad.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert not bad, "\n".join(bad)


def test_every_rule_is_documented_in_the_schema_and_in_rules_md():
    """The rules `audit --rule` accepts (and `recording-incomplete`, which every audit of a lossy
    run has) each have a row in docs/audit-json-schema.md's rules table and a section in
    docs/rules.md: a new rule that is not documented fails here."""
    from jaxplace_cli.analysis.findings import RULES
    from jaxplace_cli.analysis.rules.distributed import JOB_RULES

    schema = (REPO / "docs" / "audit-json-schema.md").read_text().split("## Rules", 1)[1].split("\n## ", 1)[0]
    rules_md = (REPO / "docs" / "rules.md").read_text()
    headings = [line[3:] for line in rules_md.splitlines() if line.startswith("## ")]
    missing = [r for r in [*RULES, *JOB_RULES, "recording-incomplete"]
               if f"`{r}`" not in schema or not any(r in h.replace(",", " ").split() for h in headings)]
    assert not missing, missing
