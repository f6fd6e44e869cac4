"""A stand-in for the Kubernetes API server. It is NOT a Kubernetes cluster.

No Kubernetes API server can be installed on the CI machines, yet the `eks` path
(snakemake-executor-plugin-kubernetes 0.5.1) must be run end to end. This module
serves, over plain HTTP on loopback, only the handful of endpoints that plugin calls:

    POST   /api/v1/namespaces/{ns}/secrets                create the run's secret
    DELETE /api/v1/namespaces/{ns}/secrets/{name}         ... and delete it at the end
    POST   /apis/batch/v1/namespaces/{ns}/jobs            submit one Snakemake job
    GET    /apis/batch/v1/namespaces/{ns}/jobs/{name}[/status]
    DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}
    GET    /api/v1/namespaces/{ns}/pods?labelSelector=job-name=...
    GET    /api/v1/namespaces/{ns}/pods/{name}/log
    DELETE /api/v1/namespaces/{ns}/pods/{name}

Anything else answers 404 and is listed in `unhandled`, so a test notices when a
newer plugin starts calling something new.

What a Job becomes: its single container's `command + args` runs as a local
subprocess (image ignored; no scheduling, no nodes, no taints, no GPUs), with the
container's `env` (values and `secretKeyRef`s resolved from the secrets received),
in a fresh temporary folder standing in for the `/workdir` emptyDir. The process's
exit code becomes the container's terminated state and the Job's succeeded/failed
count. Each received Job body is kept verbatim (`job_specs`, and one JSON file per
Job under `<root>/jobs/`) for assertions.

The job's environment does not inherit the test process's environment: PATH is
`<root>/bin` (see below), the directory of this Python interpreter (the host venv,
which plays the role of the container image's software), then /usr/bin:/bin.
Credentials therefore reach the job only through the Job spec and its secret.

The plugin's pods start with `pip install --target .snakemake/pip-deployments
snakemake-storage-plugin-s3 ...` (Snakemake's auto-deployment of storage plugins), which
needs a package index. `<root>/bin/pip` is a small shim: for `pip install --target`
whose requested distributions are all already installed in the host venv it logs the
call to `<root>/pip-calls.log` and exits 0; anything else is passed to the real pip.
(The production image makes the same step work offline with a wheelhouse; see
Dockerfile.)

Strict mode answers as a real API server does where the plugin is known to trip:
- a container resource outside cpu/memory/ephemeral-storage (e.g. `nvidia.com/gpu`)
  requested without an equal limit -> HTTP 422 on Job creation, with the API server's
  validation message;
- a log read with `previous=true` for a container that never restarted (always the
  case here: restartPolicy Never) -> HTTP 400, `previous terminated container ... not
  found`, as the kubelet reports it through the API server.
Without strict mode both are accepted (the log read returns the current log).

Fault injection: `fail_next_pod(rule)` makes the next Job that runs `rule` (as named
in its `--target-jobs`) fail the way an out-of-memory kill does: its container runs
until its log shows `when_log_has` (default: at once), then the whole process group
gets SIGKILL and the pod ends in phase Failed, exit code 137, reason OOMKilled (or the
code and reason given). Any container killed by a signal N reports 128 + N, as the
kubelet does. From a shell: `--fail-next-pod RULE`.

Use it in-process (`with KubernetesApiServerStandin(root, strict=True) as api:` then
point KUBECONFIG at `api.kubeconfig_path`) or from a shell:
    python -m tests.support.k8s_apiserver_standin --dir D [--strict] [--namespace NS]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

# Resources that Kubernetes lets a container overcommit (request < limit, or no limit).
# Everything else -- extended resources such as nvidia.com/gpu, hugepages -- needs a limit
# equal to its request (pkg/apis/core/validation: IsOvercommitAllowed).
OVERCOMMITTABLE = {"cpu", "memory", "ephemeral-storage"}
CONTAINER_NAME_IN_POD_LOG = "snakemake"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    """A metav1.Status body, as the API server sends with every error."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.body = _status(code, reason, message, details)
        self.code = code


