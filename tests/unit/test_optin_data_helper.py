"""tests.helpers.opt_in_data: where an opt-in check finds ../shared data, and what it
does when the data is not there."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO

CHECK = """
import pytest
from tests.helpers import opt_in_data

def test_reads():
    path = opt_in_data("CNNDM", "shared/data/cnndm-frank100/dev.jsonl")
    print("PATH", path)
"""


def _run(tmp_path, **env):
    (tmp_path / "test_check.py").write_text(CHECK)
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-rs", "-p", "no:cacheprovider",
                           str(tmp_path / "test_check.py")], capture_output=True, text=True,
                          env={**base, **env}, cwd=tmp_path)


def test_not_opted_in_the_check_is_skipped_saying_how_to_opt_in(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0 and "1 skipped" in proc.stdout and "SHARDFLOW_OPTIN=1" in proc.stdout


def test_opted_in_a_missing_data_set_fails_naming_where_it_was_looked_for(tmp_path):
    """A skip read as a check that ran: from a clone outside the folder beside ../shared
    (/tmp/x), SHARDFLOW_OPTIN=1 skipped every opt-in check without a failure."""
    missing = tmp_path / "nowhere" / "dev.jsonl"
    proc = _run(tmp_path, SHARDFLOW_OPTIN="1", CNNDM=str(missing))
    assert proc.returncode == 1 and "1 failed" in proc.stdout
    assert f"SHARDFLOW_OPTIN=1 but {missing} is not there" in proc.stdout and "CNNDM=" in proc.stdout


def test_opted_in_the_make_targets_variable_names_the_data(tmp_path):
    data = tmp_path / "dev.jsonl"
    data.write_text("{}\n")
    proc = _run(tmp_path, SHARDFLOW_OPTIN="1", CNNDM=str(data))
    assert proc.returncode == 0 and f"PATH {data}" in proc.stdout
