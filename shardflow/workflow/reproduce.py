"""Compare a run with a pinned experiment: metrics within tolerance, same data, same model.

An experiment file (config/reproduce/<name>.yaml) is a config overlay with a
`reproduce:` section of expectations. `check_reproduction` returns one row per
expectation; a failed metric, data checksum or model hash fails the check, a
package version that differs is reported as drift (a failure too with
`strict_packages: true`). The table says exactly what drifted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from shardflow.core.files import read_json
from shardflow.core.runlog import recorded_package
from shardflow.workflow.provenance import FORMAT


class ReproductionError(RuntimeError):
    pass


# What check_reproduction reads of a provenance record, and as what JSON types.
RECORD_KEYS = {"inputs": ("object",), "outputs": ("object",), "packages": ("object",),
               "model": ("object", "null"), "jobs_made_with": ("object", "null")}


def _json_type(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _a(json_type: str) -> str:
    return json_type if json_type == "null" else f"{'an' if json_type[0] in 'aeiou' else 'a'} {json_type}"


def read_provenance(path, keys: dict = RECORD_KEYS) -> dict:
    """The provenance record at `path`, as check_reproduction reads it (`keys`: what the
    reader reads, and as what JSON types; compare.COMPARED_KEYS reads more); a
    ReproductionError naming the file where it is not one: a record of another format (a
    later or earlier writer's: its keys may mean something else, so a check could pass or
    fail on them), or one that lacks a key the check reads or holds it as another type
    (damaged, or edited by hand), where the rows would read `missing` and blame the run.
    Invalid JSON is read_json's ValueError, naming the file and line."""
    record = read_json(path)
    again = "write it again with this checkout (snakemake --forcerun provenance)"
    if not isinstance(record, dict):
        raise ReproductionError(f"{path}: a JSON {_json_type(record)}, not a provenance record (an object with "
                                f"'format': '{FORMAT}')")
    if record.get("format") != FORMAT:
        found = f"format {record['format']!r}" if "format" in record else "no 'format' key"
        raise ReproductionError(f"{path}: {found}, and this checkout reads '{FORMAT}' records only: its keys "
                                f"could mean something else; {again}")
    wrong = [
        f"key {key!r} missing" if key not in record else
        f"key {key!r} is {_a(_json_type(record[key]))}, not {' or '.join(_a(t) for t in types)}"
        for key, types in keys.items()
        if key not in record or _json_type(record[key]) not in types
    ]
    if wrong:
        raise ReproductionError(f"{path}: {'; '.join(wrong)} (a '{FORMAT}' record holds them): it is damaged or "
                                f"was edited; {again}")
    return record


@dataclass(frozen=True)
class Row:
    item: str
    expected: str
    got: str
    tolerance: str
    status: str  # ok | FAIL | drift

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.5f}"
    return "-" if value is None else str(value)


def _readings(node, parts: list[str], keys: tuple[str, ...] = ()):
    """(keys, value) of every way `parts` walks down `node`, each step a key of one or
    more consecutive parts joined by '.', the longest first."""
    if not parts:
        yield keys, node
        return
    if not isinstance(node, dict):
        return
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in node:
            yield from _readings(node[key], parts[n:], (*keys, key))


# What `metric` finds where a record lacks the name (or there is no record): the table
# reads it "missing", apart from a metric the record holds as null.
MISSING = object()


def metric(metrics: dict | None, name: str, default=None):
    """The value `name` names in a metrics record: a top-level key, or a nested one by its
    keys joined with '.' (`all.ndcg_at_1`), as shardflow.sweep.metrics names them and the
    parse-time check (plan.unknown_reproduction_metrics) accepts them; `default` where
    absent.

    A key may itself hold a dot (a summarisation system "gpt-3.5":
    `systems.gpt-3.5.rouge1.mean`), so the name is matched against the record's own keys
    rather than split at every dot. Where two readings both exist (a key "a.b" and a key
    "b" inside "a") the name is ambiguous: a ReproductionError names both, as picking one
    could pass or fail the check on the other's value."""
    if metrics is None:
        return default
    found = list(_readings(metrics, name.split(".")))
    if len(found) > 1:
        readings = " and ".join("".join(f"[{k!r}]" for k in keys) for keys, _ in found)
        raise ReproductionError(
            f"reproduce.expect.metrics: '{name}' names {len(found)} values of the metrics record: {readings}; "
            "a dotted name cannot tell them apart: rename one of the keys (a stored summarisation system is "
            "named by its key in the input files)"
        )
    return found[0][1] if found else default


