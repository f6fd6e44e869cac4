"""Ad hoc search of a finished run's embeddings: queries without relevance judgements
(`make search`, `python -m shardflow.cli search`); and task search's stored hits read
back with their texts, nothing embedded (`make hits`, `python -m shardflow.cli hits`).

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

import bisect
import itertools
import logging
import os
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from shardflow.core.columns import ids_at, open_ids
from shardflow.core.files import read_json
from shardflow.corpus.chunks import chunk_path, parse_chunk_line
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
    # The run's retrieval section where this data set is its evaluation's corpus: the
    # prompt its judged queries were embedded with (retrieval.query_prompt, _name).
    retrieval: dict[str, Any] | None = None

    @property
    def embeddings(self) -> Path:
        return self.folder / "embeddings.npy"

    @property
    def ids(self) -> Path:
        return self.folder / "ids.parquet"


def _read_json(path: Path, what: str) -> dict:
    """A JSON object the run wrote (core.files.read_json: a file cut short or not UTF-8
    named by file and line); a missing one names what it is and how to make it."""
    try:
        value = read_json(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file: {what}") from None
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
    retrieval = (record.get("config") or {}).get("retrieval")
    evaluated = isinstance(retrieval, dict) and retrieval.get("path") and retrieval.get("name") == folder.name
    return EmbeddedRun(folder, embedding, model.get("sha256") if isinstance(model, dict) else None, items,
                       retrieval if evaluated else None)


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
        held = f" ({', '.join(paths)} {'holds' if len(paths) == 1 else 'hold'} none)" if paths else ""
        raise ValueError("no queries: give --query TEXT or --queries FILE" + held)
    return queries


def query_params(run: EmbeddedRun, model: str, *, prompt: str | None, prompt_name: str | None, device: str):
    """The run's embedding settings for the queries: every setting that shapes a vector
    (dtype, max_length, pooling through the model), with the query prompt instead of the
    documents' and no compile (a handful of texts would wait on it)."""
    from shardflow.embed.params import EmbedParams

    known = {f.name for f in fields(EmbedParams)} - {"compile_cache"}
    settings = {k: v for k, v in run.embedding.items() if k in known}
    settings.update(model=model, device=device, prompt=prompt, prompt_name=prompt_name, compile=False,
                    compile_mode="auto")
    return EmbedParams(**settings)


@dataclass(frozen=True)
class QueryPrompt:
    prompt: str | None
    prompt_name: str | None  # neither: the model's default_prompt_name, if it has one
    source: str  # why this one, for the header and the log

    @property
    def documents(self) -> bool:
        """Whether the queries take the documents' own settings (no query prompt found)."""
        return self.source == DOCUMENTS_SETTINGS


DOCUMENTS_SETTINGS = "the documents' settings"


def query_prompt(run: EmbeddedRun, model_prompts: Mapping[str, str], prompt: str | None,
                 prompt_name: str | None) -> QueryPrompt:
    """The prompt the queries are embedded with: the one given; else, for a retrieval
    evaluation's corpus, the one its judged queries had (`retrieval.query_prompt` or
    `query_prompt_name`: its hits are the evaluation's); else the model's `query` prompt
    where its config names one that is not empty (an instruction model's:
    sentence-transformers 6 saves every model with empty `query` and `document`
    prompts); else the documents' own settings (a symmetric model: queries embedded as
    documents are)."""
    if prompt is not None or prompt_name is not None:
        return QueryPrompt(prompt, prompt_name, "given")
    if run.retrieval is not None:
        return QueryPrompt(run.retrieval.get("query_prompt"), run.retrieval.get("query_prompt_name"),
                           "the evaluation's retrieval.query_prompt / query_prompt_name")
    if model_prompts.get(QUERY_PROMPT_NAME):
        return QueryPrompt(None, QUERY_PROMPT_NAME, "the model's query prompt")
    return QueryPrompt(run.embedding.get("prompt"), run.embedding.get("prompt_name"), DOCUMENTS_SETTINGS)


