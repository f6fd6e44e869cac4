"""The package's layers (docs/architecture.md): each imports only the layers below it."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "shardflow"
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
    layers = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "shardflow" and len(parts) > 1 and parts[1] in ALLOWED:
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
