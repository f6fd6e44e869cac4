"""Ad hoc search of a finished run's embeddings: queries without relevance judgements
(`make search`, `python -m shardflow.cli search`).

Retrieval evaluation (shardflow.retrieval.pipeline) scores judged queries against a
benchmark's corpus. This answers the question a user asks once a corpus is embedded:
which documents are nearest to these texts. The queries are embedded as the run
embedded its documents, with the run's own embedding settings read from its provenance
record (model, dtype, max_length, ...), and a model folder that no longer hashes as the
record says is refused: vectors of another model are not comparable with the corpus's.
The search is the retrieval stage's exact search (`exact_search`), by the model's
similarity, and each hit's text is read back from the data set's chunk files, which
hold the documents in the order of the merged embeddings.
"""

from __future__ import annotations

import json
import logging
import os
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from shardflow.corpus.chunks import chunk_path, iter_chunk
from shardflow.corpus.readers import ReaderOptions, Rejected, expand_inputs, iter_records

log = logging.getLogger(__name__)

# The prompt a model's sentence-transformers config names for queries, as MTEB and
# sentence-transformers' encode_query pick it for a retrieval query.
QUERY_PROMPT_NAME = "query"


@dataclass(frozen=True)
class Hit:
    rank: int
    id: str
    score: float
    text: str


@dataclass(frozen=True)
class Answer:
    query_id: str
    query: str
    hits: list[Hit]

    def as_json(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "query": self.query,
            "hits": [{"rank": h.rank, "id": h.id, "score": h.score, "text": h.text} for h in self.hits],
        }


@dataclass(frozen=True)
class EmbeddedRun:
    """What a data set's finished run holds for a search: its files and how it embedded."""

    folder: Path  # results/<dataset>
    embedding: dict[str, Any]  # the run's embedding section, as its provenance record holds it
    model_sha256: str | None  # the embedding model's hash in that record (None: not hashed)
    chunk_items: list[int]  # records per chunk, in merge order (the manifest's)

    @property
    def embeddings(self) -> Path:
        return self.folder / "embeddings.npy"

    @property
    def ids(self) -> Path:
        return self.folder / "ids.parquet"


