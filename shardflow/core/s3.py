"""S3 for the few things Snakemake storage does not cover: listing a glob of input
objects at parse time, keeping a job's resume parts in the run's bucket when no
shared volume outlives the job (EKS pods), and naming a stored file in records as the
workflow does (`logical_path`).

Settings mirror snakemake-storage-plugin-s3's (endpoint_url, region, access_key,
secret_key, token), taken from the workflow's `--storage-s3-*` values or, inside a
job, from the SNAKEMAKE_STORAGE_S3_* variables Snakemake passes to it; anything unset
falls back to boto3's own chain (AWS_PROFILE, AWS_ENDPOINT_URL, IRSA, ...).
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

SETTING_NAMES = ("endpoint_url", "region", "access_key", "secret_key", "token")
# Where a job finds its storage inputs and outputs: <provider>/<bucket>/<key> below it
# (Snakemake's --local-storage-prefix, default .snakemake/storage).
LOCAL_STORAGE = ".snakemake/storage"
# The run's --default-storage-prefix and the process's local storage prefix, which the
# workflow exports at parse time (in the controller and in each job's Snakemake) for
# the jobs' records (logical_path).
PREFIX_VARIABLE = "SHARDFLOW_STORAGE_PREFIX"
LOCAL_VARIABLE = "SHARDFLOW_LOCAL_STORAGE"
_MAGIC = re.compile(r"[*?[]")


@dataclass(frozen=True)
class S3Url:
    bucket: str
    key: str

    @classmethod
    def parse(cls, url: str) -> S3Url:
        if not url.startswith("s3://"):
            raise ValueError(f"not an s3:// URL: {url!r}")
        bucket, _, key = url[len("s3://") :].partition("/")
        if not bucket:
            raise ValueError(f"s3 URL without a bucket: {url!r}")
        return cls(bucket, key)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def join(self, *parts: str) -> S3Url:
        key = "/".join(p.strip("/") for p in (self.key, *parts) if p.strip("/"))
        return S3Url(self.bucket, key)


def settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    found = {n: env.get(f"SNAKEMAKE_STORAGE_S3_{n.upper()}") for n in SETTING_NAMES}
    return {k: v for k, v in found.items() if v}


def export_settings(settings: Mapping[str, Any], environ: dict | None = None) -> None:
    """Put settings into SNAKEMAKE_STORAGE_S3_* (unless set): a local job inherits them,
    as a pod gets them from the run's secret. Never pass them as params, which
    Snakemake records in .snakemake/metadata."""
    env = os.environ if environ is None else environ
    for name, value in settings.items():
        if value:
            env.setdefault(f"SNAKEMAKE_STORAGE_S3_{name.upper()}", str(value))


def client(
    settings: Mapping[str, Any] | None = None, *, attempts: int = 9, connect_timeout: float = 60,
    read_timeout: float = 60,
):
    """A boto3 S3 client with the storage plugin's settings (None: from the environment).

    Checksums only when required (as the storage plugin sets them): S3-compatible
    servers other than AWS store boto3's default trailing checksums in the object.
    `attempts` counts every try of a request, the first included; nine in standard
    mode ride out a storage server restart of a few seconds. A caller for whom the
    object is optional asks for one attempt and short timeouts."""
    import boto3
    from botocore.config import Config

    s = settings_from_env() if settings is None else {k: v for k, v in settings.items() if v}
    return boto3.client(
        "s3",
        endpoint_url=s.get("endpoint_url"),
        region_name=s.get("region"),
        aws_access_key_id=s.get("access_key"),
        aws_secret_access_key=s.get("secret_key"),
        aws_session_token=s.get("token"),
        config=Config(
            retries={"total_max_attempts": attempts, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def fetch(url: str, dest: str | os.PathLike, s3) -> bool:
    """Copy the object `url` to `dest` (written atomically); False, and `dest` removed,
    when there is no such object. Other errors (access, network) are raised."""
    from botocore.exceptions import ClientError

    from shardflow.core.atomic import atomic_write_bytes

    u = S3Url.parse(url)
    try:
        body = s3.get_object(Bucket=u.bucket, Key=u.key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
            raise
        with contextlib.suppress(FileNotFoundError):
            os.remove(dest)
        return False
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    atomic_write_bytes(dest, body)
    return True


# A piece of an object that count_lines holds at a time.
COUNT_PIECE = 1 << 22


def count_lines(url: str, s3, expected_bytes: int) -> int | None:
    """The lines of the object `url` (a last one without its "\n" too), streamed a
    piece of COUNT_PIECE bytes at a time: none kept, nothing written (a queries file of
    gigabytes, read whole, held them in the controller's memory, and a copy took the pod's
    disk beside the job's files). None, and no byte of it read, when there is no such
    object or it is not `expected_bytes` long (not the bytes the job gets). Other errors
    (access, network) are raised."""
    from botocore.exceptions import ClientError

    u = S3Url.parse(url)
    try:
        answer = s3.get_object(Bucket=u.bucket, Key=u.key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
            raise
        return None
    with contextlib.closing(answer["Body"]) as body:
        # The size is the answer's header, there before its body (a HEAD is one more request).
        if answer["ContentLength"] != expected_bytes:
            return None
        lines, last = 0, b"\n"
        for piece in body.iter_chunks(COUNT_PIECE):
            lines += piece.count(b"\n")
            last = piece[-1:]
    return lines + (last != b"\n")


# ------------------------------------------------------------------------- globs


def stored_prefix(prefix: str) -> str:
    """A storage prefix (`<scheme>://<bucket>/<key>`) as the storage plugin reads its key
    (snakemake-storage-plugin-s3 0.3.6: posixpath.normpath), without a trailing slash:
    `s3://bkt/runs//a/` is where `s3://bkt/runs/a` is."""
    scheme, _, stem = prefix.partition("://")
    return f"{scheme}://{posixpath.normpath(stem)}"


def stored_url(url: str) -> str:
    """The object URL Snakemake storage reads for `url` (snakemake-storage-plugin-s3
    0.3.6): the URL's path as urllib.parse.urlparse gives it, which a `#` or `?` ends,
    normalised as a prefix is (stored_prefix): `s3://b/c/a#1.jsonl` is read as
    `s3://b/c/a`, `s3://b/c//a.jsonl` as `s3://b/c/a.jsonl`."""
    parsed = urlparse(url)
    return stored_prefix(f"{parsed.scheme}://{parsed.netloc}{parsed.path}")


def logical_path(path: str | os.PathLike, default_prefix: str | None = None, local_root: str | None = None) -> str:
    """A file as the workflow names it. A job sees each file in Snakemake storage as a
    local copy, `<local_root>/<provider>/<bucket>/<key>` (local_root: Snakemake's local
    storage prefix, default $SHARDFLOW_LOCAL_STORAGE, else .snakemake/storage): under the
    run's default storage prefix (`--default-storage-prefix`, the eks profile's bucket
    and folder; default $SHARDFLOW_STORAGE_PREFIX) that is the workflow's own path
    (`results/x/provenance.json`), elsewhere the object's URL (`s3://corpora/c.jsonl`).
    Any other path is returned as given. The jobs' records (manifests, stats, record
    ids from positions, shard metadata, provenance) name files this way, so that an S3
    run's records are a local run's bytes."""
    text = os.fspath(path)
    if default_prefix is None:
        default_prefix = os.environ.get(PREFIX_VARIABLE)
    if local_root is None:
        local_root = os.environ.get(LOCAL_VARIABLE) or LOCAL_STORAGE
    head, marker, rest = text.partition(local_root.rstrip("/") + "/")
    if not marker or (head and not head.endswith("/")) or not rest:
        return text
    provider, _, key = rest.partition("/")
    url = f"{provider}://{key}"
    if default_prefix:
        root = stored_prefix(default_prefix) + "/"
        if url.startswith(root):
            return url[len(root):]
    return url


def stored_place(path: str | os.PathLike) -> str:
    """Where a file is kept, which no other run shares: a job's copy of a file in
    Snakemake storage as its object's URL (`s3://bucket/prefix/results/...`, whatever the
    pod's working directory), any other path made absolute (the same `results/...` of
    two working directories differs)."""
    place = logical_path(path, default_prefix="")
    return place if "://" in place else os.path.abspath(place)


def fresh_folder_checks() -> None:
    """Make snakemake-storage-plugin-s3 (0.3.6) look again whether a folder exists.

    Its storage object remembers the first answer to "is this a folder?" (any key below
    it?). Snakemake asks before a job runs, when a folder output (directory()) does not
    exist yet; when a pod then uploads the folder, the run's Snakemake still takes it for
    missing ("Waiting at most 5 seconds for missing files: ... (missing in storage)")
    and the run fails, though every file is in the bucket. (A local job stores the folder
    through the same object, which corrects the answer.) Here a remembered "no" is
    forgotten whenever existence is asked again: one more listing per check of a missing
    object, none for an object that exists. The workflow calls this when S3 is its default
    storage; calling it again changes nothing."""
    from snakemake_storage_plugin_s3 import StorageObject

    if getattr(StorageObject.exists, "asks_again", False):
        return
    remembered = StorageObject.exists

    def exists(self) -> bool:
        if getattr(self, "_is_dir", None) is False:
            self._is_dir = None
        return remembered(self)

    exists.asks_again = True
    StorageObject.exists = exists


def has_magic(url: str) -> bool:
    return bool(_MAGIC.search(S3Url.parse(url).key))


def glob_regex(pattern: str) -> re.Pattern:
    """Key pattern -> regex, with glob.glob(recursive=True)'s meaning: `*`, `?` and
    `[...]` stay within one path segment, a segment `**` matches any number of folders
    (`**/`) or, last, any names below (elsewhere `**` is `*`). A wildcard matches no
    name that starts with `.`, as a local glob passes over hidden files and folders
    (macOS's `._c.jsonl` copied beside `c.jsonl`, a tool's `.c.jsonl.part`), unless its
    segment starts with `.` too: a folder read from S3 gives the files it gives locally."""
    segments = pattern.split("/")
    out = []
    for n, segment in enumerate(segments):
        last = n == len(segments) - 1
        if segment == "**":
            out.append(r"(?:(?!\.)[^/]*/)*" + (r"(?!\.)[^/]*" if last else ""))
        else:
            out.append(("" if segment.startswith(".") else r"(?!\.)") + _segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z")


def _segment_regex(segment: str) -> str:
    """One path segment of a glob (no `/`) -> regex."""
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = segment.find("]", i + 2)
            if end < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = segment[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"[{body}]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def list_objects(s3, bucket: str, prefix: str) -> Iterator[dict]:
    """The listing entries (Key, ETag, Size, ...) of every object under `prefix`."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", ())


