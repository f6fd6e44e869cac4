"""Reproduction checks on the FRANK CNN/DailyMail sample (../shared data; opt-in).

Runs (a) and (b) of benchmarks/summarise_reference.py: stored system summaries
against FRANK's published per-document ROUGE, and Lead-3 against its target.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers import REPO, opt_in_data

pytestmark = pytest.mark.optin


@pytest.fixture(scope="module")
def data():
    return opt_in_data("CNNDM", "shared/data/cnndm-frank100/dev.jsonl")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("summarise_reference", REPO / "benchmarks" / "summarise_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stored_systems_match_frank(bench, data):
    lines, passed = bench.frank_check(str(data))
    assert passed, "\n".join(lines)


def test_lead3_in_target(bench, data):
    from shardflow.summarise.data import load_documents
    from shardflow.summarise.lead import lead_k

    docs = load_documents(str(data)).records
    scores = bench._score_summaries(docs, [lead_k(d.article, 3, "punctuation") for d in docs], "lead3")
    row, passed = bench._row("Lead-3", scores, bench.LEAD3_TARGET)
    # The target range comes from simple punctuation splitters (data README): the
    # default `punctuation` splitter. `prose` keeps "U.S. Census", "B.B. King" and
    # "J. Brown" whole, which moves 3 of the 100 Lead-3 summaries up by ~0.2 R-1.
    assert passed, f"{row}\ntarget {bench.LEAD3_TARGET}"
