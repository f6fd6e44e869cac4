"""Run the workflow at two git revisions and compare their results byte for byte.

    .venv/bin/python -m tests.support.compare_revisions BASE [HEAD] [--configfile F ...] [--cores N]

HEAD defaults to the working tree as it is (uncommitted changes included). Each
git revision is checked out into a temporary worktree and run in its own work
folder with the same config files and core count (fp32 CPU output depends on the
thread count). Every file under results/ that both runs wrote is compared by
sha256; files whose content records when or where they ran (provenance, run
summaries with wall times, per-chunk stats, report figures with timings) are
compared after dropping those fields, or listed as skipped. Exit status 1 when
anything differs. Used for the restructuring (behaviour unchanged, byte for byte).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
WORKTREE = "WORKTREE"
# Record when/where/how fast a run went: never equal across runs.
VOLATILE_FILES = ("provenance.json", "summary.json", "throughput.png", "timeline.png")
TIMING_KEYS = {
    "seconds", "start_unix", "end_unix", "start_time", "end_time", "items_per_s", "tokens_per_s",
    "tokens_per_second", "wall_seconds", "train_seconds_total", "mfu",
    "resumed_from_step",  # how the run went: a train job killed after its last checkpoint resumes there
}
# Per-chunk stats also name the work folder's files.
VOLATILE_KEYS = TIMING_KEYS | {"input", "chunk"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _strip(obj, keys=VOLATILE_KEYS):
    if isinstance(obj, dict):
        return {k: _strip(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_strip(v, keys) for v in obj]
    return obj


def fingerprint(path: Path) -> str | dict | None:
    if path.name in VOLATILE_FILES:
        return None
    if path.name.endswith(".stats.json"):
        return json.dumps(_strip(json.loads(path.read_text())), sort_keys=True)
    if path.suffix == ".json":
        return _strip(json.loads(path.read_text()), TIMING_KEYS)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        kept = [c for c in table.column_names if c not in TIMING_KEYS]
        if len(kept) < len(table.column_names):  # e.g. a loss curve's wall-clock column
            return hashlib.sha256(repr(table.select(kept).to_pydict()).encode()).hexdigest()
    return sha256(path)


def added_keys(base, head) -> list[str] | None:
    """The keys head adds to a JSON object whose other content equals base's; None if not so."""
    if not (isinstance(base, dict) and isinstance(head, dict)) or set(base) - set(head):
        return None
    if any(base[k] != head[k] for k in base):
        return None
    return sorted(set(head) - set(base))


def run(rev: str, workdir: Path, configfiles: list[str], cores: int, target: list[str]) -> Path:
    tree = REPO
    if rev != WORKTREE:
        tree = workdir / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], check=True, capture_output=True)
    work = workdir / "work"
    work.mkdir()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(tree))
    cmd = [SNAKEMAKE, "-s", str(tree / "Snakefile"), "-d", str(work), "--cores", str(cores), *target]
    for f in configfiles:
        cmd += ["--configfile", os.path.abspath(f)]
    print(f"[{rev}] {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"[{rev}] workflow failed:\n{proc.stderr[-6000:]}")
    return work / "results"


def compare(a: Path, b: Path) -> int:
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file() and ".resume" not in p.parts}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file() and ".resume" not in p.parts}
    bad = 0
    for rel in sorted(files_a & files_b):
        fa, fb = fingerprint(a / rel), fingerprint(b / rel)
        if fa is None:
            print(f"  skipped (records timings)  {rel}")
        elif fa == fb:
            print(f"  identical                  {rel}")
        elif added_keys(fa, fb):
            print(f"  identical + new keys {added_keys(fa, fb)}  {rel}")
        else:
            print(f"  DIFFERS                    {rel}")
            bad += 1
    for rel in sorted(files_a - files_b):
        print(f"  only in base               {rel}")
        bad += 1
    for rel in sorted(files_b - files_a):
        print(f"  only in head (new output)  {rel}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("head", nargs="?", default=WORKTREE)
    ap.add_argument("--configfile", action="append", default=[])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--target", action="append", default=[])
    ap.add_argument("--keep", action="store_true", help="keep both work folders (printed) for a closer look")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shardflow-compare-")
    try:
        roots = []
        for name, rev in (("base", args.base), ("head", args.head)):
            (Path(tmp) / name).mkdir()
            roots.append(run(rev, Path(tmp) / name, args.configfile, args.cores, args.target))
        try:
            bad = compare(*roots)
        finally:
            for name in ("base", "head"):
                if not (Path(tmp) / name / "tree").exists():
                    continue
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(Path(tmp) / name / "tree")], capture_output=True)
    finally:
        if args.keep:
            print(f"work folders kept under {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("byte-identical" if not bad else f"{bad} file(s) differ or are missing", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
