"""The retrieval prepare steps, one per kind of file, and the judged-query key that
decides when the prepared queries are out of date."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from shardflow.core.columns import write_ids_parquet
from shardflow.corpus.chunks import read_chunk
from shardflow.retrieval import data as rdata
from shardflow.retrieval.data import RetrievalDataError
from shardflow.retrieval.pipeline import (
    EvaluateParams,
    RetrievalSpec,
    prepare_corpus,
    prepare_qrels,
    prepare_queries,
    search_and_score,
)


def _beir(folder: Path, qrels: str) -> RetrievalSpec:
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": "d0", "title": "T", "text": "zero"}, {"_id": "d1", "title": "", "text": " one "}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": "q1", "text": "first "}, {"_id": "q0", "text": "second"}, {"_id": "q9", "text": "unjudged"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return RetrievalSpec(path=str(folder))


def test_prepare_steps_write_corpus_judged_queries_and_qrels(tmp_path):
    spec = _beir(tmp_path / "beir", "q0\td0\t1\nq1\td1\t2\nq1\td0\t0\n")
    corpus, queries, qrels = spec.source_files()
    assert prepare_corpus("beir", corpus, str(tmp_path / "corpus.jsonl")) == 2
    assert read_chunk(tmp_path / "corpus.jsonl") == (["d0", "d1"], ["T zero", "one"])
    stats = prepare_queries("beir", queries, qrels, str(tmp_path / "queries.jsonl"))
    assert stats == {"queries": 2, "qrels_queries": 2}
    assert read_chunk(tmp_path / "queries.jsonl") == (["q1", "q0"], ["first ", "second"])
    assert prepare_qrels(qrels, str(tmp_path / "qrels.json")) == 2
    assert json.loads((tmp_path / "qrels.json").read_text()) == {"q0": {"d0": 1}, "q1": {"d1": 2, "d0": 0}}


def test_a_judged_query_without_text_is_an_error(tmp_path):
    spec = _beir(tmp_path / "beir", "q0\td0\t1\nq7\td0\t1\n")
    _, queries, qrels = spec.source_files()
    with pytest.raises(ValueError, match=r"1 qrels queries have no text in .*queries.jsonl, e.g. \['q7'\]"):
        prepare_queries("beir", queries, qrels, str(tmp_path / "queries.jsonl"))


def test_a_judged_query_with_empty_text_is_embedded_with_a_warning(tmp_path, caplog):
    """As MTEB, the query is kept as given; the log names it."""
    spec = _beir(tmp_path / "beir", "q0\td0\t1\nq1\td1\t1\n")
    _, queries, qrels = spec.source_files()
    Path(queries).write_text(json.dumps({"_id": "q1", "text": " "}) + "\n" + json.dumps({"_id": "q0", "text": "x"}) + "\n")
    with caplog.at_level("WARNING"):
        assert prepare_queries("beir", queries, qrels, str(tmp_path / "queries.jsonl"))["queries"] == 2
    assert "1 judged queries have empty text (embedded as they are, as MTEB does): 'q1'" in caplog.text
    assert read_chunk(tmp_path / "queries.jsonl") == (["q1", "q0"], [" ", "x"])


def test_judged_queries_key_follows_the_set_of_judged_ids_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the parse cache lives under the working directory
    spec = _beir(tmp_path / "beir", "q0\td0\t1\nq1\td1\t1\n")
    qrels = Path(spec.source_files()[2])
    key = spec.judged_queries()
    assert key.startswith("2 judged queries, ids sha256 ")
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td0\t2\nq1\td1\t0\nq0\td1\t1\n")  # regraded, reordered
    assert spec.judged_queries() == key
    qrels.write_text(qrels.read_text() + "q9\td0\t1\n")  # a newly judged query
    assert spec.judged_queries().startswith("3 judged queries") and spec.judged_queries() != key
    # Unreadable qrels: the file's checksum, so the jobs run and report the line.
    qrels.write_text("query-id\tcorpus-id\tscore\nq0\td0\tmany\n")
    assert spec.judged_queries().startswith("unreadable qrels, file sha256 ")
    with pytest.raises(RetrievalDataError, match=r"test.tsv:2: relevance 'many' is not an integer"):
        prepare_qrels(str(qrels), str(tmp_path / "qrels.json"))


def test_judged_queries_are_read_once_per_version_of_the_qrels(tmp_path, monkeypatch):
    """Every parse (every cluster job's too) asks for the key: the qrels are read again only
    when the file changes."""
    monkeypatch.chdir(tmp_path)
    spec = _beir(tmp_path / "beir", "q0\td0\t1\nq1\td1\t1\n")
    key = spec.judged_queries()
    real = rdata.load_qrels
    monkeypatch.setattr(rdata, "load_qrels", lambda *_: pytest.fail("qrels read again for an unchanged file"))
    assert spec.judged_queries() == key
    qrels = Path(spec.source_files()[2])
    qrels.write_text(qrels.read_text() + "q2\td0\t1\n")
    monkeypatch.setattr(rdata, "load_qrels", real)
    assert spec.judged_queries().startswith("3 judged queries")


def _search(tmp_path, docs, queries, similarity, qrels=None, top_k=2, relevance_level=1, device="cpu",
            backend="torch"):
    """search_and_score over `docs` and `queries` (rows d0.., q0..); q0 judges d0 relevant."""
    np.save(tmp_path / "d.npy", np.asarray(docs, dtype=np.float32))
    np.save(tmp_path / "q.npy", np.asarray(queries, dtype=np.float32))
    write_ids_parquet(tmp_path / "d.parquet", [f"d{i}" for i in range(len(docs))])
    write_ids_parquet(tmp_path / "q.parquet", [f"q{i}" for i in range(len(queries))])
    (tmp_path / "qrels.json").write_text(json.dumps(qrels or {"q0": {"d0": 1}}))
    out = [str(tmp_path / n) for n in ("m.json", "p.parquet", "r.parquet")]
    params = EvaluateParams(top_k=top_k, device=device, similarity=similarity, relevance_level=relevance_level,
                            backend=backend)
    search_and_score(*(str(tmp_path / n) for n in ("d.npy", "d.parquet", "q.npy", "q.parquet", "qrels.json")),
                     params, *out)
    return json.loads(Path(out[0]).read_text()), pq.read_table(out[2]).to_pylist()


def test_search_scores_with_the_models_similarity(tmp_path):
    """Embeddings of a model without a Normalize module keep their norms: cosine (the
    default, as in MTEB) normalises as it searches, dot does not; metrics.json says which."""
    docs, queries = [[1.0, 0.0], [3.0, 3.0]], [[1.0, 0.2]]  # d1 is longer, d0 points the query's way
    metrics, run = _search(tmp_path, docs, queries, "cosine")
    assert [r["doc_id"] for r in run] == ["d0", "d1"] and metrics["ndcg_at_10"] == 1.0
    assert metrics["similarity"] == "cosine" and run[0]["score"] == pytest.approx(1 / np.hypot(1.0, 0.2))
    assert metrics["device"] == "cpu"  # where it scored: a sweep's cost counts CUDA jobs' GPU-hours
    metrics, run = _search(tmp_path, docs, queries, "dot")
    assert [r["doc_id"] for r in run] == ["d1", "d0"] and metrics["similarity"] == "dot"
    assert run[0]["score"] == pytest.approx(3.6)
    with pytest.raises(ValueError, match="similarity_fn_name is 'euclidean': retrieval evaluation searches by cosine or dot"):
        EvaluateParams(similarity="euclidean")


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # one case a field; each was kept: '10' stopped the job in min(), 'false' (a true string) dropped ids
        ({"top_k": "10"}, "top_k '10': expected an integer"),
        ({"block_size": None}, "block_size None: expected an integer"),
        ({"backend": None}, "backend None: expected a string"),
        ({"drop_identical_ids": "false"}, "drop_identical_ids 'false': expected a bool"),
        ({"relevance_level": True}, "relevance_level True: expected an integer"),
        ({"device": 0}, "device 0: expected a string or None"),
    ],
)
def test_evaluate_params_a_wrong_python_type_is_one_error_naming_the_field(kw, message):
    with pytest.raises(TypeError) as info:
        EvaluateParams(**kw)
    assert str(info.value) == message


@pytest.mark.parametrize("backend", ["Faiss", "numpy", ""])
def test_evaluate_params_a_backend_it_cannot_search_with_is_refused_listing_the_choices(backend):
    """Another word was kept until exact_search refused it, after the ids, queries and
    judgements were read."""
    with pytest.raises(ValueError) as info:
        EvaluateParams(backend=backend)
    assert str(info.value) == f"backend {backend!r}: expected one of torch, faiss"
    assert [EvaluateParams(backend=b).backend for b in ("torch", "faiss")] == ["torch", "faiss"]


@pytest.mark.parametrize("device", ["cuda0", "gpu", "CUDA", "cuda:", "cuda:x", ""])
def test_evaluate_params_a_device_torch_cannot_name_is_refused_naming_the_field(device):
    """Any string was kept until torch.device refused it in the search, after the ids,
    queries and judgements were read; as TrainParams and EmbedParams say it."""
    with pytest.raises(ValueError) as info:
        EvaluateParams(device=device)
    assert str(info.value) == f"device {device!r}: expected auto, cpu, cuda or cuda:N"


def test_evaluate_params_devices_it_takes_and_auto_searches_where_none_does(tmp_path, monkeypatch):
    """None (the script's, for a job that got a GPU) and auto: CUDA when available, else
    the CPU; metrics.json records where it scored."""
    import shardflow.retrieval.search as search

    assert [EvaluateParams(device=d).device for d in (None, "auto", "cpu", "cuda", "cuda:1")] == [
        None, "auto", "cpu", "cuda", "cuda:1"]
    monkeypatch.setattr(search, "default_device", lambda: "cpu")
    for device in (None, "auto"):
        metrics, _ = _search(tmp_path, [[1.0, 0.0], [3.0, 3.0]], [[1.0, 0.2]], "cosine", device=device)
        assert metrics["device"] == "cpu"


def test_evaluate_params_whole_floats_are_ints(tmp_path):
    """retrieval.top_k 100.0 passes the schema's "integer": the search stopped in torch.full;
    relevance_level 2.0 scored as 2 and went into metrics.json as 2.0."""
    p = EvaluateParams(top_k=100.0, block_size=64.0, relevance_level=2.0)
    assert [(type(v), v) for v in (p.top_k, p.block_size, p.relevance_level)] == [(int, 100), (int, 64), (int, 2)]
    metrics, run = _search(tmp_path, [[1.0, 0.0], [3.0, 3.0]], [[1.0, 0.2]], "cosine", top_k=2.0, relevance_level=2.0)
    assert [r["doc_id"] for r in run] == ["d0", "d1"] and type(metrics["relevance_level"]) is int


def test_a_relevance_level_scores_the_binary_metrics_and_is_recorded_away_from_1(tmp_path):
    """retrieval.relevance_level reaches the scoring; metrics.json names it where it is
    not 1 (a record at the default keeps the bytes it had before the key)."""
    docs, queries = [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.1]]
    qrels = {"q0": {"d0": 1, "d1": 2}}
    metrics, _ = _search(tmp_path, docs, queries, "cosine", qrels)
    assert "relevance_level" not in metrics and metrics["all"]["mrr_at_10"] == 1.0
    metrics, _ = _search(tmp_path, docs, queries, "cosine", qrels, relevance_level=2)
    assert metrics["relevance_level"] == 2 and metrics["all"]["mrr_at_10"] == 0.5  # d0 (1) is no longer relevant
    assert metrics["all"]["recall_at_1"] == 0.0 and metrics["all"]["recall_at_3"] == 1.0


def test_a_relevance_level_above_every_grade_is_warned_of_naming_the_highest(tmp_path, caplog):
    """No judgement reaches the level (`relevance_level: 2` over binary BEIR qrels): MAP,
    recall, precision and MRR are 0 for every query, as trec_eval -l 2 scores them; the
    log says why, where the zeros alone read as a model that found nothing."""
    docs, queries = [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.1]]
    with caplog.at_level("WARNING"):
        metrics, _ = _search(tmp_path, docs, queries, "cosine", {"q0": {"d0": 1, "d1": 0}}, relevance_level=2)
    assert metrics["all"]["recall_at_10"] == 0.0 and metrics["ndcg_at_10"] == 1.0  # the numbers are as they were
    assert "retrieval.relevance_level 2 is above every grade in the qrels (the highest: 1)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        _search(tmp_path, docs, queries, "cosine", {"q0": {"d0": 2}, "q1": {"d1": 1}}, relevance_level=2)
    # one judgement at the level is enough (the log names q1, judged and not embedded: its path holds the test name)
    assert "is above every grade" not in caplog.text


def test_a_folder_in_s3_is_listed_once_its_files_named_by_url_and_its_qrels_by_version():
    """retrieval.path: s3://...: the files are picked from the folder's listing (plain
    before .gz, as locally) and go to the rules as URLs; the judged-queries key is the
    qrels object's ETag (not read at parse time), so it changes with the object."""
    listing = {"s3://b/beir/corpus.jsonl.gz": "e1", "s3://b/beir/queries.jsonl": "e2",
               "s3://b/beir/qrels/test.tsv": "e3", "s3://b/beir/qrels/dev.tsv": "e4"}
    asked = []

    def list_folder(url):
        asked.append(url)
        return dict(listing)

    spec = RetrievalSpec(path="s3://b/beir/", list_folder=list_folder)
    assert spec.source_files() == ["s3://b/beir/corpus.jsonl.gz", "s3://b/beir/queries.jsonl",
                                   "s3://b/beir/qrels/test.tsv"]
    assert spec.judged_queries() == "qrels object s3://b/beir/qrels/test.tsv, etag e3"
    listing["s3://b/beir/qrels/test.tsv"] = "e5"
    assert spec.judged_queries().endswith("etag e5") and asked[0] == "s3://b/beir/"
    del listing["s3://b/beir/queries.jsonl"]
    with pytest.raises(FileNotFoundError, match=r"retrieval.path 's3://b/beir/': no queries.jsonl or queries.jsonl.gz in it"):
        spec.source_files()
    with pytest.raises(FileNotFoundError, match=r"no object below it"):
        RetrievalSpec(path="s3://b/none", list_folder=lambda url: {}).source_files()
    with pytest.raises(FileNotFoundError, match=r"retrieval.path '.*' is not a folder"):
        RetrievalSpec(path="/nonexistent/beir").source_files()


def test_judged_documents_the_corpus_lacks_are_counted_and_named(tmp_path, caplog):
    """They score as misses, as in MTEB; metrics.json counts them and the log names some,
    so a mistyped qrels id (or 1.0 written for 1) no longer passes as a poor model."""
    qrels = {"q0": {"d0": 1, "1.0": 1, "gone": 0}}
    with caplog.at_level("WARNING"):
        metrics, _ = _search(tmp_path, [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0]], "cosine", qrels)
    assert metrics["judged_documents_not_in_corpus"] == 2
    assert "2 judged documents are not in the corpus, e.g. '1.0', 'gone'" in caplog.text
    assert metrics["recall_at_10"] == pytest.approx(0.5)  # the missing relevant one is a miss
    metrics, _ = _search(tmp_path, [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0]], "cosine")
    assert metrics["judged_documents_not_in_corpus"] == 0


