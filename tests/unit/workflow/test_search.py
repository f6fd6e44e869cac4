"""Ad hoc search of a finished run (make search): the queries embedded as the run
embedded its documents, the hits exact and read back with their texts, and every way a
run's folder can be unfit named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardflow import cli
from shardflow.core.hashing import model_sha256
from shardflow.corpus.chunks import ChunkRecord, chunk_path, dump_record
from shardflow.corpus.readers import ReaderOptions
from shardflow.embed.engine import load_encoder
from shardflow.embed.params import EmbedParams
from shardflow.workflow import search as nearest
from tests.support.tiny_models import build_bert_cls, build_bert_mean, sample_texts

CHUNKS = (5, 7, 4)  # records per chunk: hits land in every chunk, past the first


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    # The model hash is kept under .snakemake/ of the working directory: the test's own.
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    # Prompts in its config (query, passage), as the search's default prompt reads them.
    return build_bert_mean(tmp_path_factory.mktemp("model"))


def make_run(folder: Path, model: Path, texts: list[str], retrieval: dict | None = None, **embedding) -> Path:
    """A data set folder as a finished run leaves it: chunks and their manifest, merged
    embeddings and ids, verification and provenance (config and model hash)."""
    (folder / "chunks").mkdir(parents=True)
    ids = [f"doc-{i}" for i in range(len(texts))]
    start = 0
    for c, n in enumerate(CHUNKS):
        with open(chunk_path(folder / "chunks", c), "w", encoding="utf-8") as fh:
            for i in range(start, start + n):
                fh.write(dump_record(ChunkRecord(ids[i], texts[i])))
        start += n
    (folder / "chunks" / "manifest.json").write_text(json.dumps({"chunks": [{"chunk": c, "items": n} for c, n in enumerate(CHUNKS)]}))
    settings = {"model": str(model), "dtype": "auto", "max_length": None, "prompt": None, "prompt_name": None,
                "compile": False, "keep_chunk_vectors": True, "compile_cache": None, **embedding}
    params = EmbedParams(**{k: v for k, v in settings.items() if k not in ("keep_chunk_vectors", "compile_cache")},
                         device="cpu")
    np.save(folder / "embeddings.npy", load_encoder(params).encode(texts))
    pq.write_table(pa.table({"id": pa.array(ids, pa.string())}), folder / "ids.parquet")
    (folder / "verification.json").write_text(json.dumps({"ok": True}))
    record = {"config": {"embedding": settings, **({"retrieval": retrieval} if retrieval else {})},
              "models": {"embedding": model_sha256(str(model))}}
    (folder / "provenance.json").write_text(json.dumps(record))
    return folder


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return sample_texts(sum(CHUNKS))


@pytest.fixture(scope="module")
def run(tmp_path_factory, model, texts) -> Path:
    return make_run(tmp_path_factory.mktemp("results") / "demo", model, texts)


def test_a_documents_own_text_finds_it_first_in_every_chunk(run, texts):
    picked = [1, 6, 15]  # chunk 0, 1 and 2
    queries = [(f"q{i}", texts[i]) for i in picked]
    answers, used = nearest.search(run, queries, 3, prompt="", device="cpu")
    for i, answer in zip(picked, answers, strict=True):
        top = answer.hits[0]
        assert (top.id, top.text) == (f"doc-{i}", texts[i])
        assert top.score == pytest.approx(1.0, abs=1e-5)  # the same text, the same vector (cosine)
        assert [h.rank for h in answer.hits] == [1, 2, 3]
        assert all(a.score >= b.score for a, b in zip(answer.hits, answer.hits[1:], strict=False))
    assert used["documents"] == len(texts) and used["similarity"] == "cosine"


def test_default_prompt_is_the_models_query_prompt_and_ranks_as_brute_force(run, model, texts):
    query = "a question about parsing files"
    answers, used = nearest.search(run, [("q", query)], len(texts), device="cpu")
    assert used["prompt"] == "prompt 'query'" and used["prompt_source"] == "the model's query prompt"
    vector = load_encoder(EmbedParams(model=str(model), device="cpu", prompt_name="query")).encode([query])[0]
    docs = np.load(run / "embeddings.npy")
    scores = docs @ vector / (np.linalg.norm(docs, axis=1) * np.linalg.norm(vector))
    want = [f"doc-{i}" for i in np.argsort(-scores, kind="stable")]
    assert [h.id for h in answers[0].hits] == want
    np.testing.assert_allclose([h.score for h in answers[0].hits], np.sort(scores)[::-1], atol=1e-5)
    # each hit carries its own document's text
    assert all(h.text == texts[int(h.id.removeprefix("doc-"))] for h in answers[0].hits)


def test_queries_get_the_runs_settings_not_compile(run):
    record = json.loads((run / "provenance.json").read_text())
    record["config"]["embedding"].update(max_length=8, compile=True, dtype="float32")
    params = nearest.query_params(nearest.EmbeddedRun(run, record["config"]["embedding"], None, list(CHUNKS)), "m",
                                  prompt=None, prompt_name="query", device="cpu")
    assert (params.model, params.max_length, params.dtype, params.compile) == ("m", 8, "float32", False)


def _run(embedding=None, retrieval=None) -> nearest.EmbeddedRun:
    return nearest.EmbeddedRun(Path("results/demo"), {"model": "m", **(embedding or {})}, None, [1], retrieval)


@pytest.mark.parametrize("run_, prompts, given, want", [
    # given: taken as it is
    (_run(), {"query": "q: "}, ("x: ", None), ("x: ", None, "given")),
    # an evaluation's corpus: the prompt its judged queries had, the model's query prompt aside
    (_run(retrieval={"query_prompt": "query: ", "query_prompt_name": None}), {"query": "q: "}, (None, None),
     ("query: ", None, "the evaluation's retrieval.query_prompt / query_prompt_name")),
    (_run(retrieval={"query_prompt": None, "query_prompt_name": None}), {"query": "q: "}, (None, None),
     (None, None, "the evaluation's retrieval.query_prompt / query_prompt_name")),
    # an instruction model: its query prompt
    (_run(), {"query": "q: ", "document": ""}, (None, None), (None, "query", "the model's query prompt")),
    # a symmetric one: the documents' settings, also where sentence-transformers 6 saved
    # empty query and document prompts
    (_run({"prompt": "clustering: "}), {}, (None, None), ("clustering: ", None, "the documents' settings")),
    (_run({"prompt_name": "document"}), {"query": "", "document": ""}, (None, None),
     (None, "document", "the documents' settings")),
])
def test_query_prompt(run_, prompts, given, want):
    chosen = nearest.query_prompt(run_, prompts, *given)
    assert (chosen.prompt, chosen.prompt_name, chosen.source) == want


def test_a_retrieval_corpus_is_searched_with_the_evaluations_query_prompt(tmp_path, model, texts):
    folder = make_run(tmp_path / "beir", model, texts,
                      retrieval={"path": "/data/beir", "name": "beir", "query_prompt": "query: ", "query_prompt_name": None})
    _, used = nearest.search(folder, [("q", texts[0])], 1, device="cpu")
    assert used["prompt"] == "prompt 'query: '"
    # the same record read for another data set's folder: not its evaluation
    assert nearest.embedded_run(make_run(tmp_path / "demo", model, texts, retrieval={
        "path": "/data/beir", "name": "beir", "query_prompt": "query: "})).retrieval is None


def test_the_documents_prompt_is_used_for_queries_with_a_warning(tmp_path, model, texts, caplog):
    folder = make_run(tmp_path / "demo", model, texts, prompt="passage: ")
    # the model names a query prompt: taken for queries, documents' shown beside it
    _, used = nearest.search(folder, [("q", texts[0])], 1, device="cpu")
    assert (used["prompt"], used["documents_prompt"]) == ("prompt 'query'", "prompt 'passage: '")
    assert "and so are the queries" not in caplog.text
    # a model without a query prompt: the documents' prompt, and a warning that says so
    symmetric = build_bert_cls(tmp_path / "cls")
    folder = make_run(tmp_path / "cls-run", symmetric, texts, prompt="passage: ")
    answers, used = nearest.search(folder, [("q", texts[4])], 1, device="cpu")
    assert answers[0].hits[0].id == "doc-4"  # prompted alike, the same text finds itself
    assert used["prompt"] == used["documents_prompt"] == "prompt 'passage: '"
    assert "documents were embedded with prompt 'passage: ', and so are the queries" in caplog.text


def test_the_model_given_where_it_lies_now_is_checked_and_hashed_once(tmp_path, model, texts, monkeypatch):
    import shutil

    from shardflow.core import madewith

    folder = make_run(tmp_path / "demo", model, texts)
    moved = tmp_path / "moved-model"
    shutil.copytree(model, moved)
    calls = []
    real = madewith.model_sha256
    monkeypatch.setattr(madewith, "model_sha256", lambda path: calls.append(path) or real(path))
    for _ in range(2):
        answers, used = nearest.search(folder, [("q", texts[2])], 1, prompt="", model=str(moved), device="cpu")
        assert answers[0].hits[0].id == "doc-2" and used["model"] == str(moved)
    assert calls == [str(moved)]  # the second search read no weights
    other = build_bert_mean(tmp_path / "other-model", seed=9)
    with pytest.raises(ValueError, match=r"other-model.* hashes .*but the run embedded its documents with"):
        nearest.search(folder, [("q", "x")], 1, model=str(other), device="cpu")


def test_a_moved_model_is_asked_for_with_model_not_a_config_key(tmp_path, model, texts):
    import shutil

    # A search reads the run's record, not the config: setting embedding.model (the
    # advice a job's missing model gets) would change nothing here.
    copy = tmp_path / "copy-model"
    shutil.copytree(model, copy)
    folder = make_run(tmp_path / "demo", copy, texts)
    copy.rename(tmp_path / "moved-model")
    with pytest.raises(FileNotFoundError) as run_model:
        nearest.search(folder, [("q", "x")], 1, device="cpu")
    assert "copy-model" in str(run_model.value) and "provenance.json" in str(run_model.value)
    assert "--model" in str(run_model.value) and "MODEL=" in str(run_model.value)
    assert "Set the config key" not in str(run_model.value)
    with pytest.raises(FileNotFoundError) as given:
        nearest.search(folder, [("q", "x")], 1, model=str(tmp_path / "nowhere"), device="cpu")
    assert f"--model {str(tmp_path / 'nowhere')!r}: no such folder" in str(given.value)
    assert "Set the config key" not in str(given.value)


def test_a_model_that_changed_since_the_run_is_refused(tmp_path, model, texts):
    folder = make_run(tmp_path / "demo", model, texts)
    record = json.loads((folder / "provenance.json").read_text())
    record["models"]["embedding"]["sha256"] = "0" * 64
    (folder / "provenance.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"hashes .*but the run embedded its documents with 000000000000.*models\.embedding"):
        nearest.search(folder, [("q", "x")], 1, device="cpu")


def test_a_record_without_a_model_hash_searches_with_a_warning(tmp_path, model, texts, caplog):
    folder = make_run(tmp_path / "demo", model, texts)
    record = json.loads((folder / "provenance.json").read_text())
    record["models"] = {}
    (folder / "provenance.json").write_text(json.dumps(record))
    answers, _ = nearest.search(folder, [("q", texts[0])], 1, prompt="", device="cpu")
    assert answers[0].hits[0].id == "doc-0"
    assert "holds no hash of the embedding model" in caplog.text


@pytest.mark.parametrize("missing, message", [
    ("provenance.json", r"provenance\.json: no such file: .*run the workflow to the end"),
    ("verification.json", r"verification\.json: no such file"),
    ("chunks/manifest.json", r"manifest\.json: no such file"),
    ("embeddings.npy", r"embeddings\.npy: no such file"),
])
def test_an_unfinished_run_is_named(tmp_path, model, texts, missing, message):
    folder = make_run(tmp_path / "demo", model, texts)
    (folder / missing).unlink()
    with pytest.raises(OSError, match=message):
        nearest.embedded_run(folder)


def test_a_record_cut_short_is_named_by_file_and_line(tmp_path, model, texts):
    folder = make_run(tmp_path / "demo", model, texts)
    record = (folder / "provenance.json").read_text()
    (folder / "provenance.json").write_text(record[: len(record) // 2])
    with pytest.raises(ValueError, match=r"provenance\.json:1: malformed JSON \(Unterminated string"):
        nearest.embedded_run(folder)


def test_failed_verification_is_refused(tmp_path, model, texts):
    folder = make_run(tmp_path / "demo", model, texts)
    (folder / "verification.json").write_text(json.dumps({"ok": False}))
    with pytest.raises(ValueError, match="failed verification"):
        nearest.embedded_run(folder)


def test_a_chunk_rewritten_after_the_merge_is_named_by_file_and_line(tmp_path, model, texts):
    folder = make_run(tmp_path / "demo", model, texts)
    path = chunk_path(folder / "chunks", 1)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = dump_record(ChunkRecord("someone-else", texts[7]))
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=r"chunk_1\.jsonl:3: id 'someone-else', but embedding row 7 is 'doc-7'"):
        nearest.search(folder, [("q", texts[7])], 1, prompt="", device="cpu")


def test_read_queries_from_texts_and_files(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text('{"qid": "a", "question": "first"}\n{"qid": "b", "question": "second"}\n')
    opts = ReaderOptions(id_field="qid", text_field="question")
    assert nearest.read_queries(["typed"], [str(path)], opts) == [("query_1", "typed"), ("a", "first"), ("b", "second")]


@pytest.mark.parametrize("lines, message", [
    ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', r"questions\.jsonl:2: query id 'a' again \(first at .*questions\.jsonl:1\)"),
    ('{"id": "a", "text": "x"}\n{"id": "b"}\n', r"questions\.jsonl:2"),
    ("", r"no queries: .*questions\.jsonl holds none"),
])
def test_bad_query_files_are_named(tmp_path, lines, message):
    path = tmp_path / "questions.jsonl"
    path.write_text(lines)
    with pytest.raises(ValueError, match=message):
        nearest.read_queries([], [str(path)], ReaderOptions())


def test_an_empty_typed_query_is_refused():
    with pytest.raises(ValueError, match="--query 2 is empty"):
        nearest.read_queries(["fine", "  "], [], ReaderOptions())


def test_table_fits_its_width():
    hits = [nearest.Hit(1, "doc-1", 0.5, "word " * 100), nearest.Hit(2, "doc-2", 0.25, "short\ntext")]
    used = {"data_set": "results/demo", "documents": 2, "model": "m", "similarity": "cosine",
            "prompt": "no prompt", "documents_prompt": "no prompt"}
    out = nearest.table([nearest.Answer("q", "a query", hits)], used, width=60)
    assert all(len(line) <= 60 for line in out.splitlines())
    assert "   2  0.2500  doc-2  short text" in out and out.count("…") == 1
    assert "queries with no\nprompt" in out and "documents with" not in out  # the head wrapped at 60
    used.update(prompt="prompt 'query'", documents_prompt="prompt 'passage: '")
    head = nearest.table([], used, width=200).splitlines()[0]
    assert head.endswith("queries with prompt 'query' (documents with prompt 'passage: ')")


def test_cli_json_lines_and_a_bad_run_exits_2(run, texts, capsys):
    code = cli.main(["search", "--results", str(run.parent), "--dataset", "demo", "--query", texts[3],
                     "--prompt", "", "--top-k", "2", "--device", "cpu", "--json"])
    assert code == 0
    (line,) = capsys.readouterr().out.splitlines()
    answer = json.loads(line)
    assert answer["query_id"] == "query_1" and answer["hits"][0]["id"] == "doc-3" and len(answer["hits"]) == 2
    assert cli.main(["search", "--results", str(run.parent), "--dataset", "nothing", "--query", "x"]) == 2
    assert "nothing/provenance.json: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("mode", [["--json"], ["--out", "hits.jsonl"]])
def test_cli_json_lines_say_on_stderr_what_the_search_ran_with(run, texts, capsys, mode):
    # The JSON lines hold hits only: which prompt the queries had is said beside them,
    # as the table's first line says it.
    code = cli.main(["search", "--results", str(run.parent), "--dataset", "demo", "--query", texts[3],
                     "--top-k", "1", "--device", "cpu", *mode])
    assert code == 0
    err = capsys.readouterr().err
    assert f"{len(texts)} documents" in err and "queries with prompt 'query'" in err


def test_cuda_asked_for_where_there_is_none_is_a_clear_error(run, monkeypatch):
    """The device goes through core.devices.resolve_device, as every engine's: CUDA on a
    host without it is refused before the model loads, naming the option."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"--device cuda: device 'cuda' requested but CUDA is not available"):
        nearest.search(run, [("q", "x")], 1, device="cuda")
    _, used = nearest.search(run, [("q", "x")], 1, prompt="")  # auto: the CPU here
    assert used["device"] == "cpu"