def check_model(run: EmbeddedRun, model_path: str) -> str | None:
    """Refuse a model folder that does not hash as the run's record says (queries of
    other weights land elsewhere than the documents); returns a warning where the record
    holds no hash to compare with. The hash is kept per version of the model's files
    (core.madewith.model_sha256_kept): a second search reads no weights."""
    from shardflow.core.madewith import model_sha256_kept

    if run.model_sha256 is None:
        return (f"{run.folder / 'provenance.json'} holds no hash of the embedding model: the queries are embedded "
                f"with {model_path} as it is now, unchecked against the run's")
    now = model_sha256_kept(model_path).get("sha256")
    if now != run.model_sha256:
        raise ValueError(
            f"embedding model {model_path} hashes {str(now)[:12]}..., but the run embedded its documents with "
            f"{run.model_sha256[:12]}... ({run.folder / 'provenance.json'}, models.embedding; config "
            f"embedding.model {run.embedding['model']}): query vectors of other weights are not comparable with the "
            "documents'. Give the run's model (--model, MODEL=), or rerun the workflow with this one"
        )
    return None


def hit_texts(run: EmbeddedRun, rows: Mapping[int, str], n_rows: int) -> dict[int, str]:
    """The text of each embedding row in `rows` ({row: its id}, of the merged id column's
    `n_rows`), read from the chunk files: row r is the
    record at its place in chunk i (merge concatenates the chunks in order, every record
    embedded). Only the chunks holding a hit are read, each up to its last hit, and only
    the hits' lines are parsed; a record whose id is not the row's is an error naming the
    file and line (chunks rewritten since the merge)."""
    starts = list(itertools.accumulate(run.chunk_items, initial=0))
    if starts[-1] != n_rows:
        raise ValueError(f"{run.folder / 'chunks' / 'manifest.json'} lists {starts[-1]} records, {run.ids} "
                         f"{n_rows}: the chunks are not those of the merged embeddings")
    wanted: dict[int, dict[int, int]] = {}  # chunk -> {line index: row}
    for row in rows:
        chunk = bisect.bisect_right(starts, row) - 1
        wanted.setdefault(chunk, {})[row - starts[chunk]] = row
    texts: dict[int, str] = {}
    for chunk, lines in sorted(wanted.items()):
        path = chunk_path(run.folder / "chunks", chunk)
        last, seen = max(lines), -1
        with open(path, "rb") as fh:
            for j, raw in enumerate(fh):
                seen = j
                if j in lines:
                    row = lines[j]
                    rec = parse_chunk_line(raw, path, j + 1)
                    if rec.id != rows[row]:
                        raise ValueError(f"{path}:{j + 1}: id {rec.id!r}, but embedding row {row} is "
                                         f"{rows[row]!r} ({run.ids}): the chunks changed after the merge; "
                                         "rerun the workflow")
                    texts[row] = rec.text
                if j == last:
                    break
        if seen < last:
            raise ValueError(f"{path}: {seen + 1} records, but the manifest's count puts a hit on line {last + 1}: "
                             "the chunks changed after the merge; rerun the workflow")
    return texts


