"""The embeddings that retrieval sweep jobs share: one set per distinct settings.

A retrieval job reads two sets of embeddings: the corpus's and the queries'. A sweep
over what the search reads (retrieval.top_k, block_size, backend, drop_identical_ids)
or over the query prompt leaves the corpus embeddings as they are; so each set is
named by what decides it, never by the point:

- corpus: the embedding section as the embed job records it (core.config.recorded, the
  job's point and seed applied), the data set (name and chunk count: its split chunks
  are the input) and gpu_jobs.device (recorded too: it decides dtype and kernels);
- queries: the same, with the query prompt (retrieval.query_prompt, query_prompt_name)
  in the section, as the query embed job records it.

`settings_key` hashes those settings (canonical JSON), so jobs with equal settings,
within a sweep, across its seeds where the seed does not reach them, and across
sweeps, read one set; a set whose settings equal the main run's is the main run's
own (results/<dataset>/...), computed once for both. A sweep over an embedding key
(embedding.max_length) gets one set per value.

The seed of a retrieval sweep is `embedding.seed` (torch's seed as the model loads):
it is in the section, so each seed has its own set (the default, 0, is the main run's).
The workflow's rules name the files (rules/sweep.smk); this module says which set each
job reads and what its jobs run with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shardflow.core.config import recorded
from shardflow.sweep.spec import SweepSpec

# The folder of the shared sets under results/sweeps, logs/sweeps and benchmarks/sweeps
# (a sweep's own folder starts with a letter or digit, so none can take this name).
SHARED_FOLDER = "_embeddings"
KEY_LENGTH = 16
KEY_REGEX = f"[0-9a-f]{{{KEY_LENGTH}}}"
KINDS = ("corpus", "queries")


def set_folder(root: str, dataset: str, kind: str, key: str) -> str:
    """The folder, under `root` (results, logs or benchmarks), of a set the sweeps compute
    on data set `dataset`: `key` its settings_key, or a pattern's `{settings}` with the
    file under it. One place for the workflow's rules (rules/common.smk
    shared_embeddings), status and estimate, which find the sets' files there."""
    return f"{root}/sweeps/{SHARED_FOLDER}/{dataset}/{kind}/{key}"


def settings_key(settings: Mapping[str, Any]) -> str:
    """A set's name: the first KEY_LENGTH hex digits of the sha256 of its settings as
    canonical JSON (keys sorted), so the order of keys in a config file changes nothing
    and 1, 1.0 and true stay three values."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]


def embedding_params(kind: str, embedding: Mapping[str, Any], retrieval: Mapping[str, Any]) -> dict:
    """The `embedding` params of the job that embeds `kind` (as rules/embed.smk and
    rules/retrieval.smk give them): the recorded section, plus the query prompt for
    the queries."""
    params = recorded("embedding", embedding)
    if kind == "queries":
        params.update(prompt=retrieval["query_prompt"], prompt_name=retrieval["query_prompt_name"])
    return params


@dataclass(frozen=True)
class EmbeddingSet:
    """One set of embeddings: what its jobs run with, and whether it is the main run's."""

    kind: str  # "corpus" or "queries"
    key: str  # settings_key of its settings
    params: Mapping[str, Any]  # the embed jobs' `embedding` params (recorded)
    compile_cache: str | None  # not recorded: where its jobs keep compiled kernels
    main: bool  # the main run's own set (results/<dataset>/...): no sweep job makes it


@dataclass(frozen=True)
class SharedEmbeddings:
    """Which sets the jobs of the retrieval sweeps read (`plan`)."""

    sets: Mapping[tuple[str, str], EmbeddingSet]  # (kind, key) -> set, the main run's included
    jobs: Mapping[tuple[str, str, int], tuple[str, str]]  # (sweep folder, point, seed) -> (corpus, queries) keys

    def of_job(self, folder: str, point: str, seed: int) -> tuple[EmbeddingSet, EmbeddingSet]:
        """The corpus and query sets one job reads."""
        corpus, queries = self.jobs[(folder, point, int(seed))]
        return self.sets[("corpus", corpus)], self.sets[("queries", queries)]

    def computed(self, kind: str, key: str) -> EmbeddingSet:
        """A set that sweep jobs compute (not the main run's); ValueError for any other key."""
        found = self.sets.get((kind, key))
        if found is None or found.main:
            known = sorted(k for (c, k), s in self.sets.items() if c == kind and not s.main)
            raise ValueError(f"no retrieval sweep reads {kind} embeddings {key!r} (the sweeps' own: {known or 'none'})")
        return found

    def counts(self) -> dict[str, int]:
        """Sets the sweeps compute themselves, per kind (the main run's not counted)."""
        return {kind: sum(1 for (c, _), s in self.sets.items() if c == kind and not s.main) for kind in KINDS}


def plan(
    specs: Iterable[SweepSpec], config: Mapping[str, Any], *, dataset: str, n_chunks: int, device: str
) -> SharedEmbeddings:
    """The sets every job of the retrieval `specs` reads, the main run's (`config`) first.

    `dataset` and `n_chunks`: the data set whose split chunks the corpus jobs embed and
    whose queries the query job embeds; `device`: gpu_jobs.device (every GPU job's).
    The workflow gathers these from a run's config and data sets in one place
    (shardflow.workflow.plan.retrieval_sweep_embeddings), for its rules, status and estimate.
    """
    context = {"dataset": dataset, "device": device}

    def make(kind: str, embedding: Mapping, retrieval: Mapping, main: bool) -> EmbeddingSet:
        params = embedding_params(kind, embedding, retrieval)
        settings = {**context, "kind": kind, "embedding": params}
        if kind == "corpus":
            settings["n_chunks"] = n_chunks
        return EmbeddingSet(kind, settings_key(settings), params, embedding.get("compile_cache"), main)

    sets: dict[tuple[str, str], EmbeddingSet] = {}
    for kind in KINDS:
        main = make(kind, config["embedding"], config["retrieval"], True)
        sets[(kind, main.key)] = main
    jobs = {}
    for spec in specs:
        for point, seed in spec.jobs():
            job = spec.job_config(point, seed, ("embedding", "retrieval"))
            keys = []
            for kind in KINDS:
                found = make(kind, job["embedding"], job["retrieval"], False)
                sets.setdefault((kind, found.key), found)
                keys.append(found.key)
            jobs[(spec.folder, point, seed)] = tuple(keys)
    return SharedEmbeddings(sets, jobs)