def _read_json(path: Path, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file: {what}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not a JSON object")
    return value


def embedded_run(folder: str | os.PathLike) -> EmbeddedRun:
    """The finished run of data set folder `folder` (results/<dataset>): its provenance
    record, its verification (which must have passed) and its chunk manifest."""
    folder = Path(folder)
    finish = "run the workflow to the end for this data set first (make run, or snakemake with its config)"
    record_path = folder / "provenance.json"
    record = _read_json(record_path, f"the data set's provenance record, written at the end of its run: {finish}")
    embedding = (record.get("config") or {}).get("embedding")
    if not isinstance(embedding, dict) or not isinstance(embedding.get("model"), str):
        raise ValueError(f"{record_path}: no config.embedding.model: not the record of an embedded data set")
    verification_path = folder / "verification.json"
    verification = _read_json(verification_path, f"the embeddings' verification: {finish}")
    if verification.get("ok") is False:
        raise ValueError(f"{verification_path}: the embeddings failed verification: search them after a run that passes")
    for path in (folder / "embeddings.npy", folder / "ids.parquet"):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file: {finish}")
    manifest_path = folder / "chunks" / "manifest.json"
    manifest = _read_json(manifest_path, f"the data set's chunk manifest: {finish}")
    try:
        items = [int(entry["items"]) for entry in manifest["chunks"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{manifest_path}: no chunk list with each chunk's items ({exc!r})") from None
    model = (record.get("models") or {}).get("embedding") or {}
    return EmbeddedRun(folder, embedding, model.get("sha256") if isinstance(model, dict) else None, items)


def read_queries(texts: Sequence[str], files: Sequence[str], opts: ReaderOptions) -> list[tuple[str, str]]:
    """The queries as (id, text): each of `texts` (ids `query_1`, ...), then each record of
    `files` (read as corpus input is, `opts` naming their fields). A bad record is an error
    naming its file and line; so is an id given twice (the answers are keyed by id)."""
    queries = [(f"query_{i}", text) for i, text in enumerate(texts, 1)]
    where: dict[str, str] = {qid: f"--query {i}" for i, (qid, _) in enumerate(queries, 1)}
    for i, text in enumerate(texts, 1):
        if not text.strip():
            raise ValueError(f"--query {i} is empty")
    paths = expand_inputs(list(files)) if files else []
    for rec in iter_records(paths, opts):
        if isinstance(rec, Rejected):  # on_bad_record is "error": the readers raise instead
            raise ValueError(f"{rec.source}:{rec.line}: {rec.reason}")
        here = f"{rec.source}:{rec.line}"
        if rec.id in where:
            raise ValueError(f"{here}: query id {rec.id!r} again (first at {where[rec.id]})")
        where[rec.id] = here
        queries.append((rec.id, rec.text))
    if not queries:
        raise ValueError("no queries: give --query TEXT or --queries FILE" + (f" ({', '.join(paths)} hold none)" if paths else ""))
    return queries


def query_params(run: EmbeddedRun, *, prompt: str | None, prompt_name: str | None, device: str):
    """The run's embedding settings for the queries: its model and every setting that
    shapes a vector (dtype, max_length, pooling through the model), with the query prompt
    instead of the documents' and no compile (a handful of texts would wait on it)."""
    from shardflow.core.models import resolve_model
    from shardflow.embed.params import EmbedParams

    known = {f.name for f in fields(EmbedParams)} - {"compile_cache"}
    settings = {k: v for k, v in run.embedding.items() if k in known}
    settings.update(model=resolve_model(run.embedding["model"]), device=device, prompt=prompt,
                    prompt_name=prompt_name, compile=False, compile_mode="auto")
    return EmbedParams(**settings)


def default_prompt_name(model_prompts: Iterable[str]) -> str | None:
    """The model's query prompt where its config names one (`query`), else none."""
    return QUERY_PROMPT_NAME if QUERY_PROMPT_NAME in set(model_prompts) else None


def check_model(run: EmbeddedRun, model_path: str) -> str | None:
    """Refuse a model folder that no longer hashes as the run's record says (queries of
    other weights land elsewhere than the documents); returns a warning where the record
    holds no hash to compare with."""
    from shardflow.core.hashing import model_sha256

    if run.model_sha256 is None:
        return (f"{run.folder / 'provenance.json'} holds no hash of the embedding model: the queries are embedded "
                f"with {run.embedding['model']} as it is now, unchecked against the run's")
    now = model_sha256(model_path).get("sha256")
    if now != run.model_sha256:
        raise ValueError(
            f"embedding model {run.embedding['model']} ({model_path}) hashes {str(now)[:12]}..., but the run "
            f"embedded its documents with {run.model_sha256[:12]}... ({run.folder / 'provenance.json'}, "
            "models.embedding): query vectors of other weights are not comparable with the documents'. "
            "Restore the run's model, or rerun the workflow with this one"
        )
    return None


def hit_texts(run: EmbeddedRun, rows: Iterable[int], ids: Sequence[str]) -> dict[int, str]:
    """The text of each embedding row in `rows`, read from the chunk files: row r is the
    record at its place in chunk i (merge concatenates the chunks in order, every record
    embedded). Only the chunks holding a hit are read, each up to its last hit; a record
    whose id is not the row's is an error naming the file and line (chunks rewritten
    since the merge)."""
    starts, total = [], 0
    for n in run.chunk_items:
        starts.append(total)
        total += n
    if total != len(ids):
        raise ValueError(f"{run.folder / 'chunks' / 'manifest.json'} lists {total} records, {run.ids} {len(ids)}: "
                         "the chunks are not those of the merged embeddings")
    wanted: dict[int, dict[int, int]] = {}  # chunk -> {line index: row}
    for row in rows:
        chunk = next(i for i in range(len(starts) - 1, -1, -1) if starts[i] <= row)
        wanted.setdefault(chunk, {})[row - starts[chunk]] = row
    texts: dict[int, str] = {}
    for chunk, lines in sorted(wanted.items()):
        path = chunk_path(run.folder / "chunks", chunk)
        last = max(lines)
        for j, rec in enumerate(iter_chunk(path)):
            if j in lines:
                row = lines[j]
                if rec.id != ids[row]:
                    raise ValueError(f"{path}:{j + 1}: id {rec.id!r}, but embedding row {row} is {ids[row]!r} "
                                     f"({run.ids}): the chunks changed after the merge; rerun the workflow")
                texts[row] = rec.text
            if j == last:
                break
        missing = sorted(set(lines) - {j for j in lines if lines[j] in texts})
        if missing:
            raise ValueError(f"{path}: {len(missing)} records short of the manifest (line {missing[0] + 1} missing)")
    return texts


def search(
    folder: str | os.PathLike,
    queries: Sequence[tuple[str, str]],
    top_k: int,
    *,
    prompt: str | None = None,
    prompt_name: str | None = None,
    device: str = "auto",
    logger: logging.Logger | None = None,
) -> tuple[list[Answer], dict[str, Any]]:
    """The `top_k` nearest documents of data set folder `folder` for each query, and what
    the search ran with (model, prompt, similarity, device, documents). Neither prompt
    nor prompt_name: the model's query prompt where it names one."""
    from shardflow.embed.engine import load_encoder
    from shardflow.embed.stconfig import load_model_spec
    from shardflow.retrieval.pipeline import SEARCH_SIMILARITIES
    from shardflow.retrieval.search import exact_search

    logger = logger or log
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    run = embedded_run(folder)
    if device == "auto":  # the CPU embeds a few queries well: no warning of a fallback
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    params = query_params(run, prompt=prompt, prompt_name=prompt_name, device=device)
    warning = check_model(run, params.model)
    if warning:
        logger.warning(warning)
    spec = load_model_spec(params.model)
    if spec.similarity not in SEARCH_SIMILARITIES:
        raise ValueError(f"the model's similarity_fn_name is {spec.similarity!r}: search ranks by "
                         f"{' or '.join(SEARCH_SIMILARITIES)} (exact inner product)")
    if prompt is None and prompt_name is None:
        params = query_params(run, prompt=None, prompt_name=default_prompt_name(dict(spec.prompts)), device=device)
    encoder = load_encoder(params, logger)
    vectors = encoder.encode([text for _, text in queries])
    ids = pq.read_table(run.ids, columns=["id"]).column("id").to_pylist()
    hits = exact_search(vectors, run.embeddings, top_k, normalize=spec.similarity == "cosine",
                        device=device, query_ids=[q for q, _ in queries], doc_ids=ids)
    rows = hits.indices
    texts = hit_texts(run, {int(r) for r in rows.ravel() if r >= 0}, ids)
    answers = [
        Answer(qid, text, [Hit(rank, ids[int(r)], float(s), texts[int(r)])
                           for rank, (r, s) in enumerate(zip(rows[q], hits.scores[q], strict=True), 1) if r >= 0])
        for q, (qid, text) in enumerate(queries)
    ]
    used = {
        "data_set": str(run.folder),
        "documents": len(ids),
        "model": run.embedding["model"],
        "prompt_name": params.prompt_name,
        "prompt": params.prompt,
        "documents_prompt_name": run.embedding.get("prompt_name"),
        "documents_prompt": run.embedding.get("prompt"),
        "similarity": spec.similarity,
        "top_k": top_k,
        "device": device,
    }
    return answers, used


def snippet(text: str, width: int) -> str:
    """`text` on one line (white space collapsed), cut to `width` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def table(answers: Sequence[Answer], used: dict[str, Any], width: int = 100) -> str:
    """The answers as text: a line on what ran, then per query its ranked hits (rank,
    score, id, the start of the text), each line at most `width` characters (an id longer
    than that aside)."""
    def prompt(name: str | None, text: str | None) -> str:
        return f"prompt {name!r}" if name else f"prompt {text!r}" if text else "no prompt"

    head = (f"{used['data_set']}: {used['documents']} documents, model {used['model']}, {used['similarity']}, "
            f"queries with {prompt(used['prompt_name'], used['prompt'])}")
    documents = prompt(used.get("documents_prompt_name"), used.get("documents_prompt"))
    if documents != "no prompt":  # the run's: a query prompt is chosen to match it
        head += f" (documents with {documents})"
    lines = textwrap.wrap(head, width, break_on_hyphens=False)
    for answer in answers:
        lines.append("")
        lines.append(snippet(f"{answer.query_id}: {answer.query}", width))
        for hit in answer.hits:
            head = f"{hit.rank:>4}  {hit.score:.4f}  {hit.id}  "
            lines.append(head + snippet(hit.text, width - len(head)))
    return "\n".join(lines) + "\n"
