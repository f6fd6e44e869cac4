"""Adopting a sweep's finished jobs after its grid gained or lost a key.

A point id names a value of every key of the sweep's grid (`lr=0.001`). A key added to
a finished sweep's grid (`train.n_layer: [2, 4]`, where the base config has 2) renames
every point (`lr=0.001__n_layer=2`), so Snakemake would run every finished job again,
though half the new points are the runs on disk; so does a key removed from the grid
whose remaining value is the base's. No id scheme avoids it (an id that leaves out base
values is renamed whenever the base changes), so the renaming is an explicit step:
`python -m shardflow.cli sweep-adopt <sweep>` (`make sweep-adopt SWEEP=<sweep>`).

For each point folder of the sweep that is no current point (under results/, logs/ or
benchmarks/ `sweeps/<folder>/`):
  - its values come from the sweep's points.json (the last collection's ids and values)
    where that lists it, else from the id itself (`paths.parse_point_id`); a shortened
    id (`id-hash=...`) that points.json does not list cannot be read back;
  - it matches the current point whose values equal its own, every key that one of the
    two lacks taken from the sweep's base config (`spec.base_config`: the config its
    jobs start from), compared as the spec compares values (`canonical_value`,
    `value_key`); a key no longer in the grid must so hold the base's value;
  - each of its seed folders moves to the new id (`os.rename`, per folder, never onto
    one that exists), and with it Snakemake's metadata records of the outputs in it
    (`.snakemake/metadata/`, each record's file named by Snakemake's own
    FilePersistence). That is what makes it safe: Snakemake takes an output without a
    record as up to date with no params check (its DAG notes `no_metadata`, which is no
    rerun reason), so a moved job whose base value changed since it ran would be kept;
    with its record it reruns ("params have changed"). A record's params stay as they
    are, save the paths in the moved folders that a params string names (the job's own
    wildcards: sweep_embed_verify's failed_json); those, and its input and log paths
    inside the moved folders, are renamed with the files, else every job that names a
    moved path reruns ("Set of input files has changed", "params have changed").

A seed folder whose outputs Snakemake marks incomplete (a job that did not finish) is
left where it is, as are resume folders (`gpu_jobs.resume_dir`, `results/sweeps/.resume`),
which are named by the old id: such a job starts over under the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from base64 import urlsafe_b64decode
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shardflow.core.atomic import atomic_open
from shardflow.core.files import read_json
from shardflow.sweep.paths import EMPTY_POINT_ID, HASH_KEY, POINT_ID_REGEX, SWEEPS_ROOT, format_value, parse_point_id
from shardflow.sweep.spec import STAGES, SweepSpec, canonical_value, lookup, value_key

KINDS = ("results", "logs", "benchmarks")  # a job's folders: <kind>/sweeps/<folder>/<point>/seed=<n>
SEED_FOLDER = re.compile(r"seed=[0-9]+")
_POINT_ID = re.compile(POINT_ID_REGEX)


def sweep_folder(kind: str, folder: str) -> str:
    """The sweep's folder of one kind (results, logs, benchmarks), relative to the working directory."""
    return f"{kind}/sweeps/{folder}"


def looks_like_point(name: str) -> bool:
    """A folder name a point id could be: not the collection's files, `plots/`, `spec.log`."""
    return name == EMPTY_POINT_ID or ("=" in name and _POINT_ID.fullmatch(name) is not None)


def existing_ids(folder: str, root: str | os.PathLike = ".") -> list[str]:
    """The point folders of sweep folder `folder` under results/, logs/ and benchmarks/:
    an adoption stopped between a job's results and its logs is found again."""
    found: set[str] = set()
    for kind in KINDS:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            with os.scandir(os.path.join(root, sweep_folder(kind, folder))) as entries:
                found |= {e.name for e in entries if looks_like_point(e.name) and e.is_dir()}
    return sorted(found)


# ------------------------------------------------------------------ planning


@dataclass(frozen=True)
class Adoption:
    old: str  # a point id on disk that is no current point
    new: str  # the current point with its values


@dataclass
class AdoptionPlan:
    moves: list[Adoption] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "<old id>: not adopted: <why>", one a line