# Task search's stored hits (make hits): read back with their texts, nothing embedded.

QUERY_TEXTS = {"q-a": 7, "q-b": 12, "q-c": 15, "q-d": 2, "q-e": 9, "q-f": 6, "q-g": 10}  # id: the document it repeats


def make_search(folder: Path, model: Path, texts: list[str], k: int = 4) -> Path:
    """What task search leaves under a finished run's search/: the queries as read, their
    embeddings and the hits, written by the task's own code (shardflow.retrieval.batch)."""
    from shardflow.core.columns import write_ids_parquet
    from shardflow.retrieval.batch import SearchParams, prepare_queries, search_queries

    out = folder / "search"
    out.mkdir()
    given = folder.parent / f"{folder.name}-questions.jsonl"
    given.write_text("".join(json.dumps({"id": q, "text": texts[i]}) + "\n" for q, i in QUERY_TEXTS.items()))
    prepare_queries(str(given), ReaderOptions(), str(out / "queries.jsonl"))
    params = EmbedParams(model=str(model), device="cpu", prompt="")  # as the documents: each finds its own first
    np.save(out / "queries.npy", load_encoder(params).encode([texts[i] for i in QUERY_TEXTS.values()]))
    write_ids_parquet(out / "queries.ids.parquet", list(QUERY_TEXTS))
    search_queries(str(folder / "embeddings.npy"), str(folder / "ids.parquet"), str(out / "queries.npy"),
                   str(out / "queries.ids.parquet"), SearchParams(k=k, similarity="cosine", device="cpu"),
                   {"hits": str(out / "hits.parquet"), "summary": str(out / "summary.json"),
                    "figure": str(out / "best_scores.png")})
    return out


