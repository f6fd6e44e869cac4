"""The package's layers (docs/architecture.md): each imports only the layers below it,
and the doc's layer table names every module of each layer and what it may import."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "shardflow"
DOC = PACKAGE.parent / "docs" / "architecture.md"
ALLOWED = {
    "core": {"core"},
    "corpus": {"core", "corpus"},
    "embed": {"core", "corpus", "embed"},
    "retrieval": {"core", "corpus", "retrieval"},
    "summarise": {"core", "corpus", "embed", "summarise"},
    "train": {"core", "corpus", "train"},
    "sweep": {"core", "corpus", "sweep"},
    "workflow": {"core", "corpus", "embed", "retrieval", "summarise", "sweep", "train", "workflow"},
}


def _imported_layers(path: Path) -> set[str]:
    """The layers (and `cli`, which no layer may import) that `path` imports, relative
    imports resolved against the file's own package."""
    package = path.relative_to(PACKAGE.parent).parent.parts
    layers = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "shardflow" and len(parts) > 1 and (parts[1] in ALLOWED or parts[1] == "cli"):
                layers.add(parts[1])
    return layers


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer):
    folder = PACKAGE / layer
    assert folder.is_dir(), folder
    offending = {
        str(path.relative_to(PACKAGE)): sorted(_imported_layers(path) - ALLOWED[layer])
        for path in sorted(folder.rglob("*.py"))
        if _imported_layers(path) - ALLOWED[layer]
    }
    assert not offending, f"layer {layer} imports above itself: {offending}"


def test_every_package_folder_is_a_known_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders <= set(ALLOWED), folders - set(ALLOWED)


def _outside_parentheses(text: str) -> str:
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    return text


def _doc_layers() -> dict[str, tuple[set[str], str]]:
    """docs/architecture.md's layer table: layer -> (the modules its row names, outside
    their parenthesised notes; its "may import" cell)."""
    table = DOC.read_text().split("## Package layers", 1)[1]
    rows = {}
    for line in table.splitlines():
        if line.startswith("| `shardflow."):
            layer, modules, may_import = (c.strip() for c in line.strip().strip("|").split(" | "))
            rows[layer.strip("`").removeprefix("shardflow.")] = (
                set(re.findall(r"`(\w+)`", _outside_parentheses(modules))),
                _outside_parentheses(may_import).strip(),
            )
    return rows


def test_the_architecture_doc_has_a_row_for_every_layer_and_the_cli():
    tops = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    tops |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert set(_doc_layers()) == tops


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_the_architecture_doc_names_every_module_of_a_layer_and_none_it_lacks(layer):
    """A new module gets its line in the table, where a new capability's author looks
    for what exists (the one implementation of each helper); a removed one leaves it."""
    named, _ = _doc_layers()[layer]
    modules = {p.stem for p in (PACKAGE / layer).glob("*.py") if p.stem != "__init__"}
    assert not modules - named, f"docs/architecture.md does not name shardflow.{layer}'s {sorted(modules - named)}"
    assert not named - modules, (
        f"docs/architecture.md names shardflow.{layer} modules that do not exist: {sorted(named - modules)}"
    )


def test_the_architecture_docs_may_import_column_is_the_rule_this_module_checks():
    rows = _doc_layers()
    above: list[str] = []
    for layer, (_, may_import) in rows.items():
        if layer == "cli":
            assert may_import == "anything"
            continue
        if may_import == "nothing else in shardflow":
            allowed = set()
        elif may_import == "every layer above":
            allowed = set(above)
        else:
            allowed = set(re.findall(r"[a-z]+", may_import))
        assert allowed | {layer} == ALLOWED[layer], layer
        above.append(layer)
