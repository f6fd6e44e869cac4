"""Helpers shared by the workflow and cluster tests: run the real workflow."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")


def offline_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": f"{BIN}:{env.get('PATH', '')}"})
    env.update(extra)
    return env


def write_config(path: Path, **overrides) -> Path:
    path.write_text(yaml.safe_dump(overrides, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, timeout: int = 600, check: bool = True, env: dict | None = None):
    """Run the repo's Snakefile in `workdir`; return the CompletedProcess (output captured)."""
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    proc = subprocess.run(
        cmd, cwd=workdir, env=env or offline_env(), capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def job_counts(dry_run_output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run as {rule: count}."""
    counts: dict[str, int] = {}
    lines = dry_run_output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Job stats:"))
    for line in lines[start + 3 :]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts
