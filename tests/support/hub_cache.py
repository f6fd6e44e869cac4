"""A Hugging Face hub cache laid out as huggingface_hub writes it, offline (tests of
hub model names: their snapshot, their ref, their hash)."""

import hashlib
import os


def hub_cache_with_two_revisions(cache) -> tuple:
    """The layout huggingface_hub writes, two revisions of one model:
    models--acme--minilm/{blobs/<sha256>, refs/main, snapshots/<commit>/<file> -> blob};
    rev1's weights from 2001, rev2's from 2002, refs/main naming rev2. Returns the
    repo folder and the two snapshot folders."""
    repo = cache / "models--acme--minilm"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    snapshots = []
    for commit, weights, when in (("1" * 40, b"weights v1", 1_000_000_000), ("2" * 40, b"weights v2", 1_040_000_000)):
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        for name, content in (("config.json", b'{"hidden_size": 8}'), ("model.safetensors", weights)):
            blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
            blob.write_bytes(content)
            os.utime(blob, (when, when))
            (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
        snapshots.append(snapshot)
    (repo / "refs" / "main").write_text(snapshots[1].name)
    return repo, *snapshots


def move_ref(ref, commit: str) -> None:
    """Point a ref at `commit` as huggingface_hub does (a temporary file, then os.replace)."""
    tmp = ref.with_name(ref.name + ".tmp")
    tmp.write_text(commit)
    os.replace(tmp, ref)


def hub_cache_of(folder, cache, repo_id: str, commit: str = "3" * 40):
    """Model folder `folder` laid out in hub cache `cache` as huggingface_hub writes a
    download of `repo_id`: each file a blob (its times kept), linked from
    snapshots/<commit>, and refs/main naming that commit. Returns the snapshot folder."""
    import shutil
    from pathlib import Path

    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        blob = repo / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copy2(path, blob)
        link = snapshot / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs" / "main").write_text(commit)
    return snapshot
