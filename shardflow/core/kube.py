"""What the run's Snakemake needs from the Kubernetes client, with
snakemake-executor-plugin-kubernetes 0.5.1 as the executor (profiles/eks).

When a job's pod fails, the plugin reads the failed container's log with
`previous=true` before it reports the job as failed. That asks for the container
instance before the last restart; with `restartPolicy: Never` (the plugin's) a container
never restarts, so a real API server answers 400, `previous terminated container
"snakemake" in pod ... not found`, the plugin raises, and Snakemake stops the whole run:
no retry of the job, no keep-going, and the Jobs still running left in the namespace.
`failed_pod_logs_readable()` makes such a read fall back to the log of the container as
it is, the one that failed, so that the plugin reports the failure as its authors meant:
the job is resubmitted in a new pod (the rule's `retries:`, `resources.<rule>.retries`,
with the memory of the next attempt; the profile's `retries` for a rule without, whose
`default-resources` memory grows per attempt too in the eks profile), and the other jobs
run on.
"""

from __future__ import annotations

import functools


def failed_pod_logs_readable() -> bool:
    """Patch `kubernetes.client.CoreV1Api.read_namespaced_pod_log` in this process. A read
    with previous=True that the API server refuses (400, as above; or 404 and the like,
    a pod gone with its node) is made again without it; where that fails too, the read
    returns a line saying why instead of raising, so that the plugin still reports the
    job as failed rather than stopping the run. A 401 is raised as before (the plugin
    then logs in again), and every other read is unchanged. False where the Kubernetes
    client is not installed (nothing to patch); calling it again changes nothing."""
    try:
        from kubernetes.client import CoreV1Api
        from kubernetes.client.rest import ApiException
    except ImportError:
        return False
    read = CoreV1Api.read_namespaced_pod_log
    if getattr(read, "falls_back_to_current", False):
        return True

    @functools.wraps(read)
    def read_log(self, name, namespace, **kwargs):
        try:
            return read(self, name, namespace, **kwargs)
        except ApiException as refused:
            if refused.status == 401 or not kwargs.get("previous"):
                raise
            try:
                return read(self, name, namespace, **{**kwargs, "previous": False})
            except ApiException as exc:
                if exc.status == 401:
                    raise
                return (
                    f"(shardflow: the log of pod {name} could not be read: {refused.status} {refused.reason} "
                    f"with previous=true, {exc.status} {exc.reason} without)"
                )

    read_log.falls_back_to_current = True
    CoreV1Api.read_namespaced_pod_log = read_log
    return True