def test_metrics_at_a_k_deeper_than_the_ranking_are_listed_and_logged(tmp_path, caplog):
    """retrieval.top_k below a metric's k (100 hits, recall@1000): the metric keeps its
    key (sweeps and reports name it), but metrics.json lists it, as a sweep names it, and
    the log says it is not the metric at k; a ranking of the whole corpus lists none."""
    docs, queries = np.eye(4, dtype=np.float32), [[1.0, 0.0, 0.0, 0.0]]
    with caplog.at_level("WARNING"):
        metrics, run = _search(tmp_path, docs, queries, "cosine", top_k=2)
    assert len(run) == 2 and metrics["top_k"] == 2 and metrics["n_documents"] == 4
    beyond = metrics["beyond_ranking_depth"]
    assert beyond[:5] == ["ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10"]
    assert "all.recall_at_1000" in beyond and "all.ndcg_at_3" in beyond
    assert "all.recall_at_1" not in beyond and "all.precision_at_1" not in beyond
    assert metrics["all"]["recall_at_1000"] == 1.0  # kept, not null: recall@2 here
    assert "the ranking holds the top 2 of 4 documents per query" in caplog.text
    assert "retrieval.top_k 1000 gives them all" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        metrics, _ = _search(tmp_path, docs, queries, "cosine", top_k=4)  # every document: nothing deeper to find
    assert metrics["top_k"] == 4 and metrics["beyond_ranking_depth"] == [] and "ranking holds" not in caplog.text


