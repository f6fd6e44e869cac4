"""config/README.md, config/config.yaml and config/config.schema.yaml say the same thing.

Users learn each key from config/README.md; the schema is what the parse checks and
fills in; config.yaml is what a run without a --configfile runs with. These tests fail
when one of them changes and the others are not brought along:

- every key the schema takes is a row of one of the README's key tables, and every row
  names a key the schema takes (sweep keys: the `## sweeps` table, against the keys
  shardflow.sweep.spec takes);
- every key of config.yaml is in the schema and holds the schema's default;
- every default a table's `default` column states is the schema's;
- every YAML snippet of the docs that is a workflow config is one the parse accepts.

How the README names keys (its own convention, read here, not a new one): a table headed
`| key | default | meaning |` under a `## ` heading; the key cell holds the key's full
dotted path in backticks (`input.path`), more siblings after it by their last part
(`` `retrieval.msmarco_collection`, `msmarco_queries` ``). Two kinds of part stand for
many keys: `<rule>` (any key of that section: `resources.<rule>.gpu`), and `*` (each key
the row names in backticks: `summarise.generation.*`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from shardflow.core.config import _branches, load_schema, read_yaml, validate_config
from shardflow.sweep.metrics import unknown_metrics
from shardflow.sweep.spec import SWEEP_KEYS, merge, parse_sweeps
from tests.conftest import REPO

SCHEMA = load_schema(REPO / "config" / "config.schema.yaml")
SHIPPED = read_yaml(REPO / "config" / "config.yaml")
README = REPO / "config" / "README.md"
TABLE_HEADER = "| key | default | meaning |"
# The docs whose ```yaml snippets a user copies into a --configfile.
SNIPPET_DOCS = (README, REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "profiles" / "README.md")

# Shipped values that are not the schema's default, and why. resources.<rule> share one
# definition ($defs.gpu_rule), whose defaults are what a rule gets when the config leaves
# a key out; the train job is shipped with more memory and time than the GPU inference
# rules (config/README.md, `resources`, says so).
SHIPPED_NOT_DEFAULT = {
    "resources.train.mem_mb": 8000,
    "resources.train.mem_mb_per_attempt": 8000,
    "resources.train.runtime": 720,
}


def _resolved(node: dict) -> dict:
    """A key's schema with its `$ref` (within this schema) replaced by what it names; the
    key's own keywords (`default`, `description`) stay over the definition's."""
    ref = node.get("$ref")
    if ref is None:
        return node
    target = SCHEMA
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def schema_keys(node: dict = SCHEMA, prefix: str = "") -> dict[str, dict]:
    """Every leaf key path of the schema -> its schema. A section (`properties`) is walked
    into; anything else is a leaf, a map of the user's own keys included (`sweeps`,
    `reproduce.expect.metrics`: `additionalProperties` alone), since its keys are data,
    named by the user, not keys to document (a `patternProperties` map would be one too)."""
    out = {}
    for name, sub in node["properties"].items():
        sub = _resolved(sub)
        path = f"{prefix}{name}"
        if "properties" in sub:
            out.update(schema_keys(sub, f"{path}."))
        else:
            out[path] = sub
    return out


def readme_rows(text: str) -> list[dict]:
    """The rows of config/README.md's key tables: line, section (the `## ` heading's
    backticked name, else its text), names (full dotted paths), defaults (the YAML values
    the default column holds in backticks, one for all names or one each; None where it
    holds other words: `required`) and the whole row's text."""
    rows = []
    section = None
    in_table = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            heading = line[3:].strip()
            section = heading.strip("`") if re.fullmatch(r"`[^`]+`", heading) else heading
        if line.strip() == TABLE_HEADER:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or re.fullmatch(r"\|( *-+ *\|)+", line.strip()):
            continue
        _, key_cell, default_cell, _meaning = line.split("|", 3)  # a meaning may hold `|norm - 1|`
        written = re.findall(r"`([^`]+)`", key_cell)
        assert written, f"config/README.md:{number}: a key table's row names no key in backticks: {line[:80]}"
        parent = written[0].rpartition(".")[0]
        names = [written[0], *(f"{parent}.{n}" if parent and "." not in n else n for n in written[1:])]
        values = re.findall(r"`([^`]*)`", default_cell)
        if not values:
            defaults = None
        else:
            assert len(values) in (1, len(names)), f"config/README.md:{number}: {len(values)} defaults for {names}"
            defaults = [yaml.safe_load(v) for v in (values * len(names) if len(values) == 1 else values)]
        rows.append({"line": number, "section": section, "names": names, "defaults": defaults, "text": line})
    return rows


