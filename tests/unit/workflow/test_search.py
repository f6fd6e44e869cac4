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