@pytest.fixture(scope="module")
def searched(tmp_path_factory, model, texts) -> Path:
    folder = make_run(tmp_path_factory.mktemp("searched") / "demo", model, texts)
    make_search(folder, model, texts)
    return folder


@pytest.fixture()
def searched_copy(searched, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(searched, tmp_path / "results" / "demo"))


def chunk_lines(folder: Path) -> list[tuple[str, str]]:
    """Every record of the run's chunks as (id, text), in merge order: row r is line r."""
    lines = []
    for c in range(len(CHUNKS)):
        for line in chunk_path(folder / "chunks", c).read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            lines.append((obj["id"], obj["text"]))
    return lines


def test_stored_hits_carry_the_texts_of_their_rows_chunk_lines_in_rank_order(searched, texts):
    answers, used = nearest.stored_hits(searched)
    table = pq.read_table(searched / "search" / "hits.parquet").to_pylist()
    lines = chunk_lines(searched)
    assert [a.query_id for a in answers] == list(QUERY_TEXTS)[:5]  # the first five of the file
    for answer in answers:
        assert answer.query == texts[QUERY_TEXTS[answer.query_id]]
        rows = sorted((r for r in table if r["query_id"] == answer.query_id), key=lambda r: r["rank"])
        assert [(h.rank, h.id, h.score) for h in answer.hits] == [
            (r["rank"], r["id"], pytest.approx(r["score"])) for r in rows]
        assert [(h.id, h.text) for h in answer.hits] == [lines[r["row"]] for r in rows]
        assert answer.hits[0].id == f"doc-{QUERY_TEXTS[answer.query_id]}"  # its own text first
    assert (used["queries"], used["hits"], used["k"], used["documents"]) == (7, 28, 4, len(texts))


