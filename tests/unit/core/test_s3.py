"""shardflow.core.s3 without a server (the server tests: tests/cluster/test_s3_globs_and_resume.py)."""

import os
import time

import pytest

from shardflow.core.s3 import (
    LOCAL_VARIABLE,
    PREFIX_VARIABLE,
    ObjectFolder,
    S3Url,
    expand,
    export_settings,
    glob_regex,
    has_magic,
    logical_path,
    settings_from_env,
)


@pytest.mark.parametrize(
    "pattern, matches, misses",
    [
        ("c/*.jsonl", ["c/a.jsonl"], ["c/d/a.jsonl", "c/a.jsonl.gz", "ca.jsonl", "c/.jsonl"]),
        ("c/**/*.jsonl", ["c/a.jsonl", "c/d/a.jsonl", "c/d/e/a.jsonl"], ["c/a.json", "x/c/a.jsonl"]),
        ("c/part-?.txt", ["c/part-1.txt"], ["c/part-10.txt", "c/part-/.txt"]),
        ("c/[ab].txt", ["c/a.txt", "c/b.txt"], ["c/c.txt"]),
        ("c/[!ab].txt", ["c/c.txt"], ["c/a.txt"]),
        ("c/a+b(1).txt", ["c/a+b(1).txt"], ["c/aab(1).txt"]),
    ],
)
def test_glob_regex_means_what_a_local_recursive_glob_means(pattern, matches, misses):
    regex = glob_regex(pattern)
    assert all(regex.match(k) for k in matches), matches
    assert not any(regex.match(k) for k in misses), misses


def test_glob_regex_passes_over_hidden_names_as_a_local_glob_does(tmp_path, monkeypatch):
    """A folder's keys, matched by each pattern, are the files glob.glob(recursive=True)
    finds in a local copy of it: a `*`, `?`, `[...]` or `**` matches no hidden file or
    folder (one whose name starts with `.`) unless the pattern's segment starts with `.`.
    Before, an S3 glob read macOS's `._a.jsonl` or a `.resume/` folder's parts that the
    same folder on disk never gave."""
    import glob

    keys = ["c/a.jsonl", "c/b.txt", "c/._a.jsonl", "c/.jsonl", "c/d/e.jsonl", "c/d/.f.jsonl", "c/.resume/p.jsonl",
            "c/.resume/q/r.jsonl", "c/d/.g/h.jsonl", "c/ab.jsonl"]
    for key in keys:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text("{}")
    monkeypatch.chdir(tmp_path)
    patterns = ["c/*.jsonl", "c/**/*.jsonl", "c/**", "c/*", "c/?.jsonl", "c/[._]*.jsonl", "c/.*.jsonl", "c/.*",
                "c/.resume/*.jsonl", "c/.resume/**/*.jsonl", "c/*/*.jsonl", "c/a**.jsonl", "**/*.jsonl"]
    for pattern in patterns:
        local = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        regex = glob_regex(pattern)
        assert sorted(k for k in keys if regex.match(k)) == local, pattern


def test_urls_and_settings():
    url = S3Url.parse("s3://bucket/runs/x/")
    assert (url.bucket, str(url.join("results", "a.npy"))) == ("bucket", "s3://bucket/runs/x/results/a.npy")
    assert has_magic("s3://b/c/*.jsonl") and not has_magic("s3://b/c/a.jsonl")
    with pytest.raises(ValueError, match="without a bucket"):
        S3Url.parse("s3:///key")
    env = {"SNAKEMAKE_STORAGE_S3_ENDPOINT_URL": "http://set"}
    export_settings({"endpoint_url": "http://other", "secret_key": "s", "token": None}, env)
    assert env == {"SNAKEMAKE_STORAGE_S3_ENDPOINT_URL": "http://set", "SNAKEMAKE_STORAGE_S3_SECRET_KEY": "s"}
    assert settings_from_env(env) == {"endpoint_url": "http://set", "secret_key": "s"}