README_TEXT = README.read_text(encoding="utf-8")
ROWS = readme_rows(README_TEXT)
CONFIG_ROWS = [row for row in ROWS if row["section"] != "sweeps"]


def _pattern(name: str) -> re.Pattern:
    """A documented name as a pattern over key paths: `<...>` and `*` match one part."""
    return re.compile(
        r"\.".join("([^.]+)" if part == "*" or part.startswith("<") else re.escape(part) for part in name.split("."))
    )


def _documented_by(path: str, row: dict, name: str) -> bool:
    """Whether `name`, as written in `row`, documents key `path`."""
    match = _pattern(name).fullmatch(path)
    if not match:
        return False
    parts = name.split(".")
    stand_ins = [i for i, part in enumerate(parts) if part == "*" or part.startswith("<")]
    for group, i in enumerate(stand_ins, 1):
        key = match.group(group)
        if parts[i] == "*" and f"`{key}`" not in row["text"]:
            return False  # `summarise.generation.*` documents the keys its row names
        if parts[i].startswith("<") and f"`{'.'.join(path.split('.')[:i])}`" not in README_TEXT:
            return False  # `resources.<rule>.gpu` documents the rules the README names
    return True


def _documenting(path: str) -> list[tuple[dict, int]]:
    """The README rows (and the index of the name in each) that document key `path`. A
    map of the user's keys whose own `## ` heading holds a table of what each entry takes
    (`sweeps`) is documented by that table's rows."""
    own = [(row, 0) for row in ROWS if row["section"] == path]
    return own + [
        (row, i) for row in CONFIG_ROWS for i, name in enumerate(row["names"]) if _documented_by(path, row, name)
    ]


def test_every_schema_key_is_a_row_of_the_readme():
    """Each leaf key of the schema is named by a row of config/README.md's key tables. A
    map of the user's keys is one key (`reproduce.expect.metrics`); the fields its entries
    take (`value`, `tolerance`) are named in its row."""
    missing = []
    for path, sub in schema_keys().items():
        rows = _documenting(path)
        if not rows:
            missing.append(path)
            continue
        entry = sub.get("additionalProperties")
        for field in (entry.get("properties") or {}) if isinstance(entry, dict) else ():
            if not any(re.search(rf"\b{field}\b", row["text"]) for row, _ in rows):
                missing.append(f"{path} (its entries' field {field!r})")
    assert not missing, f"schema keys config/README.md does not document: {missing}"


def test_every_readme_row_names_a_key_the_schema_takes():
    """A row left behind by a key that was renamed or removed documents nothing."""
    keys = schema_keys()
    stale = [
        f"config/README.md:{row['line']}: {name}"
        for row in CONFIG_ROWS
        for name in row["names"]
        if not any(_documented_by(path, row, name) for path in keys)
    ]
    assert not stale, stale


def test_the_sweeps_table_names_every_key_a_sweep_takes():
    """Sweeps have their own checker (shardflow.sweep.spec, SWEEP_KEYS), not the schema:
    the `## sweeps` table lists exactly its keys."""
    documented = [name for row in ROWS if row["section"] == "sweeps" for name in row["names"]]
    assert sorted(documented) == sorted(SWEEP_KEYS)


def _offered(sub: dict) -> list:
    """The words a key's schema lists as its values: an enum's, a const, an array's items'
    enum, and a pattern that is a list of words (`^auto$`, n_chunks beside its integers)."""
    words = []
    for branch in _branches(sub):
        words += [*branch.get("enum", []), *(branch.get("items") or {}).get("enum", [])]
        words += [branch["const"]] if "const" in branch else []
        listed = re.fullmatch(r"\^\(?([a-z]+(?:\|[a-z]+)*)\)?\$", branch.get("pattern", ""))
        words += listed.group(1).split("|") if listed else []
    return words


def test_every_value_a_keys_schema_lists_is_named_in_its_row():
    """A value the schema takes by name (`attention_bias: off`, `early_stopping: never`)
    is one a user can only learn from the README: its row names each in backticks."""
    missing = []
    for path, sub in schema_keys().items():
        text = " ".join(row["text"] for row, _ in _documenting(path))
        missing += [f"{path}: {word}" for word in _offered(sub) if f"`{word}`" not in text]
    assert not missing, f"values config/README.md does not name in the key's row: {missing}"


def test_every_schema_key_has_a_description():
    """The schema's descriptions are the short form of the README's rows (STYLE.md: every
    schema key has one); a key without one says nothing where the schema is read alone."""
    assert [path for path, sub in schema_keys().items() if not sub.get("description")] == []


