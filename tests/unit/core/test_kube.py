"""kube: a failed pod's log is readable the way the Kubernetes plugin asks for it, against
the API server stand-in in strict mode (which answers a previous=true read of a container
that never restarted with 400, as a real API server does)."""

from __future__ import annotations

import time

import pytest

kubernetes = pytest.importorskip("kubernetes")

from kubernetes.client import BatchV1Api, CoreV1Api  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from shardflow.core import kube  # noqa: E402
from tests.support.k8s_apiserver_standin import KubernetesApiServerStandin  # noqa: E402

NS = "ns"


def failed_pod(api: KubernetesApiServerStandin) -> str:
    """The name of the pod of a Job whose container printed a line and exited 3."""
    kubernetes.config.load_kube_config(str(api.kubeconfig_path))
    container = {"name": "snakemake", "image": "none", "command": ["sh", "-c", "echo the job failed; exit 3"]}
    job = {
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }
    BatchV1Api().create_namespaced_job(NS, job)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = BatchV1Api().read_namespaced_job_status("j", NS).status
        if status.failed:
            return CoreV1Api().list_namespaced_pod(NS, label_selector="job-name=j").items[0].metadata.name
        time.sleep(0.1)
    raise AssertionError("the stand-in's Job did not fail")


def test_a_failed_containers_log_read_with_previous_falls_back_to_its_current_log(tmp_path, monkeypatch):
    monkeypatch.setattr(CoreV1Api, "read_namespaced_pod_log", CoreV1Api.read_namespaced_pod_log)  # undone after
    with KubernetesApiServerStandin(tmp_path / "k8s", strict=True, namespaces=(NS,)) as api:
        pod = failed_pod(api)
        with pytest.raises(ApiException) as refused:  # the plugin's read, as the API server answers it
            CoreV1Api().read_namespaced_pod_log(pod, NS, container="snakemake", previous=True)
        assert refused.value.status == 400 and "previous terminated container" in refused.value.body

        assert kube.failed_pod_logs_readable() and kube.failed_pod_logs_readable()  # twice: patched once
        log = CoreV1Api().read_namespaced_pod_log(pod, NS, container="snakemake", previous=True)
        assert "the job failed" in log
        # A pod gone (its node with it): a line saying so, not an error that ends the run.
        gone = CoreV1Api().read_namespaced_pod_log("no-such-pod", NS, previous=True)
        assert gone.startswith("(shardflow: the log of pod no-such-pod could not be read: 404")
        with pytest.raises(ApiException) as missing:  # a read without previous is the API server's
            CoreV1Api().read_namespaced_pod_log("no-such-pod", NS)
        assert missing.value.status == 404
    reads = [(p.rsplit("/", 2)[-2], q.get("previous", "").lower()) for _, p, q, _ in api.requests if p.endswith("/log")]
    assert reads == [
        (pod, "true"),
        (pod, "true"),
        (pod, "false"),
        ("no-such-pod", "true"),
        ("no-such-pod", "false"),
        ("no-such-pod", ""),
    ]