@pytest.mark.parametrize(
    "path, prefix, name",
    [
        # under the run's default storage prefix: the workflow's own path
        (".snakemake/storage/s3/b/runs/x/results/d/a.json", "s3://b/runs/x", "results/d/a.json"),
        (".snakemake/storage/s3/b/runs/x/results/d/a.json", "s3://b/runs/x/", "results/d/a.json"),
        (".snakemake/storage/s3/b/runs/x/results/d/a.json", "s3://b/runs//x", "results/d/a.json"),
        ("/work/.snakemake/storage/s3/b/runs/x/logs/a.log", "s3://b/runs/x", "logs/a.log"),
        # elsewhere in storage (a corpus read from another folder): the object's URL
        (".snakemake/storage/s3/b/corpora/c.jsonl", "s3://b/runs/x", "s3://b/corpora/c.jsonl"),
        (".snakemake/storage/s3/b/runs/xy/a.json", "s3://b/runs/x", "s3://b/runs/xy/a.json"),
        (".snakemake/storage/s3/b/corpora/c.jsonl", "", "s3://b/corpora/c.jsonl"),
        # not a storage copy: as given
        ("results/d/a.json", "s3://b/runs/x", "results/d/a.json"),
        ("my.snakemake/storage/s3/b/a.json", "s3://b", "my.snakemake/storage/s3/b/a.json"),
    ],
)
def test_records_name_a_stored_file_as_the_workflow_does(path, prefix, name, monkeypatch):
    monkeypatch.delenv(LOCAL_VARIABLE, raising=False)
    assert logical_path(path, prefix) == name


def test_the_default_prefix_is_the_one_the_workflow_exported(monkeypatch):
    path = ".snakemake/storage/s3/b/runs/x/results/d/a.json"
    monkeypatch.delenv(PREFIX_VARIABLE, raising=False)
    monkeypatch.delenv(LOCAL_VARIABLE, raising=False)
    assert logical_path(path) == "s3://b/runs/x/results/d/a.json"
    monkeypatch.setenv(PREFIX_VARIABLE, "s3://b/runs/x")
    assert logical_path(path) == "results/d/a.json"


def test_a_local_storage_prefix_of_its_own_is_followed(monkeypatch):
    """Snakemake's --local-storage-prefix moves the local copies; the workflow exports
    the one its process uses ($SHARDFLOW_LOCAL_STORAGE)."""
    path = "/scratch/sm/s3/b/runs/x/results/d/a.json"
    assert logical_path(path, "s3://b/runs/x", "/scratch/sm") == "results/d/a.json"
    assert logical_path(path, "s3://b/runs/x", "/scratch/sm/") == "results/d/a.json"
    monkeypatch.setenv(LOCAL_VARIABLE, "/scratch/sm")
    assert logical_path(path, "s3://b/runs/x") == "results/d/a.json"
    assert logical_path(".snakemake/storage/s3/b/runs/x/a", "s3://b/runs/x") == ".snakemake/storage/s3/b/runs/x/a"


# ------------------------------------------------ removing a folder: per-key errors
# SeaweedFS (the test server) answers a DeleteObjects without version ids or ETags,
# as ObjectFolder sends it, with no per-key error short of a failing filer; AWS does
# (AccessDenied where a key is outside the role's grant). So a stubbed client here:
# botocore's Stubber checks each request and answer against the S3 API model.


@pytest.fixture
def stubbed():
    import boto3
    from botocore.stub import Stubber

    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    with Stubber(s3) as stub:
        yield s3, stub
        stub.assert_no_pending_responses()


def _listed(stub, keys):
    stub.add_response("list_objects_v2", {"Contents": [{"Key": k} for k in keys], "IsTruncated": False},
                      {"Bucket": "b", "Prefix": "run/.resume/job/"})


def _deleted(stub, keys, errors=()):
    answer = {"Errors": [{"Key": k, "Code": code, "Message": "..."} for k, code in errors]} if errors else {}
    stub.add_response("delete_objects", answer,
                      {"Bucket": "b", "Delete": {"Objects": [{"Key": k} for k in keys], "Quiet": True}})


def test_keys_the_server_would_not_delete_are_named_in_a_warning(stubbed, caplog):
    """DeleteObjects answers 200 with an Errors list: every batch is still tried (1,000
    keys a request), then a warning names each key left and its code. The job goes on:
    its outputs are written, and parts left behind only cost storage."""
    s3, stub = stubbed
    keys = [f"run/.resume/job/part-{i:06d}.npy" for i in range(1001)]
    _listed(stub, keys)
    _deleted(stub, keys[:1000], errors=[(keys[3], "AccessDenied"), (keys[7], "AccessDenied")])
    _deleted(stub, keys[1000:])  # tried though the first batch failed
    with caplog.at_level("WARNING", logger="shardflow.core.s3"):
        line = ObjectFolder("s3://b/run/.resume/job", s3).remove()
    assert line == (
        "cannot remove s3://b/run/.resume/job/: 2 of 1001 objects not deleted "
        "(AccessDenied: run/.resume/job/part-000003.npy, run/.resume/job/part-000007.npy); they stay in the bucket"
    )
    assert caplog.messages == [line]


