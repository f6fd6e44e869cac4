"""BEIR / MS MARCO loaders on small generated files, gzip included, and their errors."""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pytest

from shardflow.corpus.chunks import read_chunk
from shardflow.retrieval.data import (
    RetrievalDataError,
    beir_file,
    doc_text,
    iter_beir_corpus,
    iter_beir_queries,
    iter_msmarco_collection,
    iter_msmarco_queries,
    load_beir_qrels,
    load_qrels,
    write_corpus_jsonl,
)
from tests.helpers import opt_in_data


def write(path: Path, text: str, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def jsonl(*objs) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def line_2_fails(read, path: Path, reason: str) -> None:
    """Reading `path` stops at its second line, naming the file, the line and `reason`."""
    with pytest.raises(RetrievalDataError, match=re.escape(f"{path}:2: {reason}")):
        list(read(path))


@pytest.fixture
def beir(tmp_path):
    write(
        tmp_path / "corpus.jsonl",
        jsonl(
            {"_id": "d1", "title": "Title", "text": " body one "},
            {"_id": "d2", "title": "", "text": " body two\n"},
            {"_id": 3, "text": "no title"},
        )
        + "\n",  # trailing blank line is fine
    )
    write(
        tmp_path / "queries.jsonl.gz",
        jsonl({"_id": "q1", "text": " as given "}, {"_id": 7, "text": "x"}),
        gz=True,
    )
    write(
        tmp_path / "qrels" / "test.tsv",
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t2\n7\t3\t0\n",
    )
    return tmp_path


def test_beir_folder(beir):
    assert list(iter_beir_corpus(beir)) == [
        ("d1", "Title  body one"),
        ("d2", "body two"),
        ("3", "no title"),
    ]
    assert list(iter_beir_queries(beir)) == [("q1", " as given "), ("7", "x")]
    assert load_beir_qrels(beir, "test") == {"q1": {"d1": 1, "d9": 2}, "7": {"3": 0}}


def test_doc_text_matches_mteb():
    assert doc_text("T", "body") == "T body"
    assert doc_text("", " body ") == "body"
    assert doc_text(None, "body") == "body"


def test_beir_file_prefers_plain_then_gz(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus.jsonl"):
        beir_file(tmp_path, "corpus")
    write(tmp_path / "corpus.jsonl.gz", jsonl({"_id": "a", "text": "t"}), gz=True)
    assert beir_file(tmp_path, "corpus").name == "corpus.jsonl.gz"
    assert list(iter_beir_corpus(tmp_path / "corpus.jsonl.gz")) == [("a", "t")]
    with pytest.raises(FileNotFoundError, match="qrels/dev.tsv"):
        load_beir_qrels(tmp_path, "dev")


def test_gzip_is_detected_by_content_not_name(tmp_path):
    path = write(tmp_path / "collection.tsv", "1\tpassage\n", gz=True)
    assert list(iter_msmarco_collection(path)) == [("1", "passage")]


@pytest.mark.parametrize(
    "line, reason",
    [
        ('{"_id": "b", "text": ', "malformed JSON"),
        ('{"_id": "b"}', "missing field 'text'"),
        ('{"text": "t"}', "missing field '_id'"),
        ('{"_id": "b", "text": 5}', "'text' is not a string"),
        ('{"_id": "b", "title": 1, "text": "t"}', "'title' is not a string"),
        ('["_id", "b"]', "expected a JSON object"),
        # json decodes by recursion: this raised a bare RecursionError, naming no file or line.
        ('{"_id": "b", "text": "t", "n": ' + "[" * 100_000, "malformed JSON \\(arrays or objects nested deeper than"),
        ('{"_id": "a", "text": "again"}', "duplicate document id 'a' \\(an earlier line has it\\)"),
    ],
)
def test_corpus_errors_name_file_and_line(tmp_path, line, reason):
    path = write(
        tmp_path / "corpus.jsonl.gz", jsonl({"_id": "a", "text": "t"}) + line + "\n", gz=True
    )
    with pytest.raises(RetrievalDataError, match=reason) as err:
        list(iter_beir_corpus(tmp_path))
    assert str(err.value).startswith(f"{path}:2: ")
    assert err.value.line == 2


def test_repeated_ids_name_the_users_file_and_line(tmp_path):
    """Not the prepared copy under results/: the BEIR or MS MARCO file the user gave;
    an integer id and its string are one id."""
    (tmp_path / "queries.jsonl").write_text(jsonl({"_id": 5, "text": "x"}) + jsonl({"_id": "5", "text": "y"}))
    with pytest.raises(RetrievalDataError, match=r"queries.jsonl:2: duplicate query id '5'"):
        list(iter_beir_queries(tmp_path))
    with pytest.raises(RetrievalDataError, match=r"queries.jsonl:2: duplicate query id '5'"):
        list(iter_beir_queries(tmp_path, judged={"5"}))
    assert len(list(iter_beir_queries(tmp_path, judged={"7"}))) == 2  # not judged: not evaluated, as before
    coll = write(tmp_path / "collection.tsv", "0\tfirst\n1\tsecond\n0\tthird\n")
    with pytest.raises(RetrievalDataError, match=r"collection.tsv:3: duplicate passage id '0'"):
        list(iter_msmarco_collection(coll))


def test_invalid_utf8_names_its_line(tmp_path):
    path = tmp_path / "queries.tsv"
    path.write_bytes(b"1\tfine\n2\tbad \xff byte\n")
    with pytest.raises(RetrievalDataError, match=r"queries.tsv:2: invalid UTF-8"):
        list(iter_msmarco_queries(path))


def test_msmarco_collection_and_queries(tmp_path):
    coll = write(
        tmp_path / "collection.tsv.gz", "0\t The first passage.\r\n1\tsecond\twith tab\n", gz=True
    )
    assert list(iter_msmarco_collection(coll)) == [
        ("0", "The first passage."),
        ("1", "second\twith tab"),
    ]
    queries = write(
        tmp_path / "queries.dev.tsv", "1048585\twhat is paula deen's brother\n\n2\t x \n"
    )
    assert list(iter_msmarco_queries(queries)) == [
        ("1048585", "what is paula deen's brother"),
        ("2", " x "),
    ]
    bad = write(tmp_path / "bad.tsv", "1\tok\nno tab here\n")
    with pytest.raises(RetrievalDataError, match=r"bad.tsv:2: expected `id<TAB>text`"):
        list(iter_msmarco_collection(bad))


@pytest.mark.parametrize(
    "read, header",
    [
        (iter_msmarco_collection, "pid\tpassage"),  # the columns MS MARCO's README names
        (iter_msmarco_collection, "id\ttext\ttitle"),  # DPR's psgs_w100.tsv
        (iter_msmarco_collection, "docid\tcontents"),
        (iter_msmarco_collection, "_id\tText"),  # pandas to_csv(sep="\t") of a BEIR-like frame
        (iter_msmarco_queries, "qid\tquery"),
        (iter_msmarco_queries, "query_id\ttext"),
    ],
)
def test_an_msmarco_header_line_is_no_record_and_is_logged(tmp_path, caplog, read, header):
    """The official files have no header; one written by pandas or a hand (`pid<TAB>passage`)
    was a record whose id was the header's first word, silently. A first line whose every
    field names a column is read as a header, with a warning naming the file and line 1."""
    path = write(tmp_path / "file.tsv", f"\n{header}\n0\tfirst\n1\tsecond\n")
    with caplog.at_level("WARNING"):
        assert list(read(path)) == [("0", "first"), ("1", "second")]
    assert f"{path}:2: {header!r} is a header line (every field names a column), not a" in caplog.text


def test_a_first_line_that_is_no_header_is_a_record(tmp_path, caplog):
    """Ids that are words are ids: only a first line whose fields are all column names is a header."""
    with caplog.at_level("WARNING"):
        path = write(tmp_path / "collection.tsv", "id\tThe id, in Freud's model\ntext\tpassage\npid\tpassage\n")
        assert [pid for pid, _ in iter_msmarco_collection(path)] == ["id", "text", "pid"]
        path = write(tmp_path / "queries.tsv", "qid\twhat is a qid\nq2\tquery\n")
        assert [qid for qid, _ in iter_msmarco_queries(path)] == ["qid", "q2"]
    assert "header" not in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        "q1 0 d1 1\nq1 0 d2 0\nq2 0 d1 2\n",  # TREC, spaces
        "q1\t0\td1\t1\nq1\t0\td2\t0\nq2\t0\td1\t2\n",  # MS MARCO qrels.dev.tsv
        "q1\td1\t1\nq1\td2\t0\nq2\td1\t2\n",  # three columns, no header
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td1\t2.0\n",  # BEIR
    ],
)
def test_qrels_layouts(tmp_path, text):
    qrels = load_qrels(write(tmp_path / "qrels.txt.gz", text, gz=True))
    assert qrels == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    assert all(isinstance(rel, int) for q in qrels.values() for rel in q.values())


