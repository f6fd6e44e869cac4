"""Why two runs differ: their provenance records (`results/<dataset>/provenance.json`,
written by workflow.provenance) side by side (`make compare A= B=`).

A paper's experiments rerun months later give another number; the two records say what
changed between the runs. The outputs come first (did the results change?), then what
could have changed them: inputs, config, models, the checkout, packages, the machine.
Each group lists only what differs; a group that agrees is one line. Pure functions over
two records as read_record reads them; shardflow.cli prints them.
"""

from __future__ import annotations

import json
import math
import textwrap
import time

from shardflow.core.madewith import same_checkout
from shardflow.workflow.reproduce import RECORD_KEYS, read_provenance

# What compare reads of a record beyond what check_reproduction does, and as what JSON
# types: every record of this format holds them (build_manifest writes each).
COMPARED_KEYS = {**RECORD_KEYS, "git": ("object",), "config": ("object",), "config_sha256": ("string",),
                 "platform": ("string",), "accelerator": ("object",), "models": ("object",), "timings": ("object",)}
# The groups after the outputs, in the order the text gives them: the likely causes first.
GROUPS = ("outputs", "inputs", "config", "models", "git", "packages", "environment")
# Files the text names per list; --json lists all.
SHOWN_FILES = 5
WIDTH = 100
# The git_state keys that tell two checkouts apart (diff_files and diff_unhashed follow
# from diff_sha256's files).
CHECKOUT_KEYS = ("commit", "dirty", "diff_sha256")


def read_record(path) -> dict:
    """The provenance record at `path`; a ReproductionError naming the file and the key
    where it is not one compare can read (reproduce.read_provenance)."""
    return read_provenance(path, COMPARED_KEYS)


def _json(value) -> str:
    return json.dumps(value, sort_keys=True)


def files(a: dict, b: dict) -> dict:
    """Two {path: sha256} compared: the paths in both whose hash differs, those in one only."""
    return {
        "same": a == b,
        "files": [len(a), len(b)],
        "differ": sorted(p for p in a.keys() & b.keys() if a[p] != b[p]),
        "only_a": sorted(a.keys() - b.keys()),
        "only_b": sorted(b.keys() - a.keys()),
    }


def mapping(a: dict, b: dict) -> dict:
    """Two flat {key: value} compared: {key: [a, b]} of the keys whose values differ, and
    those in one only. Values compare as JSON: 1 and 1.0, or true and 1, are equal in
    Python but another config (config_sha256 tells them apart too)."""
    changed = {k: [a[k], b[k]] for k in sorted(a.keys() & b.keys()) if _json(a[k]) != _json(b[k])}
    only_a = {k: a[k] for k in sorted(a.keys() - b.keys())}
    only_b = {k: b[k] for k in sorted(b.keys() - a.keys())}
    return {"same": not (changed or only_a or only_b), "changed": changed, "only_a": only_a, "only_b": only_b}


def flatten(node: dict, prefix: str = "") -> dict:
    """{dotted key: value} of a nested mapping's leaves. An empty mapping is a leaf
    (core.config._leaves, for --config, passes over it: merged, it sets nothing), as
    `sweeps: {}` and no `sweeps` are two configs to the hash."""
    out = {}
    for key, value in node.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _config(a: dict, b: dict) -> dict:
    sha = [a["config_sha256"], b["config_sha256"]]
    if sha[0] == sha[1]:
        return {"same": True, "config_sha256": sha, "changed": {}, "only_a": {}, "only_b": {}}
    return {**mapping(flatten(a["config"]), flatten(b["config"])), "same": False, "config_sha256": sha}


def _models(a: dict, b: dict) -> dict:
    """The models by role; one differs by its hash (the same bytes in another folder are
    the same model), or by its path where neither has a hash (a hub name not cached)."""
    diff = mapping(a, b)

    def differ(x, y) -> bool:
        if not (isinstance(x, dict) and isinstance(y, dict)):
            return x != y
        if x.get("sha256") is None and y.get("sha256") is None:
            return x.get("path") != y.get("path")
        return x.get("sha256") != y.get("sha256")

    diff["changed"] = {role: pair for role, pair in diff["changed"].items() if differ(*pair)}
    diff["same"] = not (diff["changed"] or diff["only_a"] or diff["only_b"])
    return {**diff, "roles": [sorted(a), sorted(b)]}