def test_stored_hits_of_given_queries_in_the_order_given(searched):
    answers, _ = nearest.stored_hits(searched, query_ids=["q-g", "q-b", "q-g"])
    assert [a.query_id for a in answers] == ["q-g", "q-b"]  # one asked twice: shown once
    assert [a.hits[0].id for a in answers] == ["doc-10", "doc-12"]


def test_stored_hits_first_n_and_k(searched):
    answers, used = nearest.stored_hits(searched, first=2, top_k=2)
    assert [a.query_id for a in answers] == ["q-a", "q-b"]
    assert all([h.rank for h in a.hits] == [1, 2] for a in answers)
    assert len(nearest.stored_hits(searched, first=100)[0]) == 7  # more than the file holds: all of it
    with pytest.raises(ValueError, match="give query ids or a number of first queries, not both"):
        nearest.stored_hits(searched, query_ids=["q-a"], first=1)


@pytest.mark.parametrize("batch", [1, 3, 4, 5])
def test_stored_hits_read_a_batch_at_a_time_are_the_same(searched, monkeypatch, batch):
    # A query's hits cut across batches, and the reading stops once the queries asked for
    # are complete: the same answers as one batch gives.
    want = nearest.stored_hits(searched, query_ids=["q-c", "q-a", "q-e"])
    monkeypatch.setattr(nearest, "HITS_BATCH", batch)
    assert nearest.stored_hits(searched, query_ids=["q-c", "q-a", "q-e"]) == want