def test_a_key_the_server_could_not_delete_for_now_is_asked_again(stubbed, monkeypatch):
    """InternalError, SlowDown, ...: asked again after a pause, then named if it stays;
    AccessDenied is not asked again."""
    pauses = []
    monkeypatch.setattr(time, "sleep", pauses.append)
    s3, stub = stubbed
    keys = ["run/.resume/job/manifest.json", "run/.resume/job/part-000000.npy", "run/.resume/job/part-000001.npy"]
    _listed(stub, keys)
    _deleted(stub, keys, errors=[(keys[0], "SlowDown"), (keys[1], "AccessDenied"), (keys[2], "InternalError")])
    _deleted(stub, [keys[0], keys[2]], errors=[(keys[2], "InternalError")])
    _deleted(stub, [keys[2]])
    line = ObjectFolder("s3://b/run/.resume/job", s3).remove()
    assert "1 of 3 objects not deleted (AccessDenied: run/.resume/job/part-000000.npy)" in line
    assert pauses == [1.0, 2.0]

    _listed(stub, keys[2:])
    for _ in range(4):
        _deleted(stub, keys[2:], errors=[(keys[2], "InternalError")])
    assert "(InternalError: run/.resume/job/part-000001.npy)" in ObjectFolder("s3://b/run/.resume/job", s3).remove()
    assert pauses == [1.0, 2.0, 1.0, 2.0, 4.0]


def test_a_folder_whose_keys_all_go_is_removed_silently(stubbed):
    s3, stub = stubbed
    _listed(stub, ["run/.resume/job/manifest.json"])
    _deleted(stub, ["run/.resume/job/manifest.json"])
    assert ObjectFolder("s3://b/run/.resume/job", s3).remove() is None


def test_a_folder_lists_the_names_below_it_that_start_with_a_prefix(stubbed):
    """A resume folder's attempt records (core.parts): one listing under the prefix."""
    s3, stub = stubbed
    stub.add_response("list_objects_v2", {"Contents": [{"Key": "run/.resume/job/attempt-h-1-2.json"}],
                                          "IsTruncated": False},
                      {"Bucket": "b", "Prefix": "run/.resume/job/attempt-"})
    assert ObjectFolder("s3://b/run/.resume/job", s3).names("attempt-") == ["attempt-h-1-2.json"]


def test_a_listing_or_delete_request_that_fails_whole_is_a_warning_not_a_failed_job(stubbed, monkeypatch, caplog):
    """The job removes its parts after writing its outputs: a request that fails as a whole
    (the listing, or a DeleteObjects batch: the server gone past the client's retries, a
    refusal of the whole request) raised, so the finished job failed, Snakemake deleted
    its outputs and ran it again. Each is named in the warning instead, as a refused key
    is; the other batches are still tried, and a transient code asked again."""
    monkeypatch.setattr(time, "sleep", lambda s: None)
    s3, stub = stubbed
    stub.add_client_error("list_objects_v2", "AccessDenied", "no", 403,
                          expected_params={"Bucket": "b", "Prefix": "run/.resume/job/"})
    with caplog.at_level("WARNING", logger="shardflow.core.s3"):
        line = ObjectFolder("s3://b/run/.resume/job", s3).remove()
    assert line == ("cannot remove s3://b/run/.resume/job/: its listing failed (AccessDenied); "
                    "its objects stay in the bucket")
    assert caplog.messages == [line]

    keys = [f"run/.resume/job/part-{i:06d}.npy" for i in range(1001)]
    _listed(stub, keys)
    stub.add_client_error("delete_objects", "AccessDenied", "no", 403,
                          expected_params={"Bucket": "b", "Delete": {"Objects": [{"Key": k} for k in keys[:1000]],
                                                                     "Quiet": True}})
    stub.add_client_error("delete_objects", "SlowDown", "later", 503,
                          expected_params={"Bucket": "b", "Delete": {"Objects": [{"Key": keys[1000]}], "Quiet": True}})
    _deleted(stub, keys[1000:])  # asked again: deleted
    line = ObjectFolder("s3://b/run/.resume/job", s3).remove()
    assert line.startswith("cannot remove s3://b/run/.resume/job/: 1000 of 1001 objects not deleted (AccessDenied: ")
    assert keys[1000] not in line