def list_keys(s3, bucket: str, prefix: str) -> list[str]:
    return [obj["Key"] for obj in list_objects(s3, bucket, prefix)]


def list_folder(url: str, s3) -> dict[str, str]:
    """Every object below an s3:// folder: its URL -> its ETag (which changes with its
    bytes). An unreadable listing is an OSError naming the folder."""
    folder = S3Url.parse(url.rstrip("/") + "/")
    try:
        return {
            f"s3://{folder.bucket}/{obj['Key']}": obj.get("ETag", "").strip('"')
            for obj in list_objects(s3, folder.bucket, folder.key)
            if not obj["Key"].endswith("/")
        }
    except Exception as exc:  # botocore's errors: name the folder the user wrote
        raise OSError(f"cannot list {url}: {exc}") from exc


def expand(url: str, s3) -> list[str]:
    """An s3:// URL or glob -> the matching object URLs, sorted (one listing per call).
    A plain URL is returned as is (Snakemake storage checks it exists). A matched object
    that Snakemake storage would not fetch as itself (_read_as_other) is a ValueError
    naming each such object."""
    parsed = S3Url.parse(url)
    match = _MAGIC.search(parsed.key)
    if not match:
        return [url]
    prefix = parsed.key[: match.start()]
    regex = glob_regex(parsed.key)
    try:
        keys = list_keys(s3, parsed.bucket, prefix)
    except Exception as exc:  # botocore's errors: name the pattern the user wrote
        raise OSError(f"cannot list {url}: {exc}") from exc
    found = sorted(k for k in keys if regex.match(k) and not k.endswith("/"))
    if not found:
        raise FileNotFoundError(f"input pattern {url!r} matches no object")
    odd = _read_as_other(parsed.bucket, found, keys)
    if odd:
        shown = [f"s3://{parsed.bucket}/{k} (read as {what})" for k, what in odd.items()]
        raise ValueError(
            f"input pattern {url!r} matches {len(odd)} object{'s' if len(odd) > 1 else ''} that Snakemake storage "
            f"would not read as {'they are' if len(odd) > 1 else 'it is'} (snakemake-storage-plugin-s3 takes the key "
            "from the URL's path, which a '#' or '?' ends, normalises '//', '.' and '..' away, and fetches a key that "
            f"other keys lie below as a folder): {', '.join(shown[:10])}"
            + (f" and {len(shown) - 10} more" if len(shown) > 10 else "")
            + "; rename such objects, or write a pattern that leaves them out"
        )
    return [f"s3://{parsed.bucket}/{k}" for k in found]