def test_the_per_query_figure_is_closed_when_saving_it_fails(tmp_path, monkeypatch):
    """pyplot keeps a figure until it is closed: a failed save left one open per call in
    a long process (core.figures.save_figure closes it in every case)."""
    import matplotlib.pyplot as plt
    import pyarrow as pa
    from matplotlib.figure import Figure

    from shardflow.retrieval.pipeline import HEADLINE, plot_per_query

    per_query = tmp_path / "per_query.parquet"
    pq.write_table(pa.table({"ndcg_at_10": [0.5, 1.0]}), per_query)
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"n_documents": 2, **dict.fromkeys(HEADLINE, 0.5)}))
    plt.close("all")

    def fail(self, *args, **kwargs):
        raise RuntimeError("renderer died")

    monkeypatch.setattr(Figure, "savefig", fail)
    with pytest.raises(RuntimeError, match="renderer died"):
        plot_per_query(str(per_query), str(metrics), str(tmp_path / "per_query.png"))
    assert plt.get_fignums() == [] and not (tmp_path / "per_query.png").exists()


def test_the_per_query_figure_names_a_relevance_level_away_from_1(tmp_path, monkeypatch):
    """At retrieval.relevance_level 2 the figure's recall, MRR and MAP cells say so (they
    are not the numbers scored at 1); nDCG's does not, and at 1 no text changes (the
    figure's bytes were checked equal to the ones drawn before the labels)."""
    import pyarrow as pa
    from matplotlib.text import Text

    from shardflow.retrieval import pipeline
    from shardflow.retrieval.pipeline import HEADLINE, plot_per_query

    drawn = []

    def texts(fig, path):
        cells = [cell.get_text() for ax in fig.axes for table in ax.tables for cell in table.get_celld().values()]
        drawn.append({t.get_text() for t in [*fig.findobj(Text), *cells]})
        pipeline.pyplot().close(fig)

    monkeypatch.setattr(pipeline, "save_figure", texts)
    per_query = tmp_path / "per_query.parquet"
    pq.write_table(pa.table({"ndcg_at_10": [0.5, 1.0]}), per_query)
    metrics = tmp_path / "metrics.json"
    for level in (1, 2):
        record = {"n_documents": 2, **dict.fromkeys(HEADLINE, 0.5), **({"relevance_level": level} if level != 1 else {})}
        metrics.write_text(json.dumps(record))
        plot_per_query(str(per_query), str(metrics), str(tmp_path / "per_query.png"))
    at_one, at_two = drawn
    assert set(HEADLINE) <= at_one and not any("relevance" in t for t in at_one)
    assert {"ndcg_at_10", "recall_at_10 (relevance >= 2)", "recall_at_100 (relevance >= 2)",
            "mrr_at_10 (relevance >= 2)", "map_at_10 (relevance >= 2)"} <= at_two
    assert at_two - at_one == {f"{k} (relevance >= 2)" for k in HEADLINE[1:]}


