"""`python tests/support/slurm_polls.py ARGS`: `snakemake ARGS` with the SLURM executor
plugin's status polls at most POLL_CAP_S apart. The controller of the SLURM tests
(tests/cluster/test_slurm.py); the jobs' own Snakemake (`python -m snakemake` inside
each SLURM job) is untouched.

Why: snakemake-executor-plugin-slurm 2.8 adds 10 s to its interval after every poll that
finds no job done (1, 11, 21 s ... from slurm-init-seconds-before-status-checks, at most
180 s; profiles/ci-slurm explains it) and has no setting for the step. On the one-node
CI cluster a job takes 5 to 15 s, so the tests spent most of their time asleep: embed
jobs done in about 12 s were seen after 33 s, and a failing run waited out its last
21 s interval before it exited (shutdown joins the polling thread). The tests check what
the plugin does with the jobs (submission, resources, failure, cancellation,
resubmission), not how long it sleeps, so only the interval is capped; everything else
is the plugin as installed. If the plugin drops the interval property this patches, the
run fails at once instead of quietly running slow.
"""

import sys

POLL_CAP_S = 2


def cap_status_poll_interval(cap_s: float = POLL_CAP_S) -> None:
    from snakemake_executor_plugin_slurm import Executor

    interval = Executor.next_seconds_between_status_checks  # RemoteExecutor's property
    Executor.next_seconds_between_status_checks = property(
        interval.fget, lambda self, seconds: interval.fset(self, min(seconds, cap_s))
    )


if __name__ == "__main__":
    cap_status_poll_interval()
    from snakemake.cli import main

    sys.exit(main())