def listed_points(points_json: Any) -> dict[str, dict[str, Any]]:
    """{point id: {dotted key: value}} of a points.json's content (report.points_record);
    ValueError where it is not one."""
    points = points_json.get("points") if isinstance(points_json, Mapping) else None
    if not isinstance(points, list) or not all(
        isinstance(p, Mapping) and isinstance(p.get("id"), str) and isinstance(p.get("params"), Mapping) for p in points
    ):
        raise ValueError('not a sweep\'s points table ({"points": [{"id": ..., "params": {...}}, ...]})')
    return {p["id"]: dict(p["params"]) for p in points}


def _leaf_keys(node: Any, prefix: str) -> list[str]:
    if not isinstance(node, Mapping):
        return [prefix]
    return [k for name, sub in node.items() for k in _leaf_keys(sub, f"{prefix}.{name}")]


def _dotted(name: str, spec: SweepSpec, base: Mapping[str, Any]) -> str:
    """The config key an id's short name stands for: a current parameter's, else the one
    key of the stage's sections whose last component it is."""
    if "." in name:  # ids write the whole key where two of the sweep's keys share the last part
        return name
    mine = [p for p in spec.params if p.rsplit(".", 1)[-1] == name]
    if len(mine) == 1:
        return mine[0]
    known = [
        k
        for section in STAGES[spec.stage].sections
        if isinstance(base.get(section), Mapping)
        for k in _leaf_keys(base[section], section)
        if k.rsplit(".", 1)[-1] == name
    ]
    if len(known) != 1:
        named = f"it could be {' or '.join(known)}" if known else f"no key of the {spec.stage} sections ends in it"
        raise ValueError(f"its key '{name}' names no one config key ({named}) and points.json does not list it")
    return known[0]


def point_values(pid: str, spec: SweepSpec, base: Mapping[str, Any], listed: Mapping[str, Mapping]) -> dict:
    """{dotted key: value} of point folder `pid`: points.json's where it lists it, else
    read from the id. ValueError saying why it cannot be known."""
    if pid in listed:
        return dict(listed[pid])
    try:
        values = parse_point_id(pid)
    except ValueError as exc:
        if f"{HASH_KEY}=" in pid:
            raise ValueError("a shortened id that points.json does not list: its values cannot be read back") from None
        raise ValueError(str(exc)) from None
    return {_dotted(name, spec, base): value for name, value in values.items()}


def _filled(values: Mapping[str, Any], keys: Iterable[str], base: Mapping[str, Any]) -> tuple:
    """`values` over `keys`, each key it lacks at the base's value, as comparable settings.
    A key the config no longer has is a SweepError naming it."""
    out = []
    for key in keys:
        like = lookup(base, key)
        out.append(value_key(canonical_value(values[key] if key in values else like, like)))
    return tuple(out)


def _shown(values: Mapping[str, Any]) -> str:
    def one(value: Any) -> str:
        try:
            return format_value(value)
        except (TypeError, ValueError):
            return repr(value)

    return ", ".join(f"{k}={one(v)}" for k, v in sorted(values.items())) or "none"


def plan_adoption(spec: SweepSpec, existing: Iterable[str], points_json: Any, base: Mapping[str, Any]) -> AdoptionPlan:
    """Which point folders on disk (`existing` ids) are which current points of `spec`.

    `points_json`: the content of the sweep's points.json, or None; `base`: the config
    the sweep's jobs start from (`spec.base_config`). A pure function: it reads nothing.
    """
    listed = listed_points(points_json) if points_json is not None else {}
    current = set(spec.ids)
    plan = AdoptionPlan()
    indexes: dict[tuple[str, ...], dict[tuple, list[str]]] = {}  # one per set of keys compared
    found: dict[str, str] = {}
    for old in sorted(set(existing) - current):
        try:
            values = point_values(old, spec, base, listed)
            keys = tuple(sorted(set(values) | set(spec.params)))
            mine = _filled(values, keys, base)
        except ValueError as exc:  # SweepError too: a key the config no longer has
            plan.problems.append(f"{old}: not adopted: {exc}")
            continue
        if keys not in indexes:
            index: dict[tuple, list[str]] = {}
            for pid, point in zip(spec.ids, spec.points, strict=True):
                index.setdefault(_filled(point, keys, base), []).append(pid)
            indexes[keys] = index
        matches = indexes[keys].get(mine, [])
        if not matches:
            from_base = [k for k in keys if k not in values]
            filled = f", with the base's {', '.join(from_base)}" if from_base else ""
            plan.problems.append(
                f"{old}: not adopted: no current point has its values ({_shown(values)}{filled}): a value no longer "
                "in the grid, or a key whose base value is not the one it ran with"
            )
        elif len(matches) > 1:
            plan.problems.append(f"{old}: not adopted: it matches {len(matches)} current points ({', '.join(matches)})")
        else:
            found[old] = matches[0]
    by_new: dict[str, list[str]] = {}
    for old, new in found.items():
        by_new.setdefault(new, []).append(old)
    for old, new in found.items():
        if len(by_new[new]) > 1:
            others = ", ".join(o for o in by_new[new] if o != old)
            plan.problems.append(
                f"{old}: not adopted: {others} also match{'es' if len(by_new[new]) == 2 else ''} "
                f"{new}; move one of them by hand"
            )
        else:
            plan.moves.append(Adoption(old, new))
    return plan