@pytest.mark.parametrize("url", ["s3://b//run/.resume/job", "s3://b/run//.resume/job/", "s3://b/run/./.resume/job"])
def test_a_folder_under_a_prefix_with_double_slashes_is_where_the_storage_plugin_puts_the_run(stubbed, url):
    """The eks profile's prefix is s3://<bucket>/<SHARDFLOW_S3_PREFIX>: a prefix variable
    of '/runs/x' makes s3://b//runs/x, which the storage plugin reads as runs/x
    (stored_prefix). The parts were written under run/... (S3Url.join strips slashes)
    but listed under /run/... (attempt records never found, parts never removed on
    AWS, whose keys are literal), or written under run//... , beside the run's outputs,
    where make status looks (workflow.mirror)."""
    s3, stub = stubbed
    folder = ObjectFolder(url, s3)
    stub.add_response("put_object", {}, {"Bucket": "b", "Key": "run/.resume/job/manifest.json", "Body": b"{}"})
    folder.write("manifest.json", b"{}")
    stub.add_response("list_objects_v2", {"Contents": [{"Key": "run/.resume/job/attempt-h-1-2.json"}],
                                          "IsTruncated": False},
                      {"Bucket": "b", "Prefix": "run/.resume/job/attempt-"})
    assert folder.names("attempt-") == ["attempt-h-1-2.json"]
    keys = ["run/.resume/job/attempt-h-1-2.json", "run/.resume/job/manifest.json"]
    _listed(stub, keys)
    _deleted(stub, keys)
    assert folder.remove() is None
    assert str(folder) == "s3://b/run/.resume/job"


def _listing(stub, prefix, keys):
    stub.add_response("list_objects_v2", {"Contents": [{"Key": k} for k in keys], "IsTruncated": False},
                      {"Bucket": "b", "Prefix": prefix})


def test_a_glob_matching_an_object_snakemake_storage_reads_as_another_names_each(stubbed):
    """snakemake-storage-plugin-s3 (0.3.6) takes an object's key from its URL's path
    (urllib.parse: a '#' or '?' ends it) normalised (posixpath.normpath), and fetches a
    key that other keys lie below as a folder. Such an object, matched by a glob, was
    handed on: s3://b/c/a#1.jsonl was read as the object c/a (a missing input, or
    another object's records), c//d.jsonl as c/d.jsonl (read twice), c/e.jsonl as a
    folder the reader cannot open."""
    s3, stub = stubbed
    good = ["c/a b+%20é[1].jsonl", "c/a.jsonl", "c/empty.jsonl"]
    odd = ["c/a#1.jsonl", "c/b?v=2.jsonl", "c//d.jsonl", "c/e.jsonl"]
    _listing(stub, "c/", sorted([*good, *odd, "c/e.jsonl/f.txt", "c/sub/"]))
    with pytest.raises(ValueError) as raised:
        expand("s3://b/c/**/*.jsonl", s3)
    message = str(raised.value)
    assert message.startswith("input pattern 's3://b/c/**/*.jsonl' matches 4 objects that Snakemake storage "), message
    for url, read_as in [("s3://b/c/a#1.jsonl", "the object s3://b/c/a"),
                         ("s3://b/c/b?v=2.jsonl", "the object s3://b/c/b"),
                         ("s3://b/c//d.jsonl", "the object s3://b/c/d.jsonl"),
                         ("s3://b/c/e.jsonl", "a folder: keys lie below it")]:
        assert f"{url} (read as {read_as})" in message, message
    assert not any(f"s3://b/{k} " in message for k in good), message
    assert message.endswith("; rename such objects, or write a pattern that leaves them out"), message
    _listing(stub, "c/", good + ["c/sub/", "c/e.jsonl.gz/f"])  # a key ending in / is no object: passed over
    assert expand("s3://b/c/*.jsonl", s3) == [f"s3://b/{k}" for k in sorted(good)]


def test_a_folder_call_the_server_refuses_names_the_object(stubbed):
    """botocore's errors name neither bucket nor key ('An error occurred (AccessDenied)
    when calling the PutObject operation: Access Denied'): a job's log did not say that
    its resume parts had failed, nor where. Each call's error names the object or the
    prefix it asked for, an OSError (retried, as botocore's errors were: core.failures)."""
    s3, stub = stubbed
    folder = ObjectFolder("s3://b/run/.resume/job", s3)
    stub.add_client_error("get_object", "AccessDenied", "Access Denied", 403)
    with pytest.raises(OSError, match=r"^cannot read s3://b/run/\.resume/job/manifest\.json: .*\(AccessDenied\)"):
        folder.read("manifest.json")
    stub.add_client_error("get_object", "NoSuchKey", "gone", 404)
    assert folder.read("part-000001.npy") is None  # no such part: none saved yet
    stub.add_client_error("put_object", "SlowDown", "Please reduce your request rate", 503)
    with pytest.raises(OSError, match=r"^cannot write s3://b/run/\.resume/job/part-000002\.npy: .*\(SlowDown\)"):
        folder.write("part-000002.npy", b"x")
    stub.add_client_error("list_objects_v2", "AccessDenied", "Access Denied", 403)
    with pytest.raises(OSError, match=r"^cannot list s3://b/run/\.resume/job/attempt-: .*\(AccessDenied\)"):
        folder.names("attempt-")
    # Removing never fails the job, whose outputs are written: the line names the prefix.
    stub.add_client_error("list_objects_v2", "AccessDenied", "Access Denied", 403)
    assert folder.remove() == ("cannot remove s3://b/run/.resume/job/: its listing failed (AccessDenied); "
                               "its objects stay in the bucket")
    _listed(stub, ["run/.resume/job/manifest.json"])
    stub.add_client_error("delete_objects", "AccessDenied", "Access Denied", 403)
    assert folder.remove().startswith("cannot remove s3://b/run/.resume/job/: 1 of 1 objects not deleted (AccessDenied")