class _Named(dict):
    """A rule's params or input as a script reads them: by attribute, or with .get."""

    __getattr__ = dict.__getitem__


@pytest.mark.parametrize("device", ["cuda:1", "cuda", "auto", "cpu"])
def test_the_evaluation_script_searches_on_the_device_its_job_was_given(tmp_path, monkeypatch, device):
    """scripts/retrieval_evaluate.py passed the pipeline no device for a GPU job (None:
    CUDA's current device), so with gpu_jobs.pinning off and gpu_jobs.device cuda:1 the
    search ran on cuda:0, beside whatever that GPU held. It passes the job's own device;
    the pipeline resolves auto (search_and_score)."""
    import runpy
    from types import SimpleNamespace

    from shardflow.core import gpujob, madewith
    from shardflow.retrieval import pipeline

    job = SimpleNamespace(device=device, threads=1, log=SimpleNamespace(info=lambda *a: None))
    monkeypatch.setattr(gpujob, "start_gpu_job", lambda *a: job)
    searched = []
    monkeypatch.setattr(pipeline, "search_and_score", lambda *a: searched.append(a[5]) or {"device": a[5].device})
    monkeypatch.setattr(pipeline, "plot_per_query", lambda *a: None)
    monkeypatch.setattr(madewith, "made_with", lambda *a: {})  # no GPU here to name
    params = _Named(top_k=10, block_size=64, backend="torch", drop_identical_ids=True, model="default")
    names = ("docs", "doc_ids", "queries", "query_ids", "qrels")
    smk = SimpleNamespace(params=params, input=_Named((n, n) for n in names),
                          output=_Named(metrics="m", per_query="q", run="r", figure="f", stats=str(tmp_path / "s.json")))
    runpy.run_path("scripts/retrieval_evaluate.py", init_globals={"snakemake": smk})
    assert searched[0].device == device