def search(
    folder: str | os.PathLike,
    queries: Sequence[tuple[str, str]],
    top_k: int,
    *,
    prompt: str | None = None,
    prompt_name: str | None = None,
    model: str | None = None,
    device: str = "auto",
    logger: logging.Logger | None = None,
) -> tuple[list[Answer], dict[str, Any]]:
    """The `top_k` nearest documents of data set folder `folder` for each query, and what
    the search ran with (model, prompt, similarity, device, documents). `model`: the
    run's model where it lies now, if not where its config named it (still checked
    against the recorded hash). Neither prompt nor prompt_name: `query_prompt` picks."""
    from shardflow.core.columns import read_id_array
    from shardflow.core.devices import resolve_device
    from shardflow.core.models import resolve_model
    from shardflow.embed.engine import load_encoder
    from shardflow.embed.stconfig import load_model_spec
    from shardflow.retrieval.pipeline import SEARCH_SIMILARITIES
    from shardflow.retrieval.search import exact_search

    logger = logger or log
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    run = embedded_run(folder)
    try:  # auto resolved here: the CPU embeds a few queries well, no warning of a fallback
        device = str(resolve_device(device))
    except RuntimeError as exc:  # CUDA asked for where there is none
        raise ValueError(f"--device {device}: {exc}") from None
    named = model if model is not None else run.embedding["model"]
    try:
        model_path = resolve_model(named)
    except FileNotFoundError:
        # resolve_model advises a config key, which a search never reads: it takes the
        # model the run's record names, or --model.
        if model is not None:
            raise FileNotFoundError(f"--model {named!r}: no such folder") from None
        raise FileNotFoundError(
            f"the run's model {named!r} ({run.folder / 'provenance.json'}, config.embedding.model): no such folder "
            "(moved or deleted?): give it where it lies now, --model <folder> (make search MODEL=<folder>), checked "
            "against the hash the run recorded"
        ) from None
    warning = check_model(run, model_path)
    if warning:
        logger.warning(warning)
    spec = load_model_spec(model_path)
    if spec.similarity not in SEARCH_SIMILARITIES:
        raise ValueError(f"the model's similarity_fn_name is {spec.similarity!r}: search ranks by "
                         f"{' or '.join(SEARCH_SIMILARITIES)} (exact inner product)")
    chosen = query_prompt(run, dict(spec.prompts), prompt, prompt_name)
    documents = (run.embedding.get("prompt"), run.embedding.get("prompt_name"))
    if chosen.documents and documents != (None, None):
        logger.warning("the documents were embedded with %s, and so are the queries: an asymmetric model wants its "
                       "query prompt instead (--prompt, --prompt-name)", _prompt_words(*documents, None))
    params = query_params(run, model_path, prompt=chosen.prompt, prompt_name=chosen.prompt_name, device=device)
    encoder = load_encoder(params, logger)
    vectors = encoder.encode([text for _, text in queries])
    ids = read_id_array(run.ids)
    hits = exact_search(vectors, run.embeddings, top_k, normalize=spec.similarity == "cosine", device=device,
                        query_ids=[q for q, _ in queries], doc_ids=ids)
    rows = hits.indices
    found = sorted({int(r) for r in rows.ravel() if r >= 0})
    hit_ids = dict(zip(found, ids.take(found).to_pylist(), strict=True))
    texts = hit_texts(run, hit_ids, len(ids))
    answers = [
        Answer(qid, text, [Hit(rank, hit_ids[int(r)], float(s), texts[int(r)])
                           for rank, (r, s) in enumerate(zip(rows[q], hits.scores[q], strict=True), 1) if r >= 0])
        for q, (qid, text) in enumerate(queries)
    ]
    used = {
        "data_set": str(run.folder),
        "documents": len(ids),
        "model": model_path if model is not None else run.embedding["model"],
        "prompt": _prompt_words(chosen.prompt, chosen.prompt_name, spec.default_prompt_name),
        "prompt_source": chosen.source,
        "documents_prompt": _prompt_words(*documents, spec.default_prompt_name),
        "similarity": spec.similarity,
        "top_k": top_k,
        "device": device,
    }
    return answers, used


# Task search's hits are read this many rows at a time: a million queries' file is never
# held whole, and the reading stops once the queries shown are complete.
HITS_BATCH = 65_536
FIRST_QUERIES = 5  # shown where no query id is given