def _checkouts(records: list) -> list:
    """The distinct checkouts the jobs ran at, by CHECKOUT_KEYS, in a stable order."""
    kept = {_json({k: g[k] for k in CHECKOUT_KEYS if k in g}) for g in records if isinstance(g, dict)}
    return [json.loads(text) for text in sorted(kept)]


def _same_checkouts(a: list, b: list) -> bool:
    """Whether two lists of checkouts name the same ones (same_checkout: by the keys both
    records hold, so a job's from before diff_sha256 was recorded matches a newer one's)."""
    return all(any(same_checkout(x, y) for y in b) for x in a) and all(any(same_checkout(x, y) for x in a) for y in b)


def _git(a: dict, b: dict) -> dict:
    """The checkouts of the two records and of their jobs, compared as provenance compares
    a job's with its record's (core.madewith.same_checkout): a record written before
    diff_sha256 was recorded is the same checkout as a newer one of its commit and flag."""
    checkouts = [{k: r["git"][k] for k in CHECKOUT_KEYS if k in r["git"]} for r in (a, b)]
    checkout = mapping(*checkouts)
    checkout["same"] = same_checkout(*checkouts)
    # Two dirty checkouts are the same only where both hash their edits: a record from
    # before diff_sha256 says the tree was edited, not how (compare cannot tell).
    unknown = checkout["same"] and any(c.get("dirty") for c in checkouts) and not all(
        c.get("diff_sha256") for c in checkouts)
    if unknown:
        checkout["same"] = None
    elif checkout["same"]:  # a key only one record holds says nothing here
        checkout.update(only_a={}, only_b={})
    jobs = [None if r["jobs_made_with"] is None else _checkouts(r["jobs_made_with"].get("git") or []) for r in (a, b)]
    jobs_same = jobs[0] == jobs[1] or (None not in jobs and _same_checkouts(*jobs))
    same = None if checkout["same"] is None and jobs_same else bool(checkout["same"]) and jobs_same
    return {"same": same, "checkouts": checkouts, "checkout": checkout, "jobs": None if jobs_same else jobs}


def _jobs_packages(record: dict) -> dict | None:
    """{package: its versions among the jobs, joined by ", "}: one where they agree."""
    if record["jobs_made_with"] is None:
        return None
    versions: dict[str, list] = {}
    for recorded in record["jobs_made_with"].get("packages") or []:
        for name, version in (recorded if isinstance(recorded, dict) else {}).items():
            if version not in versions.setdefault(name, []):
                versions[name].append(version)
    return {name: v[0] if len(v) == 1 else ", ".join(map(str, v)) for name, v in versions.items()}


def _packages(a: dict, b: dict) -> dict:
    """The packages installed when each provenance job ran, and those the jobs recorded
    as they wrote their outputs (reproduce.package_versions_ran: an upgrade that reran no
    job leaves the two apart); the jobs' compared where both records have them."""
    installed = mapping(a["packages"], b["packages"])
    ran = [_jobs_packages(a), _jobs_packages(b)]
    jobs = None if None in ran else mapping(*ran)
    return {"same": installed["same"] and (jobs is None or jobs["same"]),
            "recorded": [len(a["packages"]), len(b["packages"])], "installed": installed, "jobs": jobs}


def _environment(record: dict) -> dict:
    """The machine: platform, accelerator, the jobs' devices, CUDA and threads. Not
    Python, which `packages` records (a change would be listed twice)."""
    made = record["jobs_made_with"]
    jobs = None if made is None else {k: made.get(k) for k in ("jobs", "devices", "cuda", "threads")}
    found = {"platform": record["platform"], "accelerator": record["accelerator"]}
    return flatten({**found, **({} if jobs is None else {"jobs": jobs})})


def _seconds(record: dict) -> float:
    seconds = [t.get("s") for t in record["timings"].values() if isinstance(t, dict)]
    return sum(s for s in seconds if isinstance(s, (int, float)) and math.isfinite(s))