@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_a_non_finite_query_or_document_vector_stops_the_evaluation_naming_file_and_id(tmp_path, backend):
    """embed_queries does not check its vectors (verify checks the corpus's alone): a NaN
    query ranked every document at -1 under torch and none under faiss. The job stops
    naming the queries file and the query's id; a document's row, which verify would
    have refused, is named by its id as well (the corpus ids reach the search whatever
    drop_identical_ids says)."""
    if backend == "faiss":
        pytest.importorskip("faiss")
    docs, queries = [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [np.nan, 1.0]]
    with pytest.raises(ValueError, match=rf"{tmp_path / 'q.npy'}: row 1 \(counting from 0\), query id 'q1', holds NaN"):
        _search(tmp_path, docs, queries, "cosine", backend=backend)
    docs[1][1], queries[1][0] = np.inf, 0.0
    with pytest.raises(ValueError, match=rf"{tmp_path / 'd.npy'}: row 1 \(counting from 0\), document id 'd1', holds"):
        _search(tmp_path, docs, queries, "dot", backend=backend)


def test_a_cuda_device_the_job_has_not_is_named_before_the_search(tmp_path):
    """A GPU job's own device now reaches the search (the script passed none before): one
    this process has no CUDA for stops with the device named, not in the first tensor op.
    The index one past this host's last GPU is absent on every host (cuda:0 without CUDA)."""
    import torch

    absent = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(RuntimeError, match=f"device '{absent}' requested but"):
        _search(tmp_path, [[1.0, 0.0]], [[1.0, 0.0]], "cosine", device=absent)