def within(got, value: float, tolerance: float) -> bool:
    """Whether `got` is a number within `tolerance` of `value`, the bound included. The
    numbers are compared as written (the shortest decimal that reads back as each float,
    as YAML and JSON write them): in binary 0.4 - 0.3 is 0.10000000000000003, and a value
    exactly at its tolerance failed. A value that is no number (a dict, a string, a
    boolean, null) or not finite (a diverged run) fails, as a missing one does."""
    if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got):
        return False
    exact = [Decimal(repr(float(x))) for x in (got, value, tolerance)]
    return abs(exact[0] - exact[1]) <= exact[2]


def package_versions_ran(provenance: dict, name: str) -> dict[str | None, list[str]]:
    """{version: where it was found} of package `name` in a provenance record: in the
    `made_with` records of the jobs ("jobs": what they ran as they wrote their outputs,
    jobs_made_with) and in the record's own `packages` ("now": what was installed when the
    provenance job ran). The provenance job reruns alone after an upgrade that reran no
    job (a config or script change), so its own versions need not be the ones that made
    the outputs: the model hash is taken from the jobs for the same reason. Jobs that
    recorded nothing (a train job from before it wrote `made_with` in its metrics.json)
    leave the record's own versions; a version of None is a package not installed there."""
    found: dict[str | None, list[str]] = {}
    for recorded in (provenance.get("jobs_made_with") or {}).get("packages") or []:
        if isinstance(recorded, dict) and name in recorded and "jobs" not in found.get(recorded[name], []):
            found.setdefault(recorded[name], []).append("jobs")
    found.setdefault((provenance.get("packages") or {}).get(name), []).append("now")
    return found


def check_reproduction(expect: dict, provenance: dict, metrics: dict | None, strict_packages: bool = False) -> list[Row]:
    rows: list[Row] = []
    for name, spec in sorted((expect.get("metrics") or {}).items()):
        got = metric(metrics, name, MISSING)
        value, tol = float(spec["value"]), float(spec["tolerance"])
        ok = within(got, value, tol)
        shown = _fmt(value), "missing" if got is MISSING else "null" if got is None else _fmt(got)
        if not ok and shown[0] == shown[1]:  # they differ beyond 5 decimals: show where
            shown = repr(value), repr(got)
        rows.append(Row(f"metric {name}", *shown, f"±{tol:g}", "ok" if ok else "FAIL"))
    inputs = provenance.get("inputs", {})
    for path, digest in sorted((expect.get("data_sha256") or {}).items()):
        name = f"data {path}"
        # The file of that name: a path can end as another input's does (a BEIR folder's
        # corpus.jsonl and the copy retrieval_prepare writes, results/<name>/retrieval/
        # corpus.jsonl, listed first); one of them holding the pinned bytes is the data.
        tail = path
        while tail.startswith("./"):  # a prefix, not lstrip's characters (`.cache/x`)
            tail = tail[2:]
        named = [d for p, d in inputs.items() if p == path or p.endswith("/" + tail)]
        got = digest if digest in named else next(iter(named), None)
        if got is None:  # a byte-identical copy under another name is the same data
            copy = next((p for p, d in sorted(inputs.items()) if d == digest), None)
            if copy is not None:
                got, name = digest, f"data {path} (as {copy})"
        rows.append(Row(name, digest[:16], (got or "missing")[:16], "exact", "ok" if got == digest else "FAIL"))
    if expect.get("model_sha256"):
        got = (provenance.get("model") or {}).get("sha256")
        ok = got == expect["model_sha256"]
        rows.append(Row("model weights", expect["model_sha256"][:16], (got or "missing")[:16], "exact", "ok" if ok else "FAIL"))
    for name, version in sorted((expect.get("packages") or {}).items()):
        found = package_versions_ran(provenance, recorded_package(name) or name)
        if len(found) == 1:
            got = _fmt(next(iter(found)))
        else:  # the jobs ran another version than the record's own, or more than one
            got = ", ".join(f"{_fmt(v)} ({', '.join(where)})" for v, where in found.items())
        status = "ok" if list(found) == [str(version)] else ("FAIL" if strict_packages else "drift")
        rows.append(Row(f"package {name}", str(version), got, "exact", status))
    for path, digest in sorted((expect.get("outputs_sha256") or {}).items()):
        got = provenance.get("outputs", {}).get(path)
        rows.append(Row(f"output {path}", digest[:16], (got or "missing")[:16], "exact", "ok" if got == digest else "FAIL"))
    return rows


def render_table(rows: list[Row]) -> str:
    header = Row("item", "expected", "got", "tolerance", "status")
    cols = list(zip(*[(r.item, r.expected, r.got, r.tolerance, r.status) for r in [header, *rows]], strict=True))
    widths = [max(len(c) for c in col) for col in cols]
    lines = []
    for i, r in enumerate([header, *rows]):
        cells = (r.item, r.expected, r.got, r.tolerance, r.status)
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def failed(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.status == "FAIL"]
