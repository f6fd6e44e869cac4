"""What the repository itself may hold: no file over 2 MB is tracked (data belongs in
../shared or is generated; a wheel or model committed by accident would weigh on every
clone for good)."""

import shutil
import subprocess

import pytest

from tests.helpers import REPO

LIMIT = 2 * 1024 * 1024


def test_no_tracked_file_over_2_mb():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked (CI runs from a clone)")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [REPO / p for p in listed.decode().split("\0") if p]
    assert paths, "git ls-files listed nothing"
    big = {str(p.relative_to(REPO)): p.stat().st_size for p in paths if p.is_file() and p.stat().st_size > LIMIT}
    assert not big, f"tracked files over 2 MB: {big}"