def compare(a: dict, b: dict) -> dict:
    """Two provenance records (read_record's) compared, group by group (GROUPS), and the
    jobs' summed benchmark seconds, which differ from run to run and explain nothing."""
    return {
        "outputs_identical": a["outputs"] == b["outputs"],
        "created_unix": [a.get("created_unix"), b.get("created_unix")],
        "outputs": files(a["outputs"], b["outputs"]),
        "inputs": files(a["inputs"], b["inputs"]),
        "config": _config(a, b),
        "models": _models(a["models"], b["models"]),
        "git": _git(a, b),
        "packages": _packages(a, b),
        "environment": mapping(_environment(a), _environment(b)),
        "timings": {"benchmarks": [len(a["timings"]), len(b["timings"])], "seconds": [_seconds(a), _seconds(b)]},
        # What each provenance job warned of as it wrote its record (the jobs ran another
        # model version or checkout than the one there then): said, not compared.
        "warnings": [_warnings(a), _warnings(b)],
    }


def _warnings(record: dict) -> list[str]:
    found = record.get("warnings")
    return [str(w) for w in found] if isinstance(found, list) else []


def _strict(value):
    """`value` as strict JSON holds it: a number that is not finite becomes null."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def as_json(diff: dict, a_path, b_path) -> dict:
    return _strict({"a": str(a_path), "b": str(b_path), **diff})


def shorten(text: str, width: int) -> str:
    """`text` in at most `width` characters, its middle left out: a path's folder and its
    file name are what tell two apart."""
    if len(text) <= width:
        return text
    head = (width - 3 + 1) // 2
    return text[:head] + "..." + text[len(text) - (width - 3 - head):]


def _shown(value) -> str:
    return json.dumps(value, default=str)  # a string in quotes: "1" is not 1, nor "" nothing


def _pair(key: str, a: str, b: str) -> str:
    """`  key: a -> b`, shortened to WIDTH: the key to half of it, the values sharing the rest."""
    key = shorten(key, WIDTH // 2)
    room = WIDTH - len(key) - 8
    if len(a) + len(b) > room:
        width_a = min(len(a), max(room // 2, room - len(b)))
        a, b = shorten(a, width_a), shorten(b, room - width_a)
    return f"  {key}: {a} -> {b}"


def _one(sign: str, key: str, value: str, side: str) -> str:
    tail = f" (only in {side})"
    key = shorten(key, WIDTH // 2)
    return f"  {sign} {key}: {shorten(value, WIDTH - len(key) - len(tail) - 6)}{tail}"


def _mapping_lines(diff: dict, show=_shown, label: str = "") -> list[str]:
    lines = [_pair(f"{k}{label}", show(a), show(b)) for k, (a, b) in diff["changed"].items()]
    lines += [_one("-", f"{k}{label}", show(v), "A") for k, v in diff["only_a"].items()]
    lines += [_one("+", f"{k}{label}", show(v), "B") for k, v in diff["only_b"].items()]
    return lines


def _counted(diff: dict, changed: str = "changed") -> str:
    """"2 differ, 1 only in A": the counts that are not 0."""
    return ", ".join(f"{len(diff[key])} {'differs' if what == 'differ' and len(diff[key]) == 1 else what}"
                     for key, what in ((changed, "differ"), ("only_a", "only in A"), ("only_b", "only in B"))
                     if diff[key])


def _files_lines(name: str, diff: dict, same: str) -> list[str]:
    if diff["same"]:
        return [f"{name}: {same} ({diff['files'][0]} files)"]
    both = diff["files"][0] - len(diff["only_a"])
    head = _counted(diff, "differ").replace("differ", f"of {both} in both differ", 1)
    lines = [f"{name}: {'DIFFER: ' if name == 'outputs' else ''}{head}"]
    for key, label, more in (("differ", "differ:    ", "that differ"), ("only_a", "only in A: ", "only in A"),
                             ("only_b", "only in B: ", "only in B")):
        paths = diff[key]
        lines += [f"  {label}{shorten(p, WIDTH - 2 - len(label))}" for p in paths[:SHOWN_FILES]]
        if len(paths) > SHOWN_FILES:
            lines.append(f"  ... and {len(paths) - SHOWN_FILES} more {more} (--json lists all)")
    return lines


def _hash(value) -> str:
    return "none" if value is None else str(value)[:12]


def _model(record) -> str:
    if not isinstance(record, dict):
        return _shown(record)
    return f"{_hash(record.get('sha256'))} ({record.get('path')})"


def _checkout(git: dict) -> str:
    if git.get("commit") is None:
        return "not a git checkout"
    edits = " dirty" if git.get("dirty") else ""
    if git.get("diff_sha256"):
        edits += f" edits {_hash(git['diff_sha256'])}"
    return f"{_hash(git['commit'])}{edits or ' clean'}"


def _when(unix) -> str:
    if not isinstance(unix, (int, float)) or not math.isfinite(unix):
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(unix))


def table(diff: dict, a_path, b_path) -> str:
    """The comparison as plain text, at most WIDTH columns: the outputs, then each cause,
    what differs in it listed below its line."""
    lines = [f"A: {shorten(str(a_path), WIDTH - 3)}", f"B: {shorten(str(b_path), WIDTH - 3)}",
             f"written: {_when(diff['created_unix'][0])} -> {_when(diff['created_unix'][1])}"]
    lines += _files_lines("outputs", diff["outputs"], "identical")
    lines += _files_lines("inputs", diff["inputs"], "same")

    config = diff["config"]
    sha = [_hash(s) for s in config["config_sha256"]]
    if config["same"]:
        lines.append(f"config: same (config_sha256 {sha[0]})")
    else:
        counted = _counted(config) or "no setting differs, its hash does (a record edited by hand?)"
        lines.append(f"config: {counted} (config_sha256 {sha[0]} -> {sha[1]})")
        lines += _mapping_lines(config)

    models = diff["models"]
    if models["same"]:
        lines.append(f"models: same ({', '.join(models['roles'][0]) or 'none recorded'})")
    else:
        lines.append(f"models: {_counted(models)}")
        lines += _mapping_lines(models, _model)

    git = diff["git"]
    if git["same"]:
        lines.append(f"git: same ({_checkout(git['checkouts'][0])})")
    elif git["same"] is None:
        lines.append(f"git: unknown: both at {_hash(git['checkouts'][0].get('commit'))} with uncommitted edits, and a "
                     "record from before diff_sha256 does not say which")
    else:
        lines.append("git: differs")
        lines += _mapping_lines(git["checkout"], lambda v: _hash(v) if isinstance(v, str) else _shown(v))
        if git["jobs"] is not None:
            ran = ["not recorded" if j is None else ", ".join(map(_checkout, j)) or "none" for j in git["jobs"]]
            lines.append(_pair("jobs ran at", *ran))

    packages = diff["packages"]
    if packages["same"]:
        jobs = "" if packages["jobs"] is None else ", the jobs' too"
        lines.append(f"packages: same ({packages['recorded'][0]} recorded{jobs})")
    else:
        installed, jobs = packages["installed"], packages["jobs"]
        lines.append(f"packages: {_counted(installed) or 'the same installed'}")

        def version(v) -> str:
            return "not installed" if v is None else str(v)

        lines += _mapping_lines(installed, version)
        if jobs is not None:
            # A version the jobs ran that is the installed one's change too says nothing new.
            again = {k: v for k, v in jobs["changed"].items() if installed["changed"].get(k) != v}
            only_a = {k: v for k, v in jobs["only_a"].items() if installed["only_a"].get(k, object()) != v}
            only_b = {k: v for k, v in jobs["only_b"].items() if installed["only_b"].get(k, object()) != v}
            lines += _mapping_lines({"changed": again, "only_a": only_a, "only_b": only_b}, version, " (jobs)")

    environment = diff["environment"]
    if environment["same"]:
        lines.append("environment: same (platform, accelerator; the jobs' devices, CUDA, threads)")
    else:
        lines.append(f"environment: {_counted(environment)}")
        lines += _mapping_lines(environment)

    timings = diff["timings"]
    seconds = " -> ".join(f"{s:.0f} s" for s in timings["seconds"])
    benchmarks = " -> ".join(map(str, timings["benchmarks"]))
    lines.append(f"timings: {seconds}, summed over the jobs' benchmarks ({benchmarks})")
    warned = diff["warnings"]
    if warned[0] == warned[1]:
        lines.append(f"warnings: the same {len(warned[0])} in both (--json lists them)" if warned[0] else "warnings: none")
    else:
        lines.append("warnings: differ")
        for side, theirs in zip("AB", warned, strict=True):
            for warning in theirs:
                lines += textwrap.wrap(f"  {side}'s record: {warning}", WIDTH, subsequent_indent="    ",
                                       break_on_hyphens=False)
    return "\n".join(lines)
