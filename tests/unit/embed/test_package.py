"""shardflow.embed as a package: what importing it costs."""

import subprocess
import sys


def test_jobs_that_only_read_embeddings_do_not_import_torch():
    """merge, verify and report jobs import shardflow.embed's modules: torch (a second
    and more a job, far more from a cluster's shared filesystem) stays out."""
    code = ("import sys, shardflow.embed, shardflow.embed.merge, shardflow.embed.verify, shardflow.embed.report; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
