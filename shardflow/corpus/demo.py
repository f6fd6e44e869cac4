"""The embedded default corpus: docstrings of the running interpreter's stdlib.

Real English text, no download. Modules whose import has side effects (opening
a browser, printing, starting a GUI, running tests) are never imported.
Documents are ordered by qualified name, so the corpus is deterministic for a
given Python build.

`build_demo_corpus` reads the docstrings in a fresh interpreter: what the calling
process already imported must not change the corpus (typing_extensions, pulled in
by pytest or torch, replaces helpers inside `typing`, and replaced functions no
longer count as defined there), and the ~600 modules imported for it stay out of
the caller.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import logging
import os
import pkgutil
import re
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass

from shardflow.core.atomic import atomic_open
from shardflow.core.fields import check_field_types, whole_floats_as_ints  # not core.config: see core.fields

log = logging.getLogger(__name__)

# Prefixes (module or package) never imported: side effects or GUI toolkits.
SKIP_PREFIXES = (
    "antigravity",
    # setuptools swaps in its own distutils: the corpus would depend on what is installed.
    "distutils",
    "this",
    "idlelib",
    "turtledemo",
    "turtle",
    "tkinter",
    "_tkinter",
    "test",
    "lib2to3.tests",
    "ctypes.test",
    "distutils.tests",
    "unittest.test",
    "sqlite3.test",
    "ensurepip",
    "venv",
    "pydoc_data",
    "xxsubtype",
    "xxlimited",
    "_xx",
    "_testcapi",
    "_testinternalcapi",
    "_testbuffer",
    "_testimportmultiple",
    "_testmultiphase",
    "_testsinglephase",
    "_testclinic",
    "_ctypes_test",
)


@dataclass(frozen=True)
class DemoParams:
    max_docs: int = 3000
    min_words: int = 20

    def __post_init__(self) -> None:
        # Checked here, in the job: max_docs '5' or 5.0 was kept, and the builder's fresh
        # interpreter stopped on it after importing the standard library; True made one document.
        whole_floats_as_ints(self)
        check_field_types(self)
        # As the config schema asks (minimum 1): max_docs 0 divided by zero when sampling,
        # and a negative one wrote an empty corpus.
        for key in ("max_docs", "min_words"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")


def _skipped(name: str) -> bool:
    if name.endswith("__main__") or ".__main__" in name:
        return True
    return any(name == p or name.startswith(p + ".") for p in SKIP_PREFIXES)


def _submodules(package: str, locations: list[str], names: set[str]) -> None:
    """Add the public, non-skipped submodules under `locations`, recursively.

    Found from the file system alone: `pkgutil.walk_packages` would import every
    package it meets (skipped ones such as `unittest.test` included) to read its
    `__path__`.
    """
    for info in pkgutil.iter_modules(locations, prefix=package + "."):
        # A private package's children are private too ("._" in their names).
        if _skipped(info.name) or "._" in info.name:
            continue
        names.add(info.name)
        if info.ispkg:
            spec = info.module_finder.find_spec(info.name)  # a finder lookup, no import
            if spec is not None and spec.submodule_search_locations:
                _submodules(info.name, list(spec.submodule_search_locations), names)


def stdlib_module_names() -> list[str]:
    """Top-level stdlib modules and the submodules of stdlib packages, sorted. Imports nothing."""
    names: set[str] = set()
    for top in sorted(sys.stdlib_module_names):
        if _skipped(top) or top.startswith("__"):
            continue
        names.add(top)
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.submodule_search_locations:
            continue
        _submodules(top, list(spec.submodule_search_locations), names)
    return sorted(names)


def _import_quietly(name: str):
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - optional C extensions, platform modules, SystemExit
            return None


def _defines(obj) -> bool:
    return inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj)


def _member_doc(member) -> str | None:
    if isinstance(member, (classmethod, staticmethod)):
        member = member.__func__
    if isinstance(member, property) or inspect.isfunction(member) or inspect.isroutine(member):
        doc = getattr(member, "__doc__", None)
        return doc if isinstance(doc, str) else None
    return None


def _docstrings(module) -> list[tuple[str, str]]:
    """(qualified name, docstring) of the module and what it defines, not what it imports."""
    out = []
    if isinstance(module.__doc__, str):
        out.append((module.__name__, module.__doc__))
    for attr, obj in sorted(vars(module).items()):
        if not _defines(obj) or getattr(obj, "__module__", None) != module.__name__:
            continue
        qual = f"{module.__name__}.{attr}"
        if isinstance(obj.__doc__, str):
            out.append((qual, obj.__doc__))
        if inspect.isclass(obj):
            for mname, member in sorted(vars(obj).items()):
                doc = _member_doc(member)
                if doc:
                    out.append((f"{qual}.{mname}", doc))
    return out


_SPACE = re.compile(r"\s+")


def clean(doc: str) -> str:
    return _SPACE.sub(" ", inspect.cleandoc(doc)).strip()


# Run by build_demo_corpus as `python -c`: without the working directory on the path
# (nothing there may shadow a stdlib module); shardflow from where this copy lives.
_CHILD = """
import json, sys
if sys.path[:1] == [""]:
    del sys.path[0]
sys.path.append({root!r})
from shardflow.corpus.demo import DemoParams, write_demo_corpus
stats = write_demo_corpus(sys.argv[1], DemoParams(**json.loads(sys.argv[2])))
print(json.dumps(stats))
"""


def build_demo_corpus(out_path: str, params: DemoParams) -> dict:
    """Write the demo corpus as JSONL (`id` = qualified name, `text`) from a fresh
    interpreter; return counts."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=root), os.fspath(out_path), json.dumps(asdict(params))],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the demo corpus failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    # The last line: a module may have written to the real stdout while imported.
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    log.info("demo corpus: %s", stats)
    return stats


def write_demo_corpus(out_path: str, params: DemoParams) -> dict:
    """`build_demo_corpus` in this process: imports most of the stdlib into it."""
    seen_texts: set[str] = set()
    docs: dict[str, str] = {}
    modules = stdlib_module_names()
    imported = 0
    for name in modules:
        module = _import_quietly(name)
        if module is None:
            continue
        imported += 1
        for qual, doc in _docstrings(module):
            text = clean(doc)
            if len(text.split()) < params.min_words or text in seen_texts or qual in docs:
                continue
            seen_texts.add(text)
            docs[qual] = text
    ordered = sorted(docs.items())
    if len(ordered) > params.max_docs:
        # Even stride over the sorted names keeps every part of the stdlib represented.
        step = len(ordered) / params.max_docs
        ordered = [ordered[int(i * step)] for i in range(params.max_docs)]
    with atomic_open(out_path, "w", encoding="utf-8") as fh:
        for qual, text in ordered:
            fh.write(json.dumps({"id": qual, "text": text}, ensure_ascii=False) + "\n")
    stats = {
        "modules_listed": len(modules),
        "modules_imported": imported,
        "docstrings_kept": len(docs),
        "documents": len(ordered),
        "python": sys.version.split()[0],
    }
    return stats
