"""The built-in demo corpus: stdlib docstrings, enough of them, deterministic, and
built without importing the modules that have side effects."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardflow.corpus import demo
from shardflow.corpus.demo import DemoParams, build_demo_corpus

REPO = Path(__file__).resolve().parents[3]
# Importing any of these opens a browser, prints, or loads a GUI toolkit.
NEVER_IMPORTED = ("antigravity", "this", "idlelib", "tkinter", "turtledemo", "turtle", "test", "unittest.test")


def read_docs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict]:
    """The demo corpus with the shipped parameters, written by `write_demo_corpus` (the
    in-process builder) in a fresh interpreter that then reports what it imported."""
    out = tmp_path_factory.mktemp("demo") / "corpus.jsonl"
    script = textwrap.dedent(f"""
        import json, sys
        from shardflow.corpus.demo import DemoParams, write_demo_corpus
        stats = write_demo_corpus({str(out)!r}, DemoParams())
        print(json.dumps({{"stats": stats, "modules": sorted(sys.modules)}}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    return out, json.loads(proc.stdout.strip().splitlines()[-1])


def test_has_at_least_2000_documents(built):
    path, child = built
    docs = read_docs(path)
    assert len(docs) >= 2000
    assert child["stats"]["documents"] == len(docs)


def test_every_document_has_min_words(built):
    path, _ = built
    min_words = DemoParams().min_words
    short = [d["id"] for d in read_docs(path) if len(d["text"].split()) < min_words]
    assert short == []


def test_ids_are_unique_and_sorted(built):
    path, _ = built
    ids = [d["id"] for d in read_docs(path)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


def test_texts_are_unique_and_whitespace_normalised(built):
    path, _ = built
    texts = [d["text"] for d in read_docs(path)]
    assert len(set(texts)) == len(texts)
    assert all(t == " ".join(t.split()) for t in texts)


def test_skipped_modules_are_never_imported(built):
    _, child = built
    modules = child["modules"]
    leaked = [m for m in modules if any(m == p or m.startswith(p + ".") for p in NEVER_IMPORTED)]
    assert leaked == []
    assert "json" in modules and "email.message" in modules  # it did import the rest


def test_checking_the_params_brings_nothing_into_the_builders_interpreter(built):
    """DemoParams checks its fields there too (core.fields): typing_extensions, which
    core.config's jsonschema imports, patches `typing` and changed the corpus."""
    _, child = built
    assert not {"typing_extensions", "jsonschema", "yaml"} & set(child["modules"])


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # each was kept, and the builder's interpreter stopped on it (True made one document)
        ({"max_docs": "5"}, "max_docs '5': expected an integer"),
        ({"max_docs": True}, "max_docs True: expected an integer"),
        ({"max_docs": 5.5}, "max_docs 5.5: expected an integer"),
        ({"min_words": None}, "min_words None: expected an integer"),
    ],
)
def test_a_wrong_python_type_is_one_error_naming_the_field(kw, message):
    with pytest.raises(TypeError) as info:
        DemoParams(**kw)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # the schema's minimum 1: max_docs 0 was a ZeroDivisionError when sampling, -1 an empty corpus
        ({"max_docs": 0}, "max_docs must be >= 1, got 0"),
        ({"max_docs": -1}, "max_docs must be >= 1, got -1"),
        ({"min_words": 0}, "min_words must be >= 1, got 0"),
    ],
)
def test_a_count_below_the_schemas_minimum_is_one_error_naming_the_field(kw, message):
    with pytest.raises(ValueError) as info:
        DemoParams(**kw)
    assert str(info.value) == message


def test_whole_floats_are_ints():
    """demo.max_docs 3000.0 passes the schema's "integer"; range() in the builder refused it."""
    params = DemoParams(max_docs=3000.0, min_words=20.0)
    assert [(type(v), v) for v in (params.max_docs, params.min_words)] == [(int, 3000), (int, 20)]


def test_listing_modules_imports_nothing():
    script = (
        "import sys; from shardflow.corpus import demo; before = set(sys.modules); "
        "names = demo.stdlib_module_names(); "
        "print(len(names), sorted(m for m in set(sys.modules) - before if demo._skipped(m)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    count, leaked = proc.stdout.split(" ", 1)
    assert int(count) > 300
    assert leaked.strip() == "[]"


def test_build_is_identical_to_a_fresh_interpreters(built, tmp_path):
    # This pytest process has imported typing_extensions, which patches `typing`:
    # building in-process here would drop typing's patched helpers and shift the sample.
    path, child = built
    again = tmp_path / "again.jsonl"
    stats = build_demo_corpus(str(again), DemoParams())
    assert again.read_bytes() == path.read_bytes()
    assert stats == child["stats"]


def test_two_builds_are_identical(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    build_demo_corpus(str(a), DemoParams(max_docs=500))
    build_demo_corpus(str(b), DemoParams(max_docs=500))
    assert a.read_bytes() == b.read_bytes()


def test_max_docs_takes_an_even_sample(built, tmp_path):
    path, _ = built
    full = [d["id"] for d in read_docs(path)]
    out = tmp_path / "small.jsonl"
    stats = build_demo_corpus(str(out), DemoParams(max_docs=100))
    ids = [d["id"] for d in read_docs(out)]
    assert len(ids) == stats["documents"] == 100
    # Spread over the whole alphabet of module names, not the first hundred.
    assert ids[0] < full[100] and ids[-1] > full[-len(full) // 10]


def test_higher_min_words_keeps_only_long_docstrings(tmp_path):
    out = tmp_path / "long.jsonl"
    build_demo_corpus(str(out), DemoParams(max_docs=200, min_words=150))
    docs = read_docs(out)
    assert docs and all(len(d["text"].split()) >= 150 for d in docs)


@pytest.mark.parametrize(
    "name, skipped",
    [
        ("antigravity", True),
        ("this", True),
        ("idlelib.run", True),
        ("tkinter.ttk", True),
        ("turtledemo", True),
        ("unittest.test.testmock", True),
        ("json.__main__", True),
        ("thisismodule", False),
        ("tests", False),
        ("json.tool", False),
        ("unittest.mock", False),
    ],
)
def test_skip_rule_matches_whole_name_parts(name, skipped):
    assert demo._skipped(name) is skipped


def test_stdlib_module_names_lists_public_submodules_only():
    names = demo.stdlib_module_names()
    assert names == sorted(names)
    assert {"json", "json.decoder", "email.mime.text", "xml.etree.ElementTree"} <= set(names)
    assert not [n for n in names if demo._skipped(n) or "._" in n]


def test_clean_collapses_indentation_and_newlines():
    assert demo.clean("Summary line.\n\n    Indented   body\n    text.\n") == "Summary line. Indented body text."
