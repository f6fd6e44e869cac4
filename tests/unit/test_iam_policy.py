"""The eks profile's IAM policy (profiles/eks/iam-policy.json, also shown in
profiles/README.md): a complete policy document, no wildcard action, objects only
under the prefix, bucket-level listing only with a prefix condition, and every S3 call
of the installed snakemake-storage-plugin-s3 and of shardflow.core.s3 either granted or
refused on purpose."""

import inspect
import json
import re
from importlib.metadata import version
from string import Template

import pytest

from tests.conftest import REPO

POLICY = REPO / "profiles" / "eks" / "iam-policy.json"
BUCKET, PREFIX = "my-shardflow-data", "runs/2026-11"

# What each boto3 call of the plugin needs; None: deliberately not granted.
PLUGIN_CALLS = {
    "Bucket": (),  # builds a resource object, no request
    "Object": (),
    "head_bucket": ("s3:ListBucket",),
    "filter": ("s3:ListBucket",),  # bucket.objects.filter(Prefix=...): ListObjects
    "all": ("s3:ListBucket",),  # bucket.objects.all() after a removal: ListObjects, no prefix
    "load": ("s3:GetObject",),  # HeadObject
    "download_file": ("s3:GetObject",),
    "upload_file": ("s3:PutObject", "s3:AbortMultipartUpload"),  # multipart from 8 MB on
    "delete": ("s3:DeleteObject", None),  # Object.delete; Bucket.delete: the sentinel's job
    "create_bucket": (None,),  # CreateBucket: the bucket exists (HeadBucket is granted)
}
# shardflow's own client calls (shardflow/core/s3.py: resume parts under the storage
# prefix, listing an s3:// glob of input objects).
SHARDFLOW_CALLS = {
    "list_objects_v2": ("s3:ListBucket",),  # through get_paginator
    "get_object": ("s3:GetObject",),
    "put_object": ("s3:PutObject",),
    "delete_objects": ("s3:DeleteObject",),  # DeleteObjects is authorised per key
}


@pytest.fixture(scope="module")
def policy() -> dict:
    text = Template(POLICY.read_text()).substitute(SHARDFLOW_S3_BUCKET=BUCKET, SHARDFLOW_S3_PREFIX=PREFIX)
    return json.loads(text)


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def test_a_complete_policy_document(policy):
    assert policy["Version"] == "2012-10-17" and policy["Statement"]
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow" and set(statement) <= {"Sid", "Effect", "Action", "Resource", "Condition"}


def test_no_wildcard_action_and_objects_only_under_the_prefix(policy):
    bucket_arn = f"arn:aws:s3:::{BUCKET}"
    granted = set()
    for statement in policy["Statement"]:
        actions = _as_list(statement["Action"])
        assert all(re.fullmatch(r"s3:[A-Za-z]+", a) for a in actions), actions
        granted |= set(actions)
        for resource in _as_list(statement["Resource"]):
            if resource == bucket_arn:  # bucket level: listing only, with a prefix condition
                assert actions == ["s3:ListBucket"]
                prefixes = statement["Condition"]["StringLikeIfExists"]["s3:prefix"]
                assert all(p in ("", PREFIX) or p.startswith(f"{PREFIX}/") for p in prefixes), prefixes
            else:
                assert resource == f"{bucket_arn}/{PREFIX}/*", resource
    assert not granted & {"s3:CreateBucket", "s3:DeleteBucket", "s3:PutBucketPolicy", "s3:PutObjectAcl"}


def test_the_readme_shows_the_same_policy():
    readme = (REPO / "profiles" / "README.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", readme, re.DOTALL)
    assert json.loads(POLICY.read_text()) in [json.loads(b) for b in blocks]


def test_every_s3_call_is_granted_or_refused_on_purpose(policy):
    """Of the storage plugin and of shardflow itself. A new plugin version, or a new
    call in shardflow.core.s3, fails here: review the policy."""
    import boto3
    import snakemake_storage_plugin_s3 as plugin

    assert version("snakemake-storage-plugin-s3") == "0.3.6"
    s3 = boto3.resource("s3", region_name="us-east-1")
    names = set(s3.meta.client.meta.method_to_api_mapping)
    for resource in (s3.Object("b", "k"), s3.Bucket("b"), s3.ObjectSummary("b", "k"), s3.Bucket("b").objects):
        names |= {m for m in dir(type(resource)) if not m.startswith("_")}
    calls = set(re.findall(r"\.(\w+)\(", inspect.getsource(plugin))) & names
    assert calls == set(PLUGIN_CALLS)

    source = (REPO / "shardflow" / "core" / "s3.py").read_text()
    client_ops = set(s3.meta.client.meta.method_to_api_mapping)
    ours = set(re.findall(r"\.(\w+)\(", source)) & client_ops | set(re.findall(r'get_paginator\("(\w+)"\)', source))
    assert ours == set(SHARDFLOW_CALLS)

    granted = {a for statement in policy["Statement"] for a in _as_list(statement["Action"])}
    needed = {a for actions in (*PLUGIN_CALLS.values(), *SHARDFLOW_CALLS.values()) for a in actions if a}
    assert needed == granted