def test_stored_hits_header_says_where_they_came_from(searched):
    answers, used = nearest.stored_hits(searched, query_ids=["q-a"], top_k=1)
    out = nearest.table(answers, used, width=400)
    head = out.splitlines()[0]
    assert str(searched / "search" / "hits.parquet") in head
    assert "7 queries, 28 hits, k 4" in head and f"{sum(CHUNKS)} documents" in head
    assert "1 query shown, 1 hit each" in head
    assert "   1  1.0000  doc-7  " in out


def test_stored_hits_without_task_search_say_how_to_run_it(searched_copy):
    (searched_copy / "search" / "hits.parquet").unlink()
    with pytest.raises(FileNotFoundError) as missing:
        nearest.stored_hits(searched_copy)
    message = str(missing.value)
    assert f"{searched_copy / 'search' / 'hits.parquet'}: no such file" in message
    assert "tasks: [embedding, search]" in message and "search.queries" in message


def test_an_unknown_query_id_is_named_with_ids_that_are(searched):
    with pytest.raises(ValueError) as unknown:
        nearest.stored_hits(searched, query_ids=["q-a", "nope"])
    message = str(unknown.value)
    assert "hits.parquet" in message and "no query 'nope'" in message and "'q-a', 'q-b', 'q-c'" in message