def stored_hits(
    folder: str | os.PathLike,
    query_ids: Sequence[str] = (),
    first: int | None = None,
    top_k: int | None = None,
) -> tuple[list[Answer], dict[str, Any]]:
    """Task search's hits of data set folder `folder` (search/hits.parquet) with their
    texts, nothing embedded: those of `query_ids` in the order given (an id given twice
    shown once), else of the `first` queries of the file (FIRST_QUERIES where neither is
    given); each query's `top_k` best (all the file holds: None). The queries' texts
    are read from search/queries.jsonl, the hits' from the chunk files by row
    (`hit_texts`), each row checked against ids.parquet first: hits of a run that changed
    since the search are an error naming the files. Also returns what `header` says."""
    from shardflow.retrieval.batch import HITS_SCHEMA

    if query_ids and first is not None:
        raise ValueError("give query ids or a number of first queries, not both")
    for name, value in (("first", first), ("top_k", top_k)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    run = embedded_run(folder)
    out = run.folder / "search"
    hits_path, queries_path = out / "hits.parquet", out / "queries.jsonl"
    task = "run the workflow with task search (tasks: [embedding, search], and search.queries naming the queries)"
    if not hits_path.is_file():
        raise FileNotFoundError(f"{hits_path}: no such file: {task}")
    summary_path = out / "summary.json"
    summary = _read_json(summary_path, f"task search's summary: {task}")
    try:
        n_queries, k = int(summary["queries"]), int(summary["k"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{summary_path}: no counts of queries and k: not task search's summary") from None
    hits_file = open_ids(hits_path)  # any Parquet file: an unreadable one is named
    absent = [c for c in HITS_SCHEMA.names if c not in hits_file.schema_arrow.names]
    if absent:
        raise ValueError(f"{hits_path}: no column {', '.join(absent)}: not task search's hits")
    if query_ids:
        wanted = list(dict.fromkeys(query_ids))
        found = _read_hits(hits_file, set(wanted))
        unknown = [q for q in wanted if q not in found]
        if unknown:
            some = ", ".join(repr(q) for q in _first_query_ids(hits_file, 3))
            raise ValueError(f"{hits_path}: no query {', '.join(map(repr, unknown))} (its query ids are those of "
                             f"{queries_path}: {some}, ...)")
        texts = _query_texts(queries_path, set(wanted), hits_path)
        queries = [(q, texts[q]) for q in wanted]
    else:
        queries = list(itertools.islice(_iter_queries(queries_path), first or FIRST_QUERIES))
        found = _read_hits(hits_file, {q for q, _ in queries})
        for qid, _ in queries:
            if qid not in found:
                raise ValueError(f"{hits_path}: no hits of query {qid!r} of {queries_path}: the files are not of one "
                                 f"search; {task}")
    shown = {q: sorted(found[q])[:top_k] for q, _ in queries}  # by rank
    n_rows = open_ids(run.ids).metadata.num_rows
    rows: dict[int, str] = {}
    for qid, hits in shown.items():
        for rank, hit_id, _, row in hits:
            if not 0 <= row < n_rows:
                raise ValueError(f"{hits_path}: query {qid!r} rank {rank} is {hit_id!r} at row {row}, but {run.ids} "
                                 f"holds {n_rows} rows: the run changed since the search; {task} again")
            rows[row] = hit_id
    at = ids_at(run.ids, rows)
    for qid, hits in shown.items():
        for rank, hit_id, _, row in hits:
            if at[row] != hit_id:
                raise ValueError(f"{hits_path}: query {qid!r} rank {rank} is {hit_id!r} at row {row}, but row {row} "
                                 f"of {run.ids} is {at[row]!r}: the run changed since the search; {task} again")
    texts = hit_texts(run, rows, n_rows)
    answers = [Answer(qid, text, [Hit(rank, hit_id, score, texts[row]) for rank, hit_id, score, row in shown[qid]])
               for qid, text in queries]
    used = {
        "data_set": str(run.folder),
        "hits_file": str(hits_path),
        "queries": n_queries,
        "hits": hits_file.metadata.num_rows,
        "k": k,
        "documents": n_rows,
        "similarity": summary.get("similarity"),
        "shown": len(answers),
        "top_k": top_k,
    }
    return answers, used


def _read_hits(hits_file, wanted: set[str]) -> dict[str, list[tuple[int, str, float, int]]]:
    """The rows of `hits_file` (a pyarrow ParquetFile of task search's hits) of the queries
    `wanted`, as {query id: [(rank, id, score, row), ...]}, read HITS_BATCH rows at a time
    and filtered in Arrow: only the wanted queries' rows become Python objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from shardflow.retrieval.batch import HITS_SCHEMA

    keys = pa.array(sorted(wanted), hits_file.schema_arrow.field("query_id").type)
    found: dict[str, list[tuple[int, str, float, int]]] = {}
    for batch in hits_file.iter_batches(batch_size=HITS_BATCH, columns=HITS_SCHEMA.names):
        if not batch.num_rows:
            continue
        mask = pc.is_in(batch.column("query_id"), value_set=keys)
        picked = batch.filter(mask)
        for qid, *hit in zip(*(picked.column(c).to_pylist() for c in HITS_SCHEMA.names), strict=True):
            found.setdefault(qid, []).append(tuple(hit))
        # A query's hits are consecutive rows (queries in file order, each in rank order):
        # once every wanted query is seen and a batch ends on another, none has more.
        if len(found) == len(wanted) and not mask[batch.num_rows - 1].as_py():
            break
    return found


def _first_query_ids(hits_file, n: int) -> list[str]:
    """The first `n` query ids of task search's hits: examples for an error."""
    batch = next(hits_file.iter_batches(batch_size=HITS_BATCH, columns=["query_id"]), None)
    return list(dict.fromkeys(batch.column(0).to_pylist()))[:n] if batch is not None else []


def _iter_queries(path: Path) -> Iterator[tuple[str, str]]:
    """Task search's queries as it read them (search/queries.jsonl, the chunk format), as
    (id, text) in file order, a line at a time."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file: the queries task search read; rerun the workflow") from None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            rec = parse_chunk_line(raw, path, lineno)
            yield rec.id, rec.text


def _query_texts(path: Path, wanted: set[str], hits_path: Path) -> dict[str, str]:
    """The texts of the queries `wanted` in task search's queries file, read up to the
    last of them."""
    texts: dict[str, str] = {}
    for qid, text in _iter_queries(path):
        if qid in wanted:
            texts[qid] = text
            if len(texts) == len(wanted):
                return texts
    missing = ", ".join(repr(q) for q in sorted(wanted - texts.keys()))
    raise ValueError(f"{path}: no query {missing}, though {hits_path} holds its hits: the files are not of one search; "
                     "rerun the workflow")


def _prompt_words(prompt: str | None, prompt_name: str | None, default_name: str | None) -> str:
    """A prompt setting as the header says it: neither given means the model's default."""
    if prompt is not None:
        return f"prompt {prompt!r}" if prompt else "no prompt"
    if prompt_name is not None:
        return f"prompt {prompt_name!r}"
    return f"prompt {default_name!r} (the model's default)" if default_name else "no prompt"


def snippet(text: str, width: int) -> str:
    """`text` on one line (white space collapsed), cut to `width` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def header(used: dict[str, Any]) -> str:
    """Where the answers came from, on one line: for a search, what it ran with (data set,
    model, similarity, the queries' prompt); for task search's hits (`stored_hits`), their
    file and its counts, and what is shown of it."""
    if "hits_file" in used:
        shown = f"{used['shown']} {'query' if used['shown'] == 1 else 'queries'} shown"
        if used["top_k"] is not None:
            each = min(used["top_k"], used["k"])
            shown += f", {each} hit{'' if each == 1 else 's'} each"
        return (f"{used['data_set']}: task search's hits ({used['hits_file']}): {used['queries']} queries, "
                f"{used['hits']} hits, k {used['k']}, against {used['documents']} documents, {used['similarity']}; "
                f"{shown}")
    head = (f"{used['data_set']}: {used['documents']} documents, model {used['model']}, {used['similarity']}, "
            f"queries with {used['prompt']}")
    if used["documents_prompt"] != "no prompt":  # the run's: a query prompt is chosen to match it
        head += f" (documents with {used['documents_prompt']})"
    return head


def table(answers: Sequence[Answer], used: dict[str, Any], width: int = 100) -> str:
    """The answers as text: a line on what ran (`header`), then per query its ranked hits
    (rank, score, id, the start of the text), each line at most `width` characters (an id
    longer than that aside)."""
    lines = textwrap.wrap(header(used), width, break_on_hyphens=False)
    for answer in answers:
        lines.append("")
        lines.append(snippet(f"{answer.query_id}: {answer.query}", width))
        for hit in answer.hits:
            head = f"{hit.rank:>4}  {hit.score:.4f}  {hit.id}  "
            lines.append(head + snippet(hit.text, width - len(head)))
    return "\n".join(lines) + "\n"