@pytest.mark.parametrize(
    "text, reason",
    [
        ("q1 0 d1 1\nq1 0 d2 1\nq1 d3 1\n", "expected 4 columns like the first row, found 3"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t1\td3\n", "expected 3 columns"),
        ("q1 d1 1\nq1 d2 1\nq1 d3 high\n", "relevance 'high' is not an integer"),
        ("q1 d1\n", "3 or 4 columns, found 2"),
    ],
)
def test_qrels_errors_name_file_and_line(tmp_path, text, reason):
    path = write(tmp_path / "qrels.tsv", text)
    with pytest.raises(RetrievalDataError, match=reason) as err:
        load_qrels(path)
    assert str(err.value).startswith(f"{path}:")
    assert err.value.line == text.count("\n")


def test_a_first_row_with_a_fractional_grade_is_an_error_not_a_header(tmp_path):
    """It used to be taken for a header and dropped: q1 vanished from the evaluation."""
    path = write(tmp_path / "qrels.tsv", "q1 d1 1.5\nq2 d1 1\n")
    with pytest.raises(RetrievalDataError, match=r"qrels.tsv:1: relevance '1.5' is not an integer"):
        load_qrels(path)


@pytest.mark.parametrize(
    "text, line, reason",
    [
        ("q1\td1\t\nq2\td4\t1\n", 1, "relevance '' is not an integer"),  # no grade: no header either
        ("", 1, "no judgement in the file"),
        ("query-id\tcorpus-id\tscore\n", 1, "no judgement in the file"),
    ],
)
def test_a_first_row_without_a_grade_and_qrels_without_judgements_are_errors(tmp_path, text, line, reason):
    """The row without a grade used to be taken for a header (its query vanished); qrels
    with no judgement ran the whole corpus side before the evaluation found nothing."""
    path = write(tmp_path / "qrels.tsv", text)
    with pytest.raises(RetrievalDataError, match=reason) as err:
        load_qrels(path)
    assert err.value.line == line and str(err.value).startswith(f"{path}:{line}:")


def test_an_unpaired_surrogate_in_a_text_names_the_users_line(tmp_path):
    path = write(tmp_path / "corpus.jsonl", jsonl({"_id": "a", "text": "ok"}) + '{"_id": "b", "text": "x \\udc80"}\n')
    with pytest.raises(RetrievalDataError, match=re.escape(f"{path}:2: field 'text' holds an unpaired surrogate")):
        list(iter_beir_corpus(path))


def test_a_byte_order_mark_is_no_part_of_the_first_id(tmp_path):
    """An MS MARCO collection's first passage id read as '\ufeff0' matched no judgement."""
    bom = "\ufeff"
    collection = write(tmp_path / "collection.tsv", f"{bom}0\tCats purr\n1\tDogs bark\n")
    assert [pid for pid, _ in iter_msmarco_collection(collection)] == ["0", "1"]
    assert load_qrels(write(tmp_path / "qrels.tsv", f"{bom}q1\t0\td1\t1\n")) == {"q1": {"d1": 1}}
    corpus = write(tmp_path / "corpus.jsonl", bom + jsonl({"_id": "d1", "text": "a"}))
    assert list(iter_beir_corpus(corpus)) == [("d1", "a")]


@pytest.mark.parametrize(
    "value, reason",
    [
        (1.0, "field '_id' is float (1.0), not a string or integer"),
        (True, "field '_id' is bool (True), not a string or integer"),
        ([1], "field '_id' is list ([1]), not a string or integer"),
        ("", "field '_id' is empty"),
        (" ", "field '_id' is empty"),
        ("\ud800", "field '_id' holds an unpaired surrogate"),
    ],
)
def test_a_beir_id_qrels_could_never_name_is_an_error_naming_the_line(tmp_path, value, reason):
    """A float id (pandas writes 1.0 for 1 in a column with a gap) became '1.0', which no
    qrels row names: every judgement of it scored as a miss, silently."""
    for name, read in (("corpus", iter_beir_corpus), ("queries", iter_beir_queries)):
        path = write(tmp_path / f"{name}.jsonl", jsonl({"_id": "ok", "text": "a"}, {"_id": value, "text": "b"}))
        line_2_fails(read, path, reason)


@pytest.mark.parametrize(
    "name, read, second_line, reason",
    [
        ("corpus.jsonl", iter_beir_corpus, '{"_id": "d1 ", "text": "b"}', "field '_id' 'd1 ' starts or ends with"),
        ("queries.jsonl", iter_beir_queries, '{"_id": "\\tq1", "text": "b"}', "field '_id' '\\tq1' starts or ends"),
        ("collection.tsv", iter_msmarco_collection, " 1\tb", "passage id ' 1' starts or ends with whitespace"),
        ("collection.tsv", iter_msmarco_collection, " \tb", "passage id is empty"),
        ("queries.tsv", iter_msmarco_queries, "1 \tb", "query id '1 ' starts or ends with whitespace"),
        ("qrels.tsv", load_qrels, "q1\td1 \t1", "document id 'd1 ' starts or ends with whitespace"),
        ("qrels.tsv", load_qrels, "q1\u00a0\td1\t1", "query id 'q1\\xa0' starts or ends with whitespace"),
        ("qrels.tsv", load_qrels, "q1\t \t1", "document id is empty"),
    ],
)
def test_an_id_with_whitespace_at_either_end_is_an_error_in_every_file(tmp_path, name, read, second_line, reason):
    """Corpus and queries kept 'd1 ' while qrels and MS MARCO ids were stripped to 'd1':
    a judgement of the document scored as a miss, or its query had no text. BEIR keeps
    such an id as written and TREC tools split it away; here it is an error at its line."""
    first_line = {".jsonl": '{"_id": "ok", "text": "a"}', ".tsv": "q0\td0\t1" if read is load_qrels else "0\ta"}
    path = write(tmp_path / name, f"{first_line[Path(name).suffix]}\n{second_line}\n")
    line_2_fails(read, path, reason)


@pytest.mark.parametrize(
    "name, read, second_line, reason",
    [
        ("corpus.jsonl", iter_beir_corpus, '{"_id": "b", "text": "x", "text": "y"}', "key 'text' is repeated (keys 2, 3"),
        ("corpus.jsonl", iter_beir_corpus, '{"title": "t", "_id": "b", "title" :"u", "text": "y"}', "key 'title'"),
        ("queries.jsonl", iter_beir_queries, '{"_id":"q","text":"x","_id"\t:  "r"}', "key '_id' is repeated (keys 1, 3"),
    ],
)
def test_a_key_read_twice_in_one_beir_line_is_an_error_naming_it(tmp_path, name, read, second_line, reason):
    """json keeps the last of two values, so the first text was dropped, silently; the
    colons may be spaced any way JSON allows."""
    path = write(tmp_path / name, jsonl({"_id": "a", "text": "a"}) + second_line + "\n")
    line_2_fails(read, path, reason)


def test_a_repeated_key_not_read_and_a_quote_before_a_colon_in_a_text_are_no_matter(tmp_path):
    lines = [
        '{"_id": "a", "text": "x", "extra": 1, "extra": 2}',
        '{"_id": "b", "text": "y", "metadata": {"k": 1, "k": 2}}',
        '{"_id": "c", "text": "he said \\"no\\": twice"}',
    ]
    path = write(tmp_path / "corpus.jsonl", "\n".join(lines) + "\n")
    assert list(iter_beir_corpus(path)) == [("a", "x"), ("b", "y"), ("c", 'he said "no": twice')]


def test_a_pair_judged_again_keeps_the_last_grade_with_a_warning(tmp_path, caplog):
    path = write(tmp_path / "qrels.tsv", "q1\td1\t1\nq1\td2\t1\nq1\td1\t0\nq1\td2\t1\n")
    with caplog.at_level("WARNING"):
        assert load_qrels(path) == {"q1": {"d1": 0, "d2": 1}}
    assert "1 (query, document) pairs are judged again with another grade" in caplog.text
    assert "first: line 3, 'q1', 'd1'" in caplog.text


def test_write_corpus_jsonl_round_trips(tmp_path, beir):
    out = tmp_path / "out" / "corpus.jsonl"
    assert write_corpus_jsonl(iter_beir_corpus(beir), out) == 3
    assert read_chunk(out) == (["d1", "d2", "3"], ["Title  body one", "body two", "no title"])
    first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert first == {"id": "d1", "text": "Title  body one"}


def test_write_corpus_jsonl_rejects_duplicate_ids_and_leaves_no_file(tmp_path):
    out = tmp_path / "corpus.jsonl"
    with pytest.raises(ValueError, match="duplicate document id 'a'"):
        write_corpus_jsonl([("a", "x"), ("b", "y"), ("a", "z")], out)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.optin
def test_arguana_counts():
    arguana = opt_in_data("ARGUANA", "shared/data/arguana")
    doc_ids = [doc_id for doc_id, _ in iter_beir_corpus(arguana)]
    queries = list(iter_beir_queries(arguana))
    qrels = load_beir_qrels(arguana, "test")
    assert len(doc_ids) == len(set(doc_ids)) == 8674
    assert len(queries) == 1406 and len(qrels) == 1406
    corpus = set(doc_ids)
    assert sum(1 for judged in qrels.values() for d in judged if d not in corpus) == 5


def test_truncated_gzip_and_oversized_lines_name_file_and_line(tmp_path, monkeypatch):
    import gzip

    import pytest

    from shardflow.retrieval import data

    whole = "".join(json.dumps({"_id": f"d{i}", "text": "x" * 50}) + "\n" for i in range(200)).encode()
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(gzip.compress(whole)[:-40])  # cut before the end marker
    with pytest.raises(data.RetrievalDataError, match=rf"{path}:\d+: gzip stream truncated"):
        list(data.iter_beir_corpus(path))

    monkeypatch.setattr(data, "DEFAULT_MAX_RECORD_BYTES", 1000)
    long = tmp_path / "queries.jsonl"
    long.write_text(json.dumps({"_id": "q0", "text": "ok"}) + "\n" + json.dumps({"_id": "q1", "text": "y" * 5000}) + "\n")
    with pytest.raises(data.RetrievalDataError, match=rf"{long}:2: line too large: 5,02\d bytes, over the limit of 1,000"):
        list(data.iter_beir_queries(long))


@pytest.mark.parametrize(
    "text",
    [
        # ir_datasets' qrels (query_id, doc_id, relevance, iteration) written by pandas: read as
        # TREC by position, the grade was taken for the document and the iteration for the grade
        "query_id\tdoc_id\trelevance\titeration\nq1\td1\t1\t0\nq1\td2\t0\t0\nq2\td1\t2\t0\n",
        # a BEIR table written by pandas with its index: the row number was taken for the query
        "\tquery-id\tcorpus-id\tscore\n0\tq1\td1\t1\n1\tq1\td2\t0\n2\tq2\td1\t2\n",
        "corpus-id\tquery-id\tscore\nd1\tq1\t1\nd2\tq1\t0\nd1\tq2\t2\n",
        "qid iter docno rel\nq1 0 d1 1\nq1 0 d2 0\nq2 0 d1 2\n",  # TREC's names: as by position
    ],
)
def test_a_qrels_header_that_names_its_columns_is_read_by_those_names(tmp_path, text):
    """A header that says where the query, the document and the grade are is what MTEB reads
    (by name); by position, a 4-column file was read as TREC whatever its header said."""
    assert load_qrels(write(tmp_path / "qrels.tsv", text)) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}