@dataclass
class PodFault:
    """A failure to inject into the next pod of `rule` (see fail_next_pod)."""

    rule: str
    exit_code: int = 137
    reason: str = "OOMKilled"
    when_log_has: str | None = None


@dataclass
class JobRun:
    """One submitted Job and its single pod, backed by a local process."""

    name: str
    namespace: str
    uid: str
    body: dict
    pod_name: str
    pod_dir: Path
    created: str = field(default_factory=_now)
    started: str | None = None
    finished: str | None = None
    exit_code: int | None = None
    reason: str | None = None  # the container's terminated reason, when not the default
    process: subprocess.Popen | None = None
    fault: PodFault | None = None
    fault_fired: bool = False

    @property
    def container(self) -> dict:
        return self.body["spec"]["template"]["spec"]["containers"][0]

    @property
    def log_path(self) -> Path:
        return self.pod_dir / "container.log"


class KubernetesApiServerStandin:
    """The stand-in API server (see module docstring). Not a cluster."""

    def __init__(
        self,
        root: Path,
        *,
        strict: bool = False,
        namespaces: tuple[str, ...] = ("default",),
        job_timeout_s: float = 600,
    ):
        self.root = Path(root)
        self.strict = strict
        self.namespaces = set(namespaces)
        self.job_timeout_s = job_timeout_s
        self.token = secrets.token_hex(16)
        self.kubeconfig_path = self.root / "kubeconfig.yaml"
        # Everything below is guarded by self._lock.
        self._lock = threading.Lock()
        self.job_specs: list[dict] = []  # every Job body received, verbatim, in order
        self.secrets_received: list[dict] = []
        self.requests: list[tuple[str, str, dict, int]] = []  # (method, path, query, code)
        self.unhandled: list[tuple[str, str]] = []
        self._secrets: dict[tuple[str, str], dict] = {}
        self._jobs: dict[tuple[str, str], JobRun] = {}
        self._faults: list[PodFault] = []
        self.faults_injected: list[tuple[str, str]] = []  # (job name, rule) of each pod failed on purpose
        self._server: ThreadingHTTPServer | None = None

    # ---- lifecycle --------------------------------------------------------------------

    def start(self) -> KubernetesApiServerStandin:
        for sub in ("jobs", "pods", "bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._write_pip_shim()
        handler = type("Handler", (_Handler,), {"standin": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._write_kubeconfig()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            runs = list(self._jobs.values())
        for run in runs:
            _kill(run)

    def __enter__(self) -> KubernetesApiServerStandin:  # noqa: PYI034 (Python 3.10 has no Self)
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next_pod(
        self, rule: str, *, exit_code: int = 137, reason: str = "OOMKilled", when_log_has: str | None = None
    ) -> None:
        """Fail the next pod that runs `rule`: SIGKILL its container's process group once
        its log contains `when_log_has` (None: right after it starts), and report the pod
        Failed with `exit_code` and `reason` (default: what an out-of-memory kill shows).
        Each call fails one pod; later pods of the rule run normally."""
        with self._lock:
            self._faults.append(PodFault(rule, exit_code, reason, when_log_has))

    def running_jobs(self) -> list[str]:
        """Names of Jobs whose process is still running (orphans, after a run ended)."""
        with self._lock:
            return [r.name for r in self._jobs.values() if r.started and r.exit_code is None]

    def _write_kubeconfig(self) -> None:
        ns = min(self.namespaces)
        # JSON is valid YAML; kubernetes.config reads either.
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "standin", "context": {"cluster": "standin", "user": "standin", "namespace": ns}}
            ],
            "current-context": "standin",
        }
        self.kubeconfig_path.write_text(json.dumps(config, indent=2))

    def _write_pip_shim(self) -> None:
        shim = self.root / "bin" / "pip"
        shim.write_text(_PIP_SHIM.format(python=sys.executable, log=self.root / "pip-calls.log"))
        shim.chmod(0o755)

    # ---- API operations (called by the handler) ---------------------------------------

    def _check_namespace(self, ns: str) -> None:
        if ns not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')

    def create_secret(self, ns: str, body: dict) -> tuple[int, dict]:
        self._check_namespace(ns)
        name = body.get("metadata", {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", "Secret is invalid: metadata.name: Required value")
        with self._lock:
            if (ns, name) in self._secrets:
                raise ApiError(409, "AlreadyExists", f'secrets "{name}" already exists')
            body = json.loads(json.dumps(body))
            body.setdefault("metadata", {}).update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=_now())
            self._secrets[(ns, name)] = body
            self.secrets_received.append(body)
        return 201, body

    def delete_secret(self, ns: str, name: str) -> tuple[int, dict]:
        with self._lock:
            if self._secrets.pop((ns, name), None) is None:
                raise ApiError(404, "NotFound", f'secrets "{name}" not found')
        return 200, _status(200, "", "", {"name": name, "kind": "secrets"})

    def create_job(self, ns: str, body: dict) -> tuple[int, dict]:
        self._check_namespace(ns)
        name = body.get("metadata", {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", "Job.batch is invalid: metadata.name: Required value")
        containers = body.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
        if len(containers) != 1:
            raise ApiError(422, "Invalid", f'Job.batch "{name}" has {len(containers)} containers; the stand-in runs exactly one')
        with self._lock:
            self.job_specs.append(json.loads(json.dumps(body)))
        (self.root / "jobs" / f"{name}.json").write_text(json.dumps(body, indent=2, sort_keys=True))
        if self.strict:
            self._validate_resources(name, containers)
        with self._lock:
            if (ns, name) in self._jobs:
                raise ApiError(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            pod_name = f"{name}-{secrets.token_hex(3)[:5]}"
            run = JobRun(
                name=name,
                namespace=ns,
                uid=str(uuid.uuid4()),
                body=body,
                pod_name=pod_name,
                pod_dir=self.root / "pods" / pod_name,
            )
            rule = _target_rule(run.container)
            run.fault = next((f for f in self._faults if f.rule == rule), None)
            if run.fault is not None:
                self._faults.remove(run.fault)
            self._jobs[(ns, name)] = run
        self._launch(run)
        return 201, self._job_json(run)

    def _validate_resources(self, name: str, containers: list[dict]) -> None:
        causes = []
        for i, c in enumerate(containers):
            path = f"spec.template.spec.containers[{i}].resources"
            res = c.get("resources") or {}
            requests, limits = res.get("requests") or {}, res.get("limits") or {}
            for resource, quantity in requests.items():
                if resource in OVERCOMMITTABLE:
                    continue
                if resource not in limits:
                    causes.append((f"{path}.limits", "FieldValueRequired",
                                   "Required value: Limit must be set for non overcommitable resources"))
                elif str(limits[resource]) != str(quantity):
                    causes.append((f"{path}.requests[{resource}]", "FieldValueInvalid",
                                   f'Invalid value: "{quantity}": must be equal to {resource} limit of {limits[resource]}'))
        if causes:
            message = f'Job.batch "{name}" is invalid: ' + ", ".join(f"{f}: {m}" for f, _, m in causes)
            details = {
                "name": name,
                "group": "batch",
                "kind": "Job",
                "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
            }
            raise ApiError(422, "Invalid", message, details)

    def read_job(self, ns: str, name: str) -> tuple[int, dict]:
        return 200, self._job_json(self._get_job(ns, name))

    def delete_job(self, ns: str, name: str) -> tuple[int, dict]:
        with self._lock:
            run = self._jobs.pop((ns, name), None)
        if run is None:
            raise ApiError(404, "NotFound", f'jobs.batch "{name}" not found')
        _kill(run)
        return 200, _status(200, "", "", {"name": name, "group": "batch", "kind": "jobs", "uid": run.uid})

    def list_pods(self, ns: str, label_selector: str) -> tuple[int, dict]:
        self._check_namespace(ns)
        wanted = _parse_selector(label_selector)
        with self._lock:
            runs = [r for (n, _), r in self._jobs.items() if n == ns]
        items = [p for p in (self._pod_json(r) for r in runs) if _matches(p["metadata"]["labels"], wanted)]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}

    def delete_pod(self, ns: str, pod_name: str) -> tuple[int, dict]:
        # Deleting the pod stops its process; the Job keeps its final state (backoffLimit 0).
        run = self._get_pod(ns, pod_name)
        _kill(run)
        return 200, self._pod_json(run)

    def read_pod_log(self, ns: str, pod_name: str, query: dict) -> tuple[int, str]:
        run = self._get_pod(ns, pod_name)
        container = query.get("container", run.container["name"])
        if container != run.container["name"]:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {pod_name}")
        if self.strict and query.get("previous", "false").lower() == "true":
            # restartPolicy Never: there is never a previous container instance.
            raise ApiError(400, "BadRequest", f'previous terminated container "{container}" in pod "{pod_name}" not found')
        return 200, run.log_path.read_text(errors="replace") if run.log_path.exists() else ""

    def _get_job(self, ns: str, name: str) -> JobRun:
        with self._lock:
            run = self._jobs.get((ns, name))
        if run is None:
            raise ApiError(404, "NotFound", f'jobs.batch "{name}" not found')
        return run

    def _get_pod(self, ns: str, pod_name: str) -> JobRun:
        with self._lock:
            run = next((r for (n, _), r in self._jobs.items() if n == ns and r.pod_name == pod_name), None)
        if run is None:
            raise ApiError(404, "NotFound", f'pods "{pod_name}" not found')
        return run

    # ---- running a Job's container as a process ---------------------------------------

    def _resolve_env(self, run: JobRun) -> dict[str, str]:
        env = {
            "PATH": os.pathsep.join([str(self.root / "bin"), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
            "HOME": str(run.pod_dir / "home"),
            "TMPDIR": str(run.pod_dir / "tmp"),
            "LANG": "C.UTF-8",
        }
        for var in run.container.get("env") or []:
            if "value" in var and var["value"] is not None:
                env[var["name"]] = str(var["value"])
                continue
            ref = ((var.get("valueFrom") or {}).get("secretKeyRef")) or {}
            with self._lock:
                secret = self._secrets.get((run.namespace, ref.get("name")))
            if secret is None or ref.get("key") not in (secret.get("data") or {}):
                # A real kubelet leaves the pod in CreateContainerConfigError forever;
                # failing the job makes the problem visible instead of hanging the run.
                raise RuntimeError(f"env {var['name']}: secret {ref.get('name')!r} key {ref.get('key')!r} not found")
            env[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        return env

    def _launch(self, run: JobRun) -> None:
        workdir = run.pod_dir / "workdir"  # the container's working_dir, an emptyDir
        for d in (workdir, run.pod_dir / "home", run.pod_dir / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        container = run.container
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        with open(run.log_path, "wb") as log:
            try:
                env = self._resolve_env(run)
                run.process = subprocess.Popen(
                    argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )
            except (OSError, RuntimeError) as e:
                log.write(f"k8s-apiserver-standin: cannot start container: {e}\n".encode())
                run.started, run.finished, run.exit_code = _now(), _now(), 128
                return
        run.started = _now()
        if run.fault is not None:
            threading.Thread(target=self._inject, args=(run,), daemon=True).start()
        threading.Thread(target=self._reap, args=(run,), daemon=True).start()

    def _inject(self, run: JobRun) -> None:
        """The fault of fail_next_pod: SIGKILL the container (all its processes at once,
        as the kernel's OOM killer does to a cgroup) when its log shows the marker."""
        assert run.process is not None and run.fault is not None
        marker = run.fault.when_log_has
        deadline = time.monotonic() + self.job_timeout_s
        while marker and run.process.poll() is None and time.monotonic() < deadline:
            if marker in run.log_path.read_text(errors="replace"):
                break
            time.sleep(0.02)
        if run.process.poll() is not None:
            return  # ended before the marker: nothing to inject
        run.fault_fired = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signal.SIGKILL)
        with self._lock:
            self.faults_injected.append((run.name, run.fault.rule))

    def _reap(self, run: JobRun) -> None:
        assert run.process is not None
        try:
            code = run.process.wait(timeout=self.job_timeout_s)
        except subprocess.TimeoutExpired:
            _kill(run)
            code = run.process.wait()
        if code < 0:
            code = 128 - code  # killed by signal N: the kubelet reports 128 + N
        if run.fault_fired:
            assert run.fault is not None
            code, run.reason = run.fault.exit_code, run.fault.reason
        run.finished, run.exit_code = _now(), code

    # ---- JSON views -------------------------------------------------------------------

    def _labels(self, run: JobRun) -> dict:
        return {
            **(run.body.get("metadata", {}).get("labels") or {}),
            "job-name": run.name,
            "batch.kubernetes.io/job-name": run.name,
            "controller-uid": run.uid,
            "batch.kubernetes.io/controller-uid": run.uid,
        }

    def _job_json(self, run: JobRun) -> dict:
        status: dict = {"startTime": run.started} if run.started else {}
        if run.exit_code is None:
            status["active"] = 1
        elif run.exit_code == 0:
            status.update(succeeded=1, completionTime=run.finished,
                          conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": run.finished}])
        else:
            status.update(failed=1, conditions=[{
                "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit", "lastTransitionTime": run.finished}])
        meta = {**run.body.get("metadata", {}), "namespace": run.namespace, "uid": run.uid,
                "creationTimestamp": run.created, "labels": self._labels(run)}
        return {"kind": "Job", "apiVersion": "batch/v1", "metadata": meta, "spec": run.body.get("spec", {}), "status": status}

    def _pod_json(self, run: JobRun) -> dict:
        c = run.container
        if run.exit_code is None:
            phase, state, ready = "Running", {"running": {"startedAt": run.started}}, True
        else:
            phase = "Succeeded" if run.exit_code == 0 else "Failed"
            reason = run.reason or ("Completed" if run.exit_code == 0 else "Error")
            state = {"terminated": {"exitCode": run.exit_code, "reason": reason,
                                    "startedAt": run.started, "finishedAt": run.finished}}
            ready = False
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": run.pod_name, "namespace": run.namespace, "uid": run.uid, "labels": self._labels(run)},
            "spec": run.body["spec"]["template"].get("spec", {}),
            "status": {
                "phase": phase,
                "containerStatuses": [{
                    "name": c["name"], "image": c.get("image") or "", "imageID": "", "ready": ready,
                    "restartCount": 0, "started": run.exit_code is None, "state": state,
                }],
            },
        }


def _kill(run: JobRun, grace_s: float = 5) -> None:
    """Stop the container's whole process group, as the kubelet does: SIGTERM, a grace
    period, then SIGKILL. The group, not just /bin/sh: the shell's children (the
    job-mode Snakemake) outlive it, and Snakemake waits out running jobs on SIGTERM."""
    p = run.process
    if p is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(p.pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is left in the group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _target_rule(container: dict) -> str | None:
    """The rule a Snakemake Job runs: `--target-jobs 'embed:chunk=b'` -> 'embed'."""
    command = " ".join(list(container.get("command") or []) + list(container.get("args") or []))
    found = re.search(r"--target-jobs '?([A-Za-z_]\w*):", command)
    return found.group(1) if found else None


def _parse_selector(selector: str) -> dict[str, str]:
    wanted = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, sep, value = re.split(r"(==|=)", term, maxsplit=1) if "=" in term else (term, "", "")
        if not sep:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r} (only k=v selectors are implemented)")
        wanted[key.strip()] = value.strip()
    return wanted


def _matches(labels: dict, wanted: dict) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


_ROUTES = [
    ("POST", re.compile(r"^/api/v1/namespaces/([^/]+)/secrets$"), "create_secret"),
    ("DELETE", re.compile(r"^/api/v1/namespaces/([^/]+)/secrets/([^/]+)$"), "delete_secret"),
    ("POST", re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs$"), "create_job"),
    ("GET", re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+?)(?:/status)?$"), "read_job"),
    ("DELETE", re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)$"), "delete_job"),
    ("GET", re.compile(r"^/api/v1/namespaces/([^/]+)/pods$"), "list_pods"),
    ("GET", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$"), "read_pod_log"),
    ("DELETE", re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$"), "delete_pod"),
]


class _Handler(BaseHTTPRequestHandler):
    standin: KubernetesApiServerStandin  # set on the subclass made in start()
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep pytest output clean; requests are recorded
        pass

    def _dispatch(self, method: str) -> None:
        api = self.standin
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if self.headers.get("Authorization") != f"Bearer {api.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            for m, pattern, op in _ROUTES:  # noqa: B007 -- `op` is the route found, used after the loop
                match = pattern.match(url.path)
                if m == method and match:
                    break
            else:
                with api._lock:
                    api.unhandled.append((method, url.path))
                raise ApiError(404, "NotFound", f"the stand-in does not implement {method} {url.path}")
            args = list(match.groups())
            if op in ("create_secret", "create_job"):
                args.append(json.loads(raw or b"{}"))
            elif op == "list_pods":
                args.append(query.get("labelSelector", ""))
            elif op == "read_pod_log":
                args.append(query)
            code, payload = getattr(api, op)(*args)
        except ApiError as e:
            code, payload = e.code, e.body
        except Exception as e:  # noqa: BLE001 -- a stand-in bug must not look like a cluster answer
            code, payload = 500, _status(500, "InternalError", f"stand-in error: {e!r}")
        with api._lock:
            api.requests.append((method, url.path, query, code))
        if isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")


_PIP_SHIM = '''#!{python}
"""pip as seen by jobs of the Kubernetes API server stand-in (tests/support/k8s_apiserver_standin.py).

Snakemake's pods begin with `pip install --target .snakemake/pip-deployments <storage plugins>`.
Those distributions are already installed in this venv (which plays the container image), and
Snakemake only appends the target folder to sys.path, so the installed copies are the ones used.
When every requested distribution is installed, log the call and succeed without an index;
otherwise run the real pip.
"""
import importlib.metadata, os, re, sys

args = sys.argv[1:]
if args[:1] == ["install"] and any(a == "--target" or a.startswith("--target=") for a in args):
    names, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in ("--target", "-t"):
            skip = True
        elif not a.startswith("-"):
            names.append(re.split(r"[<>=!~;\\[ ]", a, maxsplit=1)[0])
    def installed(name):
        try:
            importlib.metadata.distribution(name)
            return True
        except importlib.metadata.PackageNotFoundError:
            return False
    if names and all(installed(n) for n in names):
        with open("{log}", "a") as f:
            f.write(" ".join(args) + "\\n")
        print("k8s-apiserver-standin pip shim: already installed, skipped:", " ".join(names))
        sys.exit(0)
os.execv(sys.executable, [sys.executable, "-m", "pip", *args])
'''


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the Kubernetes API server stand-in (not a cluster) until interrupted.")
    p.add_argument("--dir", type=Path, required=True, help="state folder; the kubeconfig is written here")
    p.add_argument("--strict", action="store_true", help="answer 422/400 where a real API server does")
    p.add_argument("--namespace", action="append", default=None, help="namespace(s) that exist (default: default)")
    p.add_argument("--fail-next-pod", action="append", default=[], metavar="RULE",
                   help="fail the next pod of RULE as an out-of-memory kill does (exit 137); repeatable")
    args = p.parse_args(argv)
    api = KubernetesApiServerStandin(args.dir, strict=args.strict, namespaces=tuple(args.namespace or ["default"]))
    for rule in args.fail_next_pod:
        api.fail_next_pod(rule)
    api.start()
    print(json.dumps({"url": api.url, "kubeconfig": str(api.kubeconfig_path), "strict": api.strict}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