def test_every_shipped_key_is_in_the_schema_and_holds_its_default():
    """config/config.yaml's keys are all the schema's, and each value is the schema's
    default, so the README's default column (checked against the schema below) is also
    what a run gets; SHIPPED_NOT_DEFAULT lists the exceptions, with the reason."""
    unknown, differ = [], []

    def walk(values: dict, node: dict, prefix: str) -> None:
        for name, value in values.items():
            path = f"{prefix}{name}"
            if name not in node.get("properties", {}):
                unknown.append(path)
                continue
            sub = _resolved(node["properties"][name])
            if "properties" in sub and isinstance(value, dict):
                walk(value, sub, f"{path}.")
            elif path in SHIPPED_NOT_DEFAULT:
                if value != SHIPPED_NOT_DEFAULT[path]:
                    differ.append(f"{path}: {value!r} (SHIPPED_NOT_DEFAULT says {SHIPPED_NOT_DEFAULT[path]!r})")
            elif "default" in sub and not _same(value, sub["default"]):
                differ.append(f"{path}: {value!r}, the schema's default {sub['default']!r}")

    walk(SHIPPED, SCHEMA, "")
    assert not unknown, f"config.yaml keys the schema does not take: {unknown}"
    assert not differ, differ
    validate_config(merge(SHIPPED, {}), SCHEMA)


def _same(a, b) -> bool:
    """Equal, a boolean only to a boolean (True == 1 in Python, not in a config)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def test_every_default_the_readme_states_is_the_schemas():
    """The tables' `default` column, read as YAML, equals the schema's default of each key
    the row documents (a `<rule>` row: every rule's; a `*` row: each key it names)."""
    wrong = []
    keys = schema_keys()
    for path, sub in keys.items():
        for row, i in _documenting(path):
            if row["defaults"] is None or row["section"] == path:  # the sweeps table: a sweep's keys' defaults
                continue
            if "default" not in sub:
                wrong.append(
                    f"config/README.md:{row['line']}: {path}: the README states {row['defaults'][i]!r}, "
                    "the schema no default"
                )
            elif not _same(row["defaults"][i], sub["default"]):
                wrong.append(
                    f"config/README.md:{row['line']}: {path}: the README states {row['defaults'][i]!r}, "
                    f"the schema {sub['default']!r}"
                )
    assert not wrong, wrong


def yaml_snippets(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each ```yaml (or ```yml) block of a Markdown file, dedented by its
    fence's indent (a block inside a list item)."""
    out, block = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.fullmatch(r"( *)```(\S*)\s*", line)
        if block is None and fence:
            block = (number, len(fence.group(1)), fence.group(2).lower(), [])
        elif block is not None and fence:
            if block[2] in ("yaml", "yml"):
                out.append((block[0], "\n".join(block[3])))
            block = None
        elif block is not None:
            block[3].append(line[block[1] :] if not line[: block[1]].strip() else line.lstrip())
    return out


def config_snippets() -> list[tuple[str, dict]]:
    """("<file>:<line>", its YAML) of each workflow-config snippet of SNIPPET_DOCS. The rule:
    a snippet is a workflow config when it is a mapping and one of its top-level keys is a
    top-level key of the schema. Others (a profile's `executor:`, a Kubernetes manifest's
    `apiVersion:`) are skipped. A config snippet with a misspelt top-level key beside its
    right ones is still checked, and fails naming it; so does a block that is not YAML."""
    top = set(SCHEMA["properties"])
    found = []
    for doc in SNIPPET_DOCS:
        for line, text in yaml_snippets(doc):
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                value = exc
            if isinstance(value, Exception) or isinstance(value, dict) and set(value) & top:
                found.append((f"{doc.relative_to(REPO)}:{line}", value))
    return found


SNIPPETS = config_snippets()


def test_the_docs_hold_config_snippets():
    """The snippet reader still finds them (an empty list would pass the next test)."""
    assert {where.partition(":")[0] for where, _ in SNIPPETS} >= {
        "config/README.md",
        "docs/gpu.md",
        "profiles/README.md",
    }


@pytest.mark.parametrize("where, snippet", SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_every_config_snippet_in_the_docs_is_a_config_the_parse_accepts(where, snippet):
    """Merged over config/config.yaml as Snakemake merges a --configfile (section by
    section: shardflow.sweep.spec.merge), validated as rules/common.smk validates the
    run's config, and its sweeps checked as the parse checks them (parse_sweeps, then
    each sweep's metrics against what its stage's jobs write)."""

    assert not isinstance(snippet, Exception), f"{where}: not YAML: {snippet}"

    def validate(config: dict) -> dict:
        return validate_config(config, SCHEMA)

    config = validate(merge(SHIPPED, snippet))
    specs = parse_sweeps(config["sweeps"], config, validate, root=REPO)
    problems = [line for spec in specs.values() for line in unknown_metrics(spec)]
    assert not problems, f"{where}: {problems}"