@pytest.mark.parametrize(
    "text, reason",
    [
        ("id\tdoc_id\tscore\tx\nq1\td1\t1\t5\n", "header names the document id in column 2, where a 4-column file holds it in column 3"),
        ("query-id\tdocid\tdoc_id\tscore\nq1\td1\td1\t1\n", "columns 2 and 3 both name the document id"),
    ],
)
def test_a_qrels_header_that_names_only_some_columns_elsewhere_is_an_error(tmp_path, text, reason):
    path = write(tmp_path / "qrels.tsv", text)
    with pytest.raises(RetrievalDataError, match=re.escape(f"{path}:1: {reason}")):
        load_qrels(path)


@pytest.mark.parametrize(
    "name, data, read, reason",
    [
        ("qrels.tsv", "q1\td1\t1\n".encode("utf-16"), load_qrels, "UTF-16 (byte-order mark FF FE), not UTF-8 text"),
        ("collection.tsv", b"1\tone\r2\ttwo\r", iter_msmarco_collection, "its lines end in CR alone"),
    ],
)
def test_an_error_about_the_whole_file_names_it_without_a_line(tmp_path, name, data, read, reason):
    """Such an error has no line, and read `<file>:None: ...`."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(RetrievalDataError) as err:
        list(read(path))
    assert str(err.value).startswith(f"{path}: {reason}") and err.value.line is None


def _beir_reads(path: Path) -> dict:
    """What BEIR's GenericDataLoader._load_qrels reads: csv.reader, tab, QUOTE_MINIMAL, header skipped."""
    with open(path, encoding="utf-8") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_MINIMAL))[1:]
    qrels: dict = {}
    for query_id, corpus_id, score in rows:
        qrels.setdefault(query_id, {})[corpus_id] = int(score)
    return qrels