def test_hits_of_another_run_are_named(searched_copy):
    path = searched_copy / "search" / "hits.parquet"
    table = pq.read_table(path)
    rows = table.column("row").to_numpy().copy()
    rows[0] = (rows[0] + 1) % sum(CHUNKS)  # q-a's best hit now names another row than its id's
    pq.write_table(table.set_column(4, "row", pa.array(rows)), path)
    with pytest.raises(ValueError, match=r"hits\.parquet: query 'q-a' rank 1 is 'doc-7' at row 8, but row 8 of "
                                         r".*ids\.parquet is 'doc-8': the run changed since the search"):
        nearest.stored_hits(searched_copy, query_ids=["q-a"])


def test_cli_hits_prints_the_table_or_json_lines(searched, texts, capsys):
    results = str(searched.parent)
    assert cli.main(["hits", "--results", results, "--dataset", "demo", "--query", "q-c,q-a", "--query", "q-f",
                     "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert " ".join(out.split()).startswith(f"{searched}: task search's hits")
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("q-")] == ["q-c", "q-a", "q-f"]
    assert cli.main(["hits", "--results", results, "--dataset", "demo", "--first", "3", "--json"]) == 0
    captured = capsys.readouterr()
    got = [json.loads(line) for line in captured.out.splitlines()]
    want, _ = nearest.stored_hits(searched, first=3)
    assert got == [a.as_json() for a in want] and [a["query_id"] for a in got] == ["q-a", "q-b", "q-c"]
    assert "task search's hits" in captured.err  # the header, beside the JSON lines
    assert cli.main(["hits", "--results", results, "--dataset", "demo", "--query", "nope"]) == 2
    assert "no query 'nope'" in capsys.readouterr().err