def test_queries_the_qrels_and_the_run_do_not_share_are_counted_and_named(tmp_path, caplog):
    """A query embedded but no longer judged, or judged but not embedded (queries.npy
    older than the qrels: kept by --touch or --rerun-triggers mtime), is left out of
    every mean; the log says how many and names them, as it does judged documents the
    corpus lacks."""
    qrels = {"q0": {"d0": 1}, "q7": {"d1": 1}, "q8": {"d0": 1}}  # q1 is in the run, q7 and q8 are not
    with caplog.at_level("WARNING"):
        metrics, _ = _search(tmp_path, [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]], "cosine", qrels)
    assert metrics["n_queries"] == 1 and metrics["n_queries_not_in_run"] == 2 and metrics["ndcg_at_10"] == 1.0
    assert "1 queries of " in caplog.text and "have no qrels, so they are not scored: 'q1'" in caplog.text
    assert "2 judged queries are not among the embedded queries" in caplog.text and "'q7', 'q8'" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        _search(tmp_path, [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0]], "cosine")
    assert "not scored" not in caplog.text and "not among the embedded queries" not in caplog.text


def test_the_evaluation_holds_no_python_object_per_document_or_hit(tmp_path):
    """The corpus ids stay one Arrow array and each query's ranking is made as it is scored
    and as it is written (search.LazyRun), so the Python objects search_and_score holds do
    not grow with the corpus or the run. A str per document and a dict entry and float per
    hit, held to the end, made MS MARCO dev's job (8.8 M passages, 6,980 queries x 1,000
    hits) peak at 2.1 GB RSS after the search; 1.1 GB now, the outputs the same bytes."""
    import tracemalloc

    n_docs, n_queries, k = 100_000, 100, 1000
    rng = np.random.default_rng(0)
    np.save(tmp_path / "d.npy", rng.standard_normal((n_docs, 2)).astype(np.float32))
    np.save(tmp_path / "q.npy", rng.standard_normal((n_queries, 2)).astype(np.float32))
    write_ids_parquet(tmp_path / "d.parquet", [str(i) for i in rng.permutation(n_docs)])
    write_ids_parquet(tmp_path / "q.parquet", [f"q{i}" for i in range(n_queries)])
    (tmp_path / "qrels.json").write_text(json.dumps({f"q{i}": {str(i): 1} for i in range(n_queries)}))
    files = [str(tmp_path / n) for n in ("d.npy", "d.parquet", "q.npy", "q.parquet", "qrels.json")]
    out = [str(tmp_path / n) for n in ("m.json", "p.parquet", "r.parquet")]
    search_and_score(*files, EvaluateParams(top_k=10, device="cpu"), *out)  # imports and first calls
    tracemalloc.start()
    try:
        search_and_score(*files, EvaluateParams(top_k=k, device="cpu"), *out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pq.read_metadata(out[2]).num_rows == n_queries * k
    assert peak / (n_docs + n_queries * k) < 20, peak  # 85 before, 8 now