@pytest.mark.parametrize(
    "text",
    [
        # csv.QUOTE_NONNUMERIC, as pandas writes string ids with quoting=2: every id quoted
        '"query-id"\t"corpus-id"\t"score"\n"q1"\t"d1"\t1\n"q1"\t"d2"\t0\n"q2"\t"d1"\t2\n',
        # integer query ids unquoted, document ids quoted: read as they were, every judged
        # document was one the corpus lacks, and every query scored 0 with a warning
        'query-id\tcorpus-id\tscore\n1\t"d1"\t1\n1\t"d2"\t0\n2\t"d1"\t2\n',
        # csv.QUOTE_ALL: the grade too, and a quote inside an id doubled
        '"query-id"\t"corpus-id"\t"score"\n"q1"\t"""d1"""\t"1"\n"q1"\t"d2"\t"0"\n"q2"\t"""d1"""\t"2"\n',
    ],
)
def test_quoted_qrels_fields_are_read_as_beirs_csv_reader_reads_them(tmp_path, text):
    """A tab-separated qrels field in double quotes is a CSV-quoted field (BEIR reads its
    qrels with csv.reader): its quotes are no part of the id. Kept, they were."""
    path = write(tmp_path / "qrels.tsv", text)
    assert load_qrels(path) == _beir_reads(path)
    trec = write(tmp_path / "trec.tsv", '"q1"\t0\t"d1"\t1\n')  # TREC's four columns, tab separated
    assert load_qrels(trec) == {"q1": {"d1": 1}}


