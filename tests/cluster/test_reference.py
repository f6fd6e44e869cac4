"""The local run of the real workflow that every cluster path is compared with
(the `real_local` fixture): 30 documents, 2 chunks, one embedding thread, to
verification.json. If this fails, every comparison below is meaningless."""

import json

import pytest

pytestmark = pytest.mark.cluster


def test_local_reference_run_is_verified_and_used_one_thread_per_embed_job(real_local, sm):
    ds = sm.DATASET
    verification = json.loads((real_local.workdir / sm.TARGET).read_text())
    assert verification["ok"], verification
    assert verification["rows"] == sm.CORPUS_DOCS and verification["dim"] == 384
    manifest = json.loads((real_local.workdir / f"results/{ds}/chunks/manifest.json").read_text())
    assert [c["items"] for c in manifest["chunks"]] == [sm.CORPUS_DOCS // sm.N_CHUNKS] * sm.N_CHUNKS == [15, 15]
    for i in range(sm.N_CHUNKS):
        log = (real_local.workdir / f"logs/embed/{ds}/chunk_{i}.log").read_text()
        assert " threads 1 " in log, log  # what the cluster paths must match
    # The report was not built: the target stops at verify.
    assert not (real_local.workdir / f"results/{ds}/report").exists()
