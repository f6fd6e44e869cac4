"""What `make status` reads of a run whose files are in S3 (the eks profile: S3 as the
default storage), copied into a local folder that status then reads as a working
directory.

Under default storage, Snakemake keeps each output, log and benchmark at its path below
the storage prefix, and the embed and summarise jobs keep their resume parts there too
(`results/<dataset>/.resume/`, core.parts). Status reads few of those bytes (module
shardflow.workflow.status), so each object under the prefix becomes a file at its path
below the prefix, with the object's LastModified as its mtime, holding

- its bytes, for the kinds of file status reads: JSON (stats, failure and attempt
  records, manifests, metrics; at most JSON_BYTES), benchmarks (`.tsv`, at most
  WHOLE_BYTES) and logs (`.log`) of at most LOG_SCAN (core.runlog);
- its last LOG_SCAN bytes, for a longer log: as much as status reads back of a local log
  for its failed line (status.log_error), so a failed line followed by a long traceback
  (every rank's, under torchrun) is found here as it is in a local log. A copy made
  before (a log over 1 MiB kept its last 64 KiB, and a failed line further back was not
  seen) is fetched again: the index keeps the kind of copy, and TAIL names its length;
- no bytes otherwise (outputs, chunks, parts, ids, whatever their size): a sparse file of
  the object's size, for status only checks that such a file exists, and how big and how
  old it is. A run of thousands of chunks costs a GET per record, not per output.

The copy is kept between calls (`default_folder`), with each object's ETag in INDEX: a later call fetches
only the objects that are new or changed and removes the files of objects that are
gone, so `watch make status` costs one listing of the prefix and what changed.

A job's log reaches the bucket when the job ends (Snakemake stores outputs and logs then;
a failed job's pod stores its log alone), and never where the pod was killed (out of
memory, evicted, its node lost): from here a job shows as running only once it has
opened its resume folder in the bucket, and one with none there (train, whose
checkpoints are local; parts on a gpu_jobs.resume_dir volume) as waiting. No failure
record is in the bucket (shardflow.workflow.status names it from the job's log).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from shardflow.core import s3 as s3lib
from shardflow.core.atomic import atomic_open, write_json
from shardflow.core.runlog import LOG_SCAN

WHOLE_BYTES = 1 << 20
JSON_BYTES = 64 << 20
FETCH_BLOCK = 1 << 20  # an object's bytes are written as they come, this much at a time
INDEX = ".shardflow-mirror.json"  # {relative path: [etag, size, how]}, in the copy's folder
FETCHERS = 16  # objects fetched at once
NAME_MAX = 200  # the longest name of a copy's folder
# A call to the server: tries and seconds. Status is watched (`watch make status`): a
# server that does not answer is an error within a minute, not the 9 tries of 60 s each
# of core.s3.client's defaults (the jobs', which ride out a server restart).
ATTEMPTS, CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 3, 10, 15
# The kind of copy, as INDEX keeps it: a tail's names its length, so copies of another
# length (64 KiB, before LOG_SCAN was shared with status) are fetched again.
WHOLE, TAIL, SIZED = "whole", f"tail {LOG_SCAN}", "sized"
# Where status finds S3 credentials, as the run's Snakemake does: named in the error a
# laptop without them gets (botocore's own names none, or only the one it missed).
CREDENTIALS = (
    "SNAKEMAKE_STORAGE_S3_ACCESS_KEY and SNAKEMAKE_STORAGE_S3_SECRET_KEY (the storage plugin's settings), else "
    "boto3's own chain: AWS_PROFILE (after `aws sso login` for an SSO profile), or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN for temporary keys)"
)
# botocore's names of the keys given to the client: the storage plugin's settings here.
_GIVEN = {
    "aws_access_key_id": "SNAKEMAKE_STORAGE_S3_ACCESS_KEY",
    "aws_secret_access_key": "SNAKEMAKE_STORAGE_S3_SECRET_KEY",
}


@dataclass
class Mirrored:
    """What a call did: the storage prefix, the folder of its copy, objects listed, and
    how many it fetched (whole or a log's tail), sized (no bytes), and removed."""

    prefix: str
    folder: Path
    objects: int = 0
    fetched: int = 0
    sized: int = 0
    removed: int = 0

    def note(self) -> str:
        """What status says of the copy it read."""
        if not self.objects:
            return (
                f"nothing under {self.prefix}: no run has stored a file there yet, or that is not the run's "
                "--default-storage-prefix (its SHARDFLOW_S3_BUCKET/SHARDFLOW_S3_PREFIX with the eks profile); every "
                "job is shown as waiting"
            )
        return (
            f"read from {self.prefix} through a local copy in {self.folder}: {self.objects} objects, {self.fetched} "
            f"fetched now and {self.sized} stood in for by their size (outputs and parts, whose bytes status does not "
            f"read), the rest unchanged since the last status{f', {self.removed} gone' if self.removed else ''}. "
            "A job's log reaches the bucket when the job ends, failed or not, and never where its pod was killed (out "
            "of memory, evicted, its node lost): until then a job shows from its resume parts (stalled once they stop "
            "coming), and as waiting where it has none there (train, or gpu_jobs.resume_dir on a volume); the paths "
            "below are relative to that prefix"
        )


@contextlib.contextmanager
def working_copy(prefix: str) -> Iterator[Mirrored]:
    """The copy of `prefix` brought up to date (`mirror`, in `default_folder`), as the
    working directory for the block: the run's relative paths, as its jobs wrote them
    below the prefix. A first call that fails (a wrong bucket, no access) leaves no
    copy behind."""
    folder = default_folder(prefix)
    fresh = not folder.exists()
    try:
        copied = mirror(prefix, folder)
    except BaseException:
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield copied
    finally:
        os.chdir(here)


def how(path: str, size: int) -> str:
    """What the copy of the object at `path` (relative to the prefix) holds: WHOLE, TAIL
    (a log's last LOG_SCAN bytes) or SIZED (no bytes, the object's size)."""
    if path.endswith(".log"):
        return WHOLE if size <= LOG_SCAN else TAIL
    if (path.endswith(".json") and size <= JSON_BYTES) or (path.endswith(".tsv") and size <= WHOLE_BYTES):
        return WHOLE
    return SIZED


def storage_url(prefix: str) -> s3lib.S3Url:
    """`prefix` as the storage plugin reads its key (core.s3.stored_prefix)."""
    s3lib.S3Url.parse(prefix)  # an s3:// URL with a bucket, else the ValueError naming it
    return s3lib.S3Url.parse(s3lib.stored_prefix(prefix))


def default_folder(prefix: str, root: str | os.PathLike = ".snakemake") -> Path:
    """Where the copy of `prefix` is kept: below `root`, one folder per prefix named by
    its URL, quoted (the copy of a bucket's root never holds those of its prefixes)."""
    url = storage_url(prefix)
    name = quote(f"s3://{url.bucket}/{url.key.strip('/')}".rstrip("/"), safe="")
    if len(name) > NAME_MAX:  # a file name holds 255 bytes: a long prefix keeps its head and a digest
        name = f"{name[: NAME_MAX - 17]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return Path(root) / "shardflow-status" / name


def _relative(key: str, base: str) -> str | None:
    """The object's path below the prefix; None for a key that cannot be a file here
    (a folder marker, an absolute or upward path)."""
    rel = key[len(base) :]
    parts = rel.split("/")
    if not rel or rel.endswith("/") or rel == INDEX or any(p in ("", ".", "..") for p in parts):
        return None
    return rel


def credentials_error(where: str, exc: Exception) -> OSError:
    """The one error of a call without S3 credentials, or with half of them (botocore's
    NoCredentialsError, PartialCredentialsError), naming where they are looked for."""
    missing = getattr(exc, "kwargs", {}).get("cred_var")
    if missing is None:
        why = "no S3 credentials found"
    elif getattr(exc, "kwargs", {}).get("provider") == "explicit" and missing in _GIVEN:
        given = next(v for k, v in _GIVEN.items() if k != missing)
        why = f"incomplete S3 credentials ({given} is set, {_GIVEN[missing]} is not)"
    else:
        why = f"incomplete S3 credentials ({exc})"
    return OSError(f"cannot read {where}: {why}; status reads the bucket with {CREDENTIALS}")


def mirror(prefix: str, folder: str | os.PathLike, client=None) -> Mirrored:
    """Bring the copy of the objects under `prefix` (s3://bucket/key) in `folder` up to
    date (see the module's docstring); `client`: a boto3 S3 client (default:
    core.s3.client() with ATTEMPTS and the timeouts above, the storage plugin's
    settings from SNAKEMAKE_STORAGE_S3_*, else boto3's own chain). A listing or fetch
    that fails is an OSError naming the prefix or the object and the server's error."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

    url = storage_url(prefix)
    base = url.key + "/" if url.key else ""
    where = f"s3://{url.bucket}/{base}"
    try:
        s3 = (
            client
            if client is not None
            else s3lib.client(attempts=ATTEMPTS, connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S)
        )
    except PartialCredentialsError as exc:  # a key without its secret: raised as the client is made
        raise credentials_error(where, exc) from None
    except ValueError as exc:  # botocore's "Invalid endpoint: ..."
        raise OSError(
            f"cannot read {where}: {exc} (the S3 settings: SNAKEMAKE_STORAGE_S3_ENDPOINT_URL and the others, or "
            "AWS_ENDPOINT_URL and boto3's own chain)"
        ) from None
    out = Mirrored(prefix=where, folder=Path(folder))
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    index_path = root / INDEX
    try:
        index = json.loads(index_path.read_text()) if index_path.is_file() else {}
        index = index if isinstance(index, dict) else {}
    except (OSError, ValueError):
        index = {}  # a damaged index: every object fetched again
    try:
        listing = list(s3lib.list_objects(s3, url.bucket, base))
    except (NoCredentialsError, PartialCredentialsError) as exc:  # none at all: raised as the listing is signed
        raise credentials_error(where, exc) from None
    except (BotoCoreError, ClientError) as exc:
        raise OSError(f"cannot list {where}: {exc}") from None

    todo, now = [], {}
    for obj in listing:
        rel = _relative(obj["Key"], base)
        if rel is None:
            continue
        out.objects += 1
        size, etag = int(obj["Size"]), str(obj.get("ETag", ""))
        mode = how(rel, size)
        now[rel] = [etag, size, mode]
        if index.get(rel) != now[rel] or not (root / rel).is_file():
            todo.append((rel, obj, mode))

    def copy(item) -> bool:
        """Whether the object was copied: False where it is gone since the listing (a job
        that ended meanwhile removed its resume folder)."""
        rel, obj, mode = item
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if mode == SIZED:
            dest.unlink(missing_ok=True)
            with open(dest, "wb") as fh:
                fh.truncate(int(obj["Size"]))  # sparse: the size, no bytes on disk
        else:
            extra = {"Range": f"bytes=-{LOG_SCAN}"} if mode == TAIL else {}
            try:
                body = s3.get_object(Bucket=url.bucket, Key=obj["Key"], **extra)["Body"]
                # Written as it comes: FETCHERS logs of LOG_SCAN each are not held in memory at once.
                with atomic_open(dest, "wb") as fh:
                    shutil.copyfileobj(body, fh, FETCH_BLOCK)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return False
                raise OSError(f"cannot read s3://{url.bucket}/{obj['Key']}: {exc}") from None
            except BotoCoreError as exc:
                raise OSError(f"cannot read s3://{url.bucket}/{obj['Key']}: {exc}") from None
        stamp = obj["LastModified"].timestamp()
        os.utime(dest, (stamp, stamp))
        return True

    with concurrent.futures.ThreadPoolExecutor(FETCHERS, thread_name_prefix="shardflow-mirror") as pool:
        for item, copied in zip(todo, pool.map(copy, todo), strict=True):
            if not copied:  # gone since the listing: as if not listed (its old copy removed below)
                out.objects -= 1
                del now[item[0]]
            elif item[2] == SIZED:
                out.sized += 1
            else:
                out.fetched += 1

    for rel in sorted(set(index) - set(now)):  # objects gone since the last call
        if not isinstance(rel, str) or _relative(base + rel, base) is None:
            continue  # a damaged index: never a path outside the copy
        gone = root / rel
        gone.unlink(missing_ok=True)
        out.removed += 1
        for parent in gone.parents:  # and the folders they leave empty (a finished job's resume folder)
            if parent == root or not parent.is_relative_to(root) or any(parent.iterdir()):
                break
            parent.rmdir()
    write_json(index_path, now)
    return out
