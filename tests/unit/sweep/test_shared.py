"""Retrieval sweep embeddings named by their settings: points that cannot change the
embeddings share one set, the main run's settings read the main run's files, an
embedding key gets one set per value (shardflow.sweep.shared)."""

from __future__ import annotations

import re

import pytest

from shardflow.core.config import load_schema, validate_config
from shardflow.sweep.paths import format_value
from shardflow.sweep.shared import KEY_REGEX, embedding_params, plan, settings_key
from shardflow.sweep.spec import parse_sweeps

from .conftest import sweep


@pytest.fixture
def workflow_config(config, tmp_path):
    """The shipped config, validated (defaults filled) as the workflow sees it."""
    schema = load_schema(__import__("tests.conftest").conftest.REPO / "config" / "config.schema.yaml")
    config["retrieval"].update(path=str(tmp_path), name="tiny")
    return validate_config(config, schema), (lambda cfg: validate_config(cfg, schema))


def _plan(workflow_config, sweeps, device="auto", n_chunks=2):
    config, check = workflow_config
    specs = parse_sweeps({name: sweep(stage="retrieval", metrics={"ndcg_at_10": "max"}, **s)
                          for name, s in sweeps.items()}, config, check)
    return specs, plan(specs.values(), config, dataset="tiny", n_chunks=n_chunks, device=device)


def _sets(shared, folder):
    """{(point, seed): (corpus set, query set)} of one sweep."""
    return {(p, s): shared.of_job(f, p, s) for (f, p, s) in shared.jobs if f == folder}


def test_key_is_canonical_and_tells_values_apart():
    assert settings_key({"a": 1, "b": {"c": None}}) == settings_key({"b": {"c": None}, "a": 1})
    assert len({settings_key({"a": v}) for v in (1, 1.0, True, "1")}) == 4
    assert re.fullmatch(KEY_REGEX, settings_key({}))


def test_search_settings_share_the_main_runs_embeddings(workflow_config):
    _, shared = _plan(workflow_config, {"search": {"grid": {
        "retrieval.top_k": [100, 200], "retrieval.drop_identical_ids": [True, False],
        "retrieval.backend": ["torch", "faiss"], "retrieval.block_size": [1024]}, "seeds": [0]}})
    jobs = _sets(shared, "search")
    assert len(jobs) == 8
    assert all(corpus.main and queries.main for corpus, queries in jobs.values())
    assert shared.counts() == {"corpus": 0, "queries": 0}


def test_embedding_keys_and_seeds_get_their_own_sets_shared_across_sweeps(workflow_config):
    config, _ = workflow_config
    _, shared = _plan(workflow_config, {
        "maxlen": {"grid": {"embedding.max_length": [64, 128]}, "seeds": [0, 1]},
        "again": {"grid": {"embedding.max_length": [64], "retrieval.top_k": [100, 200]}, "seeds": [0]},
        "prompt": {"grid": {"retrieval.query_prompt": ["q: "]}, "seeds": [0]},
    })
    maxlen = _sets(shared, "maxlen")
    corpus = {job: c.key for job, (c, _) in maxlen.items()}
    assert len(set(corpus.values())) == 4  # 2 values x 2 seeds: embedding.seed is in the section
    assert not any(c.main for c, _ in maxlen.values())
    # Another sweep with equal settings reads the same set, whatever it varies besides.
    again = _sets(shared, "again")
    assert {c.key for c, _ in again.values()} == {corpus[("max_length=64", 0)]}
    # The query prompt changes the queries' set only.
    (c, q), = _sets(shared, "prompt").values()
    assert c.main and not q.main and q.params["prompt"] == "q: "
    assert shared.counts() == {"corpus": 4, "queries": 5}
    # What a set's jobs run with: the recorded section, the point and seed applied.
    found = shared.computed("corpus", corpus[("max_length=128", 1)])
    assert found.params == {**embedding_params("corpus", config["embedding"], config["retrieval"]),
                            "max_length": 128, "seed": 1}
    with pytest.raises(ValueError, match="no retrieval sweep reads corpus embeddings 'ffff'"):
        shared.computed("corpus", "ffff")
    main_key = next(k for (kind, k), s in shared.sets.items() if kind == "corpus" and s.main)
    with pytest.raises(ValueError, match="no retrieval sweep reads corpus"):
        shared.computed("corpus", main_key)  # the main run makes it, not a sweep job


def test_a_point_at_the_main_runs_values_reads_its_files(workflow_config):
    config, _ = workflow_config
    main = config["embedding"]["max_length"]
    other = 64 if main != 64 else 32
    _, shared = _plan(workflow_config, {"m": {"grid": {"embedding.max_length": [main, other]}, "seeds": [0, 1]}})
    jobs = _sets(shared, "m")
    at_main = [job for job, (c, q) in jobs.items() if c.main]
    assert at_main == [(f"max_length={format_value(main)}", 0)]  # seed 0 is the main run's embedding.seed (the default)
    assert all(q.main for job, (_, q) in jobs.items() if job in at_main)
    assert shared.counts() == {"corpus": 3, "queries": 3}


def test_what_decides_a_set_and_what_does_not(workflow_config):
    config, check = workflow_config
    grid = {"m": {"grid": {"embedding.max_length": [64]}, "seeds": [0]}}

    def keys(cfg=config, **kw):
        specs = parse_sweeps({"m": sweep(stage="retrieval", metrics={"ndcg_at_10": "max"}, **grid["m"])}, cfg, check)
        shared = plan(specs.values(), cfg, **{"dataset": "tiny", "n_chunks": 2, "device": "auto", **kw})
        c, q = shared.of_job("m", "max_length=64", 0)
        return c.key, q.key

    corpus, queries = keys()
    assert keys(device="cpu")[0] != corpus and keys(device="cpu")[1] != queries
    assert keys(dataset="other") != (corpus, queries)
    assert keys(n_chunks=3) == (keys(n_chunks=3)[0], queries) and keys(n_chunks=3)[0] != corpus
    cached = {**config, "embedding": {**config["embedding"], "compile_cache": "/tmp/cache"}}
    assert keys(cfg=cached) == (corpus, queries)  # where kernels are cached decides nothing