# ------------------------------------------------------------------ Snakemake's records


class SnakemakeRecords:
    """The metadata records and incomplete marks of a working directory's `.snakemake/`,
    keyed by output path as Snakemake keys them, each file named by Snakemake's own
    FilePersistence (the default backend; `--persistence-backend db` keeps them in a
    database, which this does not read)."""

    def __init__(self, root: str | os.PathLike = "."):
        from snakemake.persistence.file import FilePersistence

        self.metadata = os.path.join(root, ".snakemake", "metadata")
        self.incomplete = os.path.join(root, ".snakemake", "incomplete")
        # Not its constructor: that makes .snakemake's folders (and may migrate an old
        # layout), and a dry run changes nothing. The record path needs only the name
        # length limit, which _record_path reads from the folder itself.
        self._store = FilePersistence.__new__(FilePersistence)
        self._store._max_len = None
        self._files = {subject: self._scan(subject) for subject in (self.metadata, self.incomplete)}

    def path(self, subject: str, key: str) -> str:
        return self._store._record_path(subject, key)

    def _scan(self, subject: str) -> dict[str, str]:
        """{key: file} of every record under `subject`. The file names are decoded to find
        the keys, and each kept only where Snakemake names that key's record so."""
        found = {}
        for folder, _, names in os.walk(subject):
            rel = os.path.relpath(folder, subject)
            parts = [] if rel == "." else [p.removeprefix("@") for p in rel.split(os.sep)]
            for name in names:
                try:
                    key = urlsafe_b64decode("".join([*parts, name])).decode()
                except ValueError:  # binascii.Error and UnicodeDecodeError: not a record
                    continue
                path = os.path.join(folder, name)
                if self.path(subject, key) == path:
                    found[key] = path
        return found

    def under(self, subject: str, folders: Iterable[str]) -> list[str]:
        """The keys of `subject`'s records inside any of `folders`."""
        folders = tuple(folders)
        return sorted(k for k in self._files[subject] if any(k.startswith(f + "/") or k == f for f in folders))

    def read(self, key: str) -> dict:
        path = self._files[self.metadata][key]
        try:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ValueError(f"Snakemake's record of {key} ({path}) cannot be read: {exc}") from None
        if not isinstance(record, dict):
            raise ValueError(f"Snakemake's record of {key} ({path}) is not a JSON object")
        return record

    def holds(self, key: str, record: dict) -> bool:
        """Whether `key`'s record is there and reads as `record`."""
        try:
            return key in self._files[self.metadata] and self.read(key) == record
        except ValueError:
            return False

    def move(self, key: str, new_key: str, record: dict) -> None:
        """Write `record` as `new_key`'s record, then remove `key`'s (and the folders a
        long key's record leaves empty, as Snakemake does)."""
        path = self.path(self.metadata, new_key)
        with atomic_open(path, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        self._store._io_delete(self.metadata, key)
        self._files[self.metadata][new_key] = path
        del self._files[self.metadata][key]


def snakemake_running(root: str | os.PathLike = ".") -> bool:
    """Whether a Snakemake run holds the working directory: its lock files are there."""
    try:
        return bool(os.listdir(os.path.join(root, ".snakemake", "locks")))
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------ moving


@dataclass(frozen=True)
class SeedMove:
    old: str
    new: str
    seed: str  # the folder's name, seed=<n>
    folders: tuple[tuple[str, str], ...]  # (from, to) of each of its results, logs, benchmarks folders on disk

    def renamed(self, path: str) -> str:
        for old, new in self.folders:
            if path == old or path.startswith(old + "/"):
                return new + path[len(old) :]
        return path

    def renamed_in(self, text: str) -> str:
        """`text` (a recorded param: a value's repr) with each path in the moved folders
        renamed; a path that only starts like one (seed=01 for seed=0) is not."""
        for old, new in self.folders:
            text = re.sub(rf"(?<![\w.=/-]){re.escape(old)}(?![\w.=-])", lambda _, new=new: new, text)
        return text


def seed_moves(folder: str, adoptions: Iterable[Adoption], root: str | os.PathLike = ".") -> list[SeedMove]:
    """Each seed folder of each adopted point, with its folders of each kind that exist."""
    out = []
    for move in adoptions:
        seeds: set[str] = set()
        for kind in KINDS:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                seeds |= {
                    n
                    for n in os.listdir(os.path.join(root, sweep_folder(kind, folder), move.old))
                    if SEED_FOLDER.fullmatch(n)
                }
        for seed in sorted(seeds, key=lambda s: int(s.partition("=")[2])):
            pairs = tuple(
                (f"{sweep_folder(kind, folder)}/{move.old}/{seed}", f"{sweep_folder(kind, folder)}/{move.new}/{seed}")
                for kind in KINDS
                if os.path.isdir(os.path.join(root, sweep_folder(kind, folder), move.old, seed))
            )
            out.append(SeedMove(move.old, move.new, seed, pairs))
    return out


def _renamed_record(record: dict, move: SeedMove) -> dict:
    out = dict(record)
    for key in ("input", "log"):
        if isinstance(out.get(key), list):
            out[key] = [move.renamed(p) if isinstance(p, str) else p for p in out[key]]
    if isinstance(out.get("input_checksums"), dict):
        out["input_checksums"] = {move.renamed(k): v for k, v in out["input_checksums"].items()}
    # A params string holding the job's wildcards (sweep_embed_verify's failed_json) is
    # recorded with the old id: left so, the job reruns ("params have changed").
    if isinstance(out.get("params"), list):
        out["params"] = [move.renamed_in(p) if isinstance(p, str) else p for p in out["params"]]
    return out


def move_seed(move: SeedMove, records: SnakemakeRecords, root: str | os.PathLike = ".", dry_run: bool = False) -> str:
    """Move one seed folder's results, logs and benchmarks to the new id, the records
    first (a stop between the two leaves files without records at the old id, no current
    point's, which the next adoption moves, never files without records at the new one,
    which Snakemake would take as up to date unchecked); return what
    it did (or would do), or why it left the folder. Nothing is overwritten but a record
    this move wrote before it was stopped."""
    head = f"{move.old} -> {move.new}, {move.seed}"
    old_folders = [old for old, _ in move.folders]
    unfinished = records.under(records.incomplete, old_folders)
    if unfinished:
        return (
            f"{head}: left: Snakemake marks {unfinished[0]} incomplete (a job that did not finish; its resume "
            "folder is named by the old id): rerun the sweep as it was first, or remove the seed's folders ("
            + ", ".join(old_folders) + ")"
        )
    taken = [new for _, new in move.folders if os.path.lexists(os.path.join(root, new))]
    keys = records.under(records.metadata, old_folders)
    try:
        moved = {key: _renamed_record(records.read(key), move) for key in keys}
    except ValueError as exc:
        return f"{head}: left: {exc}"
    # A record at the new id equal to the one this move writes is its own copy, from an
    # adoption stopped before it removed the old record: that one is finished, not taken.
    taken += [
        f"Snakemake's record of {move.renamed(k)}"
        for k in keys
        if os.path.lexists(records.path(records.metadata, move.renamed(k)))
        and not records.holds(move.renamed(k), moved[k])
    ]
    if taken:
        return f"{head}: left: {taken[0]} exists (nothing is overwritten)"
    what = f"{', '.join(old.split('/', 1)[0] for old in old_folders)} and {len(keys)} Snakemake records"
    if dry_run:
        return f"{head}: would move {what}"
    for key, record in moved.items():
        records.move(key, move.renamed(key), record)
    for old, new in move.folders:
        os.makedirs(os.path.dirname(os.path.join(root, new)), exist_ok=True)
        os.rename(os.path.join(root, old), os.path.join(root, new))
        with contextlib.suppress(OSError):  # the old point's folder, once its last seed has gone
            os.rmdir(os.path.dirname(os.path.join(root, old)))
    return f"{head}: moved {what}"


def adopt(spec: SweepSpec, root: str | os.PathLike = ".", dry_run: bool = False) -> list[str]:
    """Adopt sweep `spec`'s point folders under `root` that match a current point; one
    line per seed folder moved (or left) and per point folder not adopted, each naming
    the sweep. Run it again and it does what is left (the moved are no longer found).
    ValueError (naming the file) where points.json is not readable."""
    head = f"sweep '{spec.name}'"
    existing = existing_ids(spec.folder, root)
    if not existing:
        return [f"{head}: nothing to adopt: no point folder under {SWEEPS_ROOT}/{spec.folder}/ here"]
    points = os.path.join(root, SWEEPS_ROOT, spec.folder, "points.json")
    content = read_json(points) if os.path.exists(points) else None
    try:
        plan = plan_adoption(spec, existing, content, spec.base_config)
    except ValueError as exc:
        raise ValueError(f"{points}: {exc}") from None
    lines = [f"{head}: {problem}" for problem in plan.problems]
    moves = seed_moves(spec.folder, plan.moves, root)
    if moves:
        records = SnakemakeRecords(root)
        lines += [f"{head}: {move_seed(move, records, root, dry_run)}" for move in moves]
    if not lines:
        lines.append(
            f"{head}: nothing to adopt: every point folder under {SWEEPS_ROOT}/{spec.folder}/ is a current point"
        )
    return lines


# ------------------------------------------------------------------ the parse's warning


def _key_names(pid: str) -> tuple[set[str], bool]:
    """The key names an id writes, and whether it was shortened (then they are some of its keys)."""
    if pid == EMPTY_POINT_ID:
        return set(), False
    names = {pair.partition("=")[0] for pair in pid.split("__")}
    return names - {HASH_KEY}, HASH_KEY in names


def _seeds(folder: str, pid: str) -> set[str]:
    try:
        return {n for n in os.listdir(os.path.join(folder, pid)) if SEED_FOLDER.fullmatch(n)}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def unadopted_points_warning(spec: SweepSpec, root: str | os.PathLike = ".") -> str | None:
    """One line for the parse where the sweep's results folder holds point folders named
    by other keys than its grid's (a key added to or removed from a finished sweep), or
    None. Cheap: one listing of the folder (and of a candidate's seeds where its point's
    folder is there too). Folders of a value removed from the grid are no matter: no point
    can adopt them, and they stay on disk by design; so are shortened ids whose visible
    keys are all the grid's (unknown), and folders sweep-adopt would not move."""
    folder = os.path.join(root, SWEEPS_ROOT, spec.folder)
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return None
    current = set(spec.ids)
    grid_names = set(spec.names.values())
    other = []
    for name in sorted(names):
        if name in current or not looks_like_point(name):
            continue
        keys, shortened = _key_names(name)
        if (keys - grid_names) if shortened else (keys != grid_names):
            other.append(name)
    other = [name for name in other if os.path.isdir(os.path.join(folder, name))]
    if not other:
        return None
    # Only what sweep-adopt would move: a folder no current point matches (a removed key's
    # other value), or whose seeds are all under its point's id already (run again rather
    # than adopted), stays as it is, and naming it on every parse would point at a
    # command that does nothing.
    points = os.path.join(folder, "points.json")
    try:
        plan = plan_adoption(spec, other, read_json(points) if os.path.exists(points) else None, spec.base_config)
    except (OSError, ValueError):
        plan = None  # an unreadable points.json: sweep-adopt names it
    if plan is not None:
        other = [m.old for m in plan.moves if m.new not in names or _seeds(folder, m.old) - _seeds(folder, m.new)]
    if not other:
        return None
    shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
    return (
        f"sweep '{spec.name}': {SWEEPS_ROOT}/{spec.folder}/ holds {len(other)} point folder"
        f"{'s' if len(other) > 1 else ''} named by other keys than its grid's ({shown}): where a key was added to "
        f"or removed from the grid, `make sweep-adopt SWEEP={spec.name}` (with this run's CONFIG=) moves the "
        "finished jobs that are current points to their new ids, instead of running them again"
    )