@pytest.mark.parametrize(
    "text, reason",
    [
        # an unclosed quote: csv.reader would run on into the next lines, taking rows into the id
        ('query-id\tcorpus-id\tscore\n"q1\td1\t1\nq2\td1\t1\n', ":2: malformed CSV quoting (unexpected end of data)"),
        ('query-id\tcorpus-id\tscore\n"q1"x\td1\t1\n', ":2: malformed CSV quoting ('\t' expected after '\"')"),
        # whitespace-separated (TREC): trec_eval keeps quotes, a CSV reader drops them
        ('q1 0 "d1" 1\n', ":1: column 3 '\"d1\"' is in double quotes"),
    ],
)
def test_quoted_qrels_fields_that_csv_does_not_read_alike_are_errors(tmp_path, text, reason):
    path = write(tmp_path / "qrels.tsv", text)
    with pytest.raises(RetrievalDataError, match=re.escape(f"{path}{reason}")):
        load_qrels(path)


@pytest.mark.parametrize(
    "read, text, reason",
    [
        (iter_msmarco_collection, '0\tfirst\n"1"\t"second, quoted"\n', ":2: passage id '\"1\"' is in double quotes"),
        (iter_msmarco_queries, '"q1"\twhat is a qid\n', ":1: query id '\"q1\"' is in double quotes"),
    ],
)
def test_a_quoted_msmarco_id_is_an_error_naming_the_line(tmp_path, read, text, reason):
    """MS MARCO TSVs are read as written (official passages hold quotation marks), so a csv
    writer's quotes stayed in the id, where quoted qrels now drop theirs. A passage that
    opens with a quotation mark is read as it is."""
    path = write(tmp_path / "file.tsv", text)
    with pytest.raises(RetrievalDataError, match=re.escape(f"{path}{reason}")):
        list(read(path))
    quoting = write(tmp_path / "collection.tsv", '0\t"Quoted," he said.\n')
    assert list(iter_msmarco_collection(quoting)) == [("0", '"Quoted," he said.')]