def test_a_folder_whose_s3_settings_are_wrong_names_it_and_is_not_tried_again(monkeypatch):
    """botocore's config errors are ValueErrors, which a retry repeats: still one."""
    from shardflow.core.failures import deterministic

    monkeypatch.setenv("SNAKEMAKE_STORAGE_S3_REGION", "not a region!")
    with pytest.raises(ValueError, match=r"^cannot read s3://b/run/\.resume/job/manifest\.json: .*region") as raised:
        ObjectFolder("s3://b/run/.resume/job").read("manifest.json")
    assert deterministic(raised.value)


# ------------------------------------------------------- counting a stored file's lines


class _Streamed:
    """A client whose objects can only be streamed: a whole read (Body.read()) fails, as
    holding a queries file of gigabytes in the controller's memory would end the run.
    Its pieces are `piece` bytes whatever size is asked for (recorded in `asked`), to cut
    lines anywhere; `closed` counts the bodies closed."""

    def __init__(self, objects, piece):
        self.objects, self.piece, self.asked, self.closed = objects, piece, [], 0

    def get_object(self, Bucket, Key):
        from botocore.exceptions import ClientError

        if f"s3://{Bucket}/{Key}" not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "gone"}}, "GetObject")
        data, client = self.objects[f"s3://{Bucket}/{Key}"], self

        class Body:
            def read(self, *args):
                raise AssertionError("the whole object read into memory")

            def iter_chunks(self, chunk_size=1024):
                client.asked.append(chunk_size)
                for at in range(0, len(data), client.piece):
                    yield data[at : at + client.piece]

            def close(self):
                client.closed += 1

        return {"Body": Body(), "ContentLength": len(data)}


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1 << 22])
@pytest.mark.parametrize("text, lines", [(b'{"id": 1}\n{"id": 2}\n\n{"id": 4}\n', 4), (b'{"id": 1}\n{"id": 2}', 2),
                                         (b"\n", 1), (b"", 0), (b"x", 1)])
def test_a_stored_files_lines_are_counted_streaming_it_a_piece_at_a_time(tmp_path, monkeypatch, piece, text, lines):
    """A queries file's records (a record a line) were counted in a copy: the whole object
    read into memory (in the controller, which a queries file of gigabytes killed, ending
    the run) and written to disk (in the pod, beside the job's own files). Its lines are
    counted in pieces of 4 MiB, however a piece cuts them (a last line without its "\\n"
    counts too), and nothing is written."""
    from shardflow.core import parsecache
    from shardflow.core.s3 import count_lines

    monkeypatch.chdir(tmp_path)
    client = _Streamed({"s3://b/run/results/q/queries.jsonl": text}, piece)
    assert count_lines("s3://b/run/results/q/queries.jsonl", client, len(text)) == lines
    assert client.asked == [1 << 22] and client.closed == 1
    assert not os.path.exists(parsecache.FOLDER) and not any(tmp_path.iterdir())


def test_a_stored_file_of_other_bytes_than_the_jobs_or_none_is_not_counted(tmp_path, monkeypatch):
    """An object that is not the bytes the job gets (written again since) is no count,
    and is not read; nor is an object that is not there."""
    from shardflow.core.s3 import count_lines

    monkeypatch.chdir(tmp_path)
    client = _Streamed({"s3://b/q.jsonl": b"a\nb\n"}, 1)
    assert count_lines("s3://b/q.jsonl", client, 5) is None
    assert count_lines("s3://b/gone.jsonl", client, 4) is None
    assert client.asked == [] and client.closed == 1 and not any(tmp_path.iterdir())
