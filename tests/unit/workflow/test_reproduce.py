"""workflow.reproduce: a pinned experiment's expectations against a run's provenance."""

from __future__ import annotations

from shardflow.workflow.reproduce import check_reproduction


def _sha(c: str) -> str:
    return c * 64


def test_a_pinned_file_is_found_where_the_workflows_own_copy_has_the_same_name():
    """A BEIR folder's corpus.jsonl is recorded after the split's source, the copy
    retrieval_prepare writes as results/<name>/retrieval/corpus.jsonl: the pin names the
    user's file, whose bytes are the pinned ones. It was compared with the copy alone
    (the first input whose path ends so) and failed."""
    inputs = {
        "results/scifact/retrieval/corpus.jsonl": _sha("a"),  # the split's source: the prepared copy
        "results/scifact/chunks/chunk_000.jsonl": _sha("b"),
        "../data/scifact/corpus.jsonl": _sha("c"),  # the user's files, hashed by provenance itself
        "../data/scifact/queries.jsonl": _sha("d"),
    }
    expect = {"data_sha256": {"corpus.jsonl": _sha("c"), "queries.jsonl": _sha("d")}}
    rows = check_reproduction(expect, {"inputs": inputs}, None)
    assert [(r.item, r.status) for r in rows] == [("data corpus.jsonl", "ok"), ("data queries.jsonl", "ok")]
    # Other bytes under that name than the pin's still fail.
    (row,) = check_reproduction({"data_sha256": {"corpus.jsonl": _sha("e")}}, {"inputs": inputs}, None)
    assert row.status == "FAIL"