def _read_as_other(bucket: str, found: list[str], keys: list[str]) -> dict[str, str]:
    """Of the keys `found` (among all the listed `keys`), those whose URL Snakemake
    storage would not fetch as that object -> what it would read instead: another key
    (stored_url), or a folder, where other keys lie below it. Handed on, such an object
    was a missing input, another object's records (read twice, where it is among the
    inputs too), or a folder the reader cannot open."""
    folders: set[str] = set()  # the keys' folders, each added with those above it once
    for k in keys:
        i = -1 if k.endswith("/") else k.rfind("/")  # a key ending in / is no object (the plugin passes over it)
        while i > 0 and k[:i] not in folders:
            folders.add(k[:i])
            i = k.rfind("/", 0, i)
    odd = {}
    for key in found:
        url = f"s3://{bucket}/{key}"
        # stored_url only where it may differ (a glob of a million keys: 4 s less at every parse)
        maybe = "#" in key or "?" in key or "//" in f"/{key}" or "/." in f"/{key}"
        if maybe and stored_url(url) != url:
            odd[key] = f"the object {stored_url(url)}"
        elif key in folders:
            odd[key] = "a folder: keys lie below it"
    return odd


# ----------------------------------------------------------------- object folder


class ObjectFolder:
    """A 'folder' of objects under one prefix: the resume parts of a job. A PUT is
    atomic in S3 (an object is there whole or not at all), so no temp names.

    Its URL is read as the storage plugin reads the run's prefix (stored_prefix): the
    parts are under the run's outputs, where make status looks (workflow.mirror),
    whatever slashes the eks profile's `s3://<bucket>/<SHARDFLOW_S3_PREFIX>` holds, and
    every call names the same keys (a leading `//` was stripped for writes alone)."""

    def __init__(self, url: str, s3=None):
        S3Url.parse(url)  # an s3:// URL with a bucket, else the ValueError naming it
        self.url = S3Url.parse(stored_prefix(url))
        self._s3 = s3

    @property
    def s3(self):
        if self._s3 is None:
            self._s3 = client()
        return self._s3

    def __str__(self) -> str:
        return str(self.url)

    def _key(self, name: str) -> str:
        return self.url.join(name).key

    def read(self, name: str) -> bytes | None:
        with _naming("read", self.url.join(name)):
            try:
                return self.s3.get_object(Bucket=self.url.bucket, Key=self._key(name))["Body"].read()
            except self.s3.exceptions.NoSuchKey:
                return None

    def write(self, name: str, data: bytes) -> None:
        with _naming("write", self.url.join(name)):
            self.s3.put_object(Bucket=self.url.bucket, Key=self._key(name), Body=data)

    def names(self, prefix: str) -> list[str]:
        """The names (after the folder's prefix) of its objects that start with `prefix`."""
        folder = self.url.key.rstrip("/") + "/"
        with _naming("list", f"s3://{self.url.bucket}/{folder}{prefix}"):
            return sorted(k[len(folder):] for k in list_keys(self.s3, self.url.bucket, folder + prefix))

    def folders(self) -> list[str]:
        """The names of the folders directly below this one (one listing with a delimiter:
        the keys below them are not listed)."""
        folder = self.url.key.rstrip("/") + "/"
        names: list[str] = []
        with _naming("list", f"s3://{self.url.bucket}/{folder}"):
            pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.url.bucket, Prefix=folder, Delimiter="/")
            for page in pages:
                names += [p["Prefix"][len(folder):].rstrip("/") for p in page.get("CommonPrefixes", ())]
        return sorted(names)

    def remove(self) -> str | None:
        """Delete every object of the folder; return None, or (and log as a warning) a line
        naming each key the server would not delete with its error code, once every key
        was tried (or the listing's error, where the folder could not be listed). It does
        not fail the job: its outputs are written by then, and parts left behind only cost
        storage (a folder is named by everything that decides its parts, so no other job
        reads them as its own)."""
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = self.url.key.rstrip("/") + "/"
        try:
            keys = list_keys(self.s3, self.url.bucket, prefix)
        except (BotoCoreError, ClientError) as exc:  # once the client's retries are spent
            line = (f"cannot remove s3://{self.url.bucket}/{prefix}: its listing failed ({_error_code(exc)}); "
                    "its objects stay in the bucket")
            log.warning(line)
            return line
        left = delete_keys(self.s3, self.url.bucket, keys)
        if not left:
            return None
        line = (f"cannot remove s3://{self.url.bucket}/{prefix}: {len(left)} of {len(keys)} objects "
                f"not deleted ({_by_code(left)}); they stay in the bucket")
        log.warning(line)
        return line


@contextlib.contextmanager
def _naming(doing: str, url: S3Url | str) -> Iterator[None]:
    """A botocore error of the block as one naming the object or prefix asked for:
    botocore's own names neither ('An error occurred (AccessDenied) when calling the
    PutObject operation: Access Denied'). An OSError, retried as botocore's errors are
    (core.failures); a ValueError where botocore's is one (InvalidRegionError: a config
    error, which a retry repeats)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError) as exc:
        raise (ValueError if isinstance(exc, ValueError) else OSError)(f"cannot {doing} {url}: {exc}") from exc


# DeleteObjects answers 200 with an Errors list for the keys it did not delete (each
# key is authorised on its own). These codes are the server's passing trouble, worth
# asking again (AWS lists them as retryable); any other (AccessDenied, ...) stays.
TRANSIENT_DELETE_ERRORS = frozenset({"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout"})


def delete_keys(s3, bucket: str, keys: list[str], *, attempts: int = 4, pause_s: float = 1.0) -> dict[str, str]:
    """Delete `keys` (1,000 a request, the most DeleteObjects takes); return the keys
    not deleted -> their error code (a request that failed whole: each of its keys, with
    the request's code; the other requests are still made). A key whose error is
    transient is asked again, `attempts` times in all, with pauses doubling from `pause_s`."""
    from botocore.exceptions import BotoCoreError, ClientError

    todo, left = list(keys), {}
    for attempt in range(1, attempts + 1):
        errors = {}
        for start in range(0, len(todo), 1000):
            batch = [{"Key": k} for k in todo[start : start + 1000]]
            try:
                answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
            except (BotoCoreError, ClientError) as exc:  # the request failed whole: each key left with its code
                errors.update({k["Key"]: _error_code(exc) for k in batch})
                continue
            errors.update({e["Key"]: e.get("Code", "unknown error") for e in answer.get("Errors", ())})
        todo = [k for k, code in errors.items() if code in TRANSIENT_DELETE_ERRORS and attempt < attempts]
        left.update({k: code for k, code in errors.items() if k not in todo})
        if not todo:
            return left
        time.sleep(pause_s * 2 ** (attempt - 1))
    return left


def _error_code(exc: Exception) -> str:
    """The S3 error code of a failed request (`AccessDenied`, `SlowDown`), else the
    error's class (`EndpointConnectionError`: no answer at all)."""
    code = getattr(exc, "response", {}).get("Error", {}).get("Code")
    return code or type(exc).__name__


def _by_code(failed: Mapping[str, str], shown: int = 10) -> str:
    """'AccessDenied: a, b; InternalError: c' (at most `shown` keys a code, then a count)."""
    codes: dict[str, list[str]] = {}
    for key, code in sorted(failed.items()):
        codes.setdefault(code, []).append(key)
    return "; ".join(
        f"{code}: {', '.join(keys[:shown])}" + (f" and {len(keys) - shown} more" if len(keys) > shown else "")
        for code, keys in sorted(codes.items())
    )
