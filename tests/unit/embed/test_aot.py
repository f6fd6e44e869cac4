"""`compile_mode: aot` (shardflow.embed.aot) on the CPU: the tiny BERT's padded forward
exported for real, then loaded by later encoders as a job would.

AOTInductor's own compile costs 20-40 s of CPU on the CI machine, a test run's whole
margin, so `make test` stands in for its two calls (`StandIn`): the "package" is the
exported program, saved, and loading it gives a runner that takes the model's tensors
by name, as a package without weights does, and reads its inputs with the strides it
was exported with, as compiled code does. Everything else is the engine's and
shardflow.embed.aot's own code. `make test-aot` (SHARDFLOW_AOT_BUILD=1) runs the same
tests with the real compile and load (about 30 s), and the one that needs a real
package. What it gains on a GPU is measured by benchmarks/bench_compile_cache.py
(stage F of benchmarks/gpu_issue13.sh)."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import time

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")

from shardflow.core import locks
from shardflow.embed import EmbedParams, aot, load_encoder
from tests.support import tiny_models

REAL_BUILD = os.environ.get("SHARDFLOW_AOT_BUILD") == "1"


class StandIn:
    """AOTInductor's compile and load, stood in for (see the module docstring)."""

    @staticmethod
    def compile_and_package(program, package_path, inductor_configs):
        assert inductor_configs == {"aot_inductor.package_constants_in_so": False}  # no weights in the package
        torch.export.save(program, package_path)
        return package_path

    @staticmethod
    def load_package(path, device_index):
        return StandIn.Runner(torch.export.load(str(path)))

    class Runner:
        def __init__(self, program):
            self.program = program
            self.module = program.module()
            self.constants = None

        def get_constant_fqns(self):
            return [*self.program.state_dict, *self.program.constants]

        def load_constants(self, constants, check_full_update, user_managed):
            assert check_full_update and user_managed and set(constants) == set(self.get_constant_fqns())
            self.constants = constants

        def __call__(self, *inputs):
            # Compiled code indexes its inputs with the strides they were exported with.
            exported = [x.as_strided(x.shape, torch.empty(x.shape).stride(), x.storage_offset()) for x in inputs]
            return torch.func.functional_call(self.module, self.constants, tuple(exported))


@pytest.fixture(autouse=True, scope="module")
def aoti():
    """The real AOTInductor under SHARDFLOW_AOT_BUILD=1 (`make test-aot`), else StandIn."""
    with pytest.MonkeyPatch.context() as mp:
        if not REAL_BUILD:
            import torch._inductor as inductor

            mp.setattr(inductor, "aoti_compile_and_package", StandIn.compile_and_package)
            mp.setattr(aot, "load_package", StandIn.load_package)
        yield


CACHE_VAR = "TORCHINDUCTOR_CACHE_DIR"  # the engine points it at embedding.compile_cache


@pytest.fixture(autouse=True)
def _torch_cache_setting_restored(monkeypatch):
    """Encoders with a compile_cache set the process's TORCHINDUCTOR_CACHE_DIR: put it back."""
    if CACHE_VAR in os.environ:
        monkeypatch.setenv(CACHE_VAR, os.environ[CACHE_VAR])
    else:
        monkeypatch.delenv(CACHE_VAR, raising=False)


def _params(model, cache, **kw) -> EmbedParams:
    return EmbedParams(model=str(model), device="cpu", threads=2, compile_cache=str(cache), **kw)


def _encode(params: EmbedParams, texts) -> tuple[np.ndarray, dict]:
    enc = load_encoder(params)
    out = enc.encode(texts)
    return out, enc.last_stats.as_dict()


@pytest.fixture(scope="module")
def built(tiny, texts, tmp_path_factory):
    """One package, built by a first encoder: (cache folder, its embeddings, its stats, eager's)."""
    cache = tmp_path_factory.mktemp("aot_cache")
    with pytest.MonkeyPatch.context() as mp:
        if CACHE_VAR in os.environ:
            mp.setenv(CACHE_VAR, os.environ[CACHE_VAR])
        eager, _ = _encode(_params(tiny["bert_mean"], cache), texts)
        first, stats = _encode(_params(tiny["bert_mean"], cache, compile=True, compile_mode="aot"), texts)
    return cache, first, stats, eager


def _packages(cache) -> list[str]:
    return sorted(p.name for p in (cache / aot.FOLDER).glob("*.pt2"))


def test_a_built_package_gives_eager_embeddings_and_the_next_job_loads_it(built, tiny, texts):
    cache, first, stats, eager = built
    assert stats["compile"].startswith("aot, dynamic shapes") and "built in" in stats["compile"], stats["compile"]
    assert len(_packages(cache)) == 1 and not list((cache / aot.FOLDER).glob("*.tmp.pt2"))
    assert stats["warmup_shapes"] == 1 and stats["warmup_seconds"] > 0  # the first batch: the build, timed apart
    np.testing.assert_allclose(first, eager, atol=2e-6)
    assert stats["batches"] > 2  # later batches of other shapes ran the package too (dynamic rows and width)

    again, stats2 = _encode(_params(tiny["bert_mean"], cache, compile=True, compile_mode="aot"), texts)
    assert "loaded in" in stats2["compile"] and "built" not in stats2["compile"], stats2["compile"]
    assert len(_packages(cache)) == 1  # no second package
    assert np.array_equal(again, first)  # the same compiled code on the same weights


def test_the_package_runs_the_weights_of_the_model_that_loads_it(built, texts, tmp_path):
    """The package holds no weights: another model of the same architecture (other seed)
    shares it and gets its own eager embeddings."""
    cache, *_ = built
    other = tiny_models.build_bert_mean(tmp_path, seed=7)
    eager, _ = _encode(_params(other, cache), texts)
    got, stats = _encode(_params(other, cache, compile=True, compile_mode="aot"), texts)
    assert "loaded in" in stats["compile"] and "built" not in stats["compile"], stats["compile"]
    assert len(_packages(cache)) == 1
    np.testing.assert_allclose(got, eager, atol=2e-6)
    assert not np.allclose(got, built[1], atol=1e-3)  # other weights, other embeddings


def test_the_key_follows_the_code_not_the_weights(tiny, tmp_path):
    from transformers import AutoModel

    a = AutoModel.from_pretrained(str(tiny["bert_mean"]))
    b = AutoModel.from_pretrained(str(tiny_models.build_bert_mean(tmp_path, seed=3)))
    cpu, path = torch.device("cpu"), {"mask": "2-D int64"}
    key = aot.package_key(a, cpu, torch.float32, (512, 48), path)
    assert aot.package_key(b, cpu, torch.float32, (512, 48), path) == key  # other weights
    assert aot.package_key(a, cpu, torch.bfloat16, (512, 48), path) != key
    assert aot.package_key(a, cpu, torch.float32, (256, 48), path) != key
    assert aot.package_key(a, cpu, torch.float32, (512, 48), {"mask": "4-D bool"}) != key
    b.config.num_attention_heads = 2 * a.config.num_attention_heads  # another architecture
    assert aot.package_key(b, cpu, torch.float32, (512, 48), path) != key


def test_a_failed_build_runs_the_job_eagerly_says_why_and_is_not_tried_again(
    tiny, texts, tmp_path, monkeypatch, caplog
):
    builds = []

    def fail(self, input_ids, mask):
        builds.append(1)
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(aot.AotForward, "_build", fail)
    eager, _ = _encode(_params(tiny["bert_mean"], tmp_path), texts)
    with caplog.at_level(logging.WARNING):
        got, stats = _encode(_params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot"), texts)
    assert stats["compile"] == "off (compile_mode aot failed: RuntimeError: no C++ compiler found)"
    assert np.array_equal(got, eager)
    assert any("no C++ compiler found" in r.getMessage() and "eagerly" in r.getMessage() for r in caplog.records)
    # The next job reads the failure beside the package instead of failing the same build.
    (failed,) = (tmp_path / aot.FOLDER).glob("*.failed.json")
    again, stats = _encode(_params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot"), texts)
    assert len(builds) == 1 and np.array_equal(again, eager)
    assert "an earlier job's build of this package failed (RuntimeError: no C++ compiler found)" in stats["compile"]
    assert f"remove {failed} to try again" in stats["compile"]


def test_a_package_that_disagrees_with_eager_is_not_used(built, tiny, texts, monkeypatch):
    """The first batch runs both ways: a package whose rows differ (a stale or broken
    build) leaves the job eager."""
    cache, _, _, eager = built
    real = aot.AotForward.__call__
    monkeypatch.setattr(aot.AotForward, "__call__", lambda self, ids, mask: real(self, ids, mask).flip(-1))
    got, stats = _encode(_params(tiny["bert_mean"], cache, compile=True, compile_mode="aot"), texts)
    assert stats["compile"].startswith("off (compile_mode aot failed: ValueError: its first batch's embeddings differ")
    assert np.array_equal(got, eager)


def test_a_job_waits_for_the_package_another_job_builds(built, tiny, texts, tmp_path, monkeypatch):
    """The lock beside the package: a second job finding it taken waits and loads what the
    first one built, instead of building it too."""
    cache, first, *_ = built
    monkeypatch.setattr(aot, "WAIT_LOG_SECONDS", 0.0)
    (pkg,) = (cache / aot.FOLDER).glob("*.pt2")
    mine = tmp_path / "cache"
    (mine / aot.FOLDER).mkdir(parents=True)
    fd = locks.try_lock(mine / aot.FOLDER / pkg.with_suffix(".lock").name, job="the building job")
    builds = []
    monkeypatch.setattr(aot.AotForward, "_build", lambda self, ids, mask: builds.append(1))

    def finish_build():
        time.sleep(1.0)
        shutil.copy(pkg, mine / aot.FOLDER / pkg.name)
        locks.release(fd)

    builder = threading.Thread(target=finish_build)
    builder.start()
    got, stats = _encode(_params(tiny["bert_mean"], mine, compile=True, compile_mode="aot"), texts)
    builder.join()
    assert not builds
    assert "for another job's build, loaded in" in stats["compile"], stats["compile"]
    assert np.array_equal(got, first)


def test_packing_keeps_its_eager_path(tiny, texts, tmp_path):
    params = _params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot", packing="on")
    enc = load_encoder(params)
    assert enc.packing.on  # on the CPU: SDPA with a block-diagonal mask
    assert enc.compiled.startswith("off (compile_mode aot compiles the padded forward")
    assert not (tmp_path / aot.FOLDER).exists()


def test_liger_kernels_keep_the_job_eager_without_trying_a_build(tiny, texts, tmp_path, monkeypatch, caplog):
    """`kernels: liger` asks for liger-kernel's Triton launches, which torch.export cannot
    trace: the job runs eagerly at once, saying why and what would build a package, and
    leaves no failed build behind (the build's own error named neither)."""
    from shardflow.embed import accel

    builds = []
    monkeypatch.setattr(aot.AotForward, "_build", lambda self, ids, mask: builds.append(1))
    monkeypatch.setattr(accel, "resolve_kernels", lambda *a, **k: accel.Choice("liger", "stand-in"))
    monkeypatch.setattr(accel, "apply_kernels", lambda model, mtype, logger: accel.Choice("liger", "stand-in"))
    eager, _ = _encode(_params(tiny["bert_mean"], tmp_path), texts)
    with caplog.at_level(logging.WARNING):
        got, stats = _encode(
            _params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot", kernels="liger"), texts
        )
    assert stats["kernels"] == "liger"
    assert stats["compile"].startswith("off (compile_mode aot: kernels: liger patched the model"), stats["compile"]
    assert "kernels: auto builds the package without them" in stats["compile"]
    # warnings only: the eager run's INFO lines are captured too where an earlier test of the
    # session left the shardflow loggers at INFO (core.runlog.configure_logging)
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warned if "compile:" in r.getMessage()] == [
        f"compile: {stats['compile']}; running eagerly"
    ]
    assert not builds and not (tmp_path / aot.FOLDER).exists()
    assert np.array_equal(got, eager)


def test_the_option_is_checked(tiny):
    with pytest.raises(ValueError, match="compile_mode"):
        EmbedParams(model=str(tiny["bert_mean"]), compile_mode="ahead")
    assert dataclasses.replace(EmbedParams(model="m"), compile_mode="aot").compile_mode == "aot"


def test_a_first_batch_out_of_memory_splits_and_its_first_half_loads_the_package(built, tiny, texts, monkeypatch):
    """Out of memory in the package's first batch is the back-off's to handle (the batch
    splits), not a reason to run the job eagerly: the first half starts the package again.
    The halves cut to their own width are strided views, which the compiled code (built on
    contiguous inputs) misread before they were made contiguous."""
    cache, first, *_ = built
    real = aot.AotForward.__call__

    def small_batches_only(self, ids, mask):
        if ids.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (a stand-in)")
        return real(self, ids, mask)

    monkeypatch.setattr(aot.AotForward, "__call__", small_batches_only)
    got, stats = _encode(_params(tiny["bert_mean"], cache, compile=True, compile_mode="aot"), texts)
    assert stats["compile"].startswith("aot, dynamic shapes") and "loaded in" in stats["compile"], stats["compile"]
    assert stats["oom_backoffs"] > 0
    np.testing.assert_allclose(got, first, atol=2e-6)


@pytest.mark.skipif(not REAL_BUILD, reason="needs a real AOTInductor package: make test-aot")
def test_loading_a_package_makes_no_cpu_probe(built, monkeypatch):
    """torch's own load reads the CPU's vector instructions by building and loading a test
    library per instruction set, each in a child Python (1.1 s of every job's load on 2
    cores); the package key holds the CPU's capability instead."""
    import torch._inductor.cpu_vec_isa as isa

    cache, *_ = built
    (pkg,) = (cache / aot.FOLDER).glob("*.pt2")

    def probe():
        raise AssertionError("the CPU's vector instructions were probed")

    monkeypatch.setattr(isa, "pick_vec_isa", probe)
    runner = aot.load_package(pkg, -1)
    assert runner.get_constant_fqns()


@pytest.mark.parametrize("mask", ["none", "4-D"])
def test_the_export_takes_the_mask_as_the_engine_passes_it(tiny, tmp_path, monkeypatch, mask):
    """The CUDA defaults: a causal decoder's batches pass no mask (padding_mask skipped),
    an encoder's pass it 4-D (attention_bias). The export (here without the compile,
    which the 2-D case above runs for real) takes what the engine passes, rows and width
    dynamic."""
    import torch._inductor as inductor
    from transformers import AutoModel

    programs = []

    def keep(program, package_path, inductor_configs):
        programs.append(program)
        open(package_path, "wb").close()

    monkeypatch.setattr(inductor, "aoti_compile_and_package", keep)
    monkeypatch.setenv(CACHE_VAR, str(tmp_path))
    model = AutoModel.from_pretrained(str(tiny["qwen_last" if mask == "none" else "bert_mean"])).eval()
    ids = torch.ones((3, 7), dtype=torch.long)
    passed = None if mask == "none" else torch.ones((3, 1, 1, 7), dtype=torch.bool)
    forward = aot.AotForward(
        model, torch.device("cpu"), torch.float32, (64, 32), {"mask": aot.mask_kind(passed)}, logging.getLogger("t")
    )
    forward.package.parent.mkdir(parents=True)
    forward._build(ids, passed)
    (program,) = programs
    inputs = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    assert len(inputs) == (1 if mask == "none" else 2)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    ids_shape = placeholders[inputs[0].arg.name].meta["val"].shape
    assert all(isinstance(d, torch.SymInt) for d in ids_shape)  # rows and width dynamic
    assert forward.package.is_file()


def _copy_of(built, tmp_path):
    """A cache of its own holding the built package (the module's stays whole)."""
    (pkg,) = (built[0] / aot.FOLDER).glob("*.pt2")
    mine = tmp_path / "cache"
    (mine / aot.FOLDER).mkdir(parents=True)
    shutil.copy(pkg, mine / aot.FOLDER / pkg.name)
    return mine, mine / aot.FOLDER / pkg.name


def test_a_package_that_does_not_load_is_built_again_once(built, tiny, texts, tmp_path, caplog):
    """A package cut short (its writer killed on a filesystem where a rename is no atomic
    swap) or otherwise damaged: the job builds it again under the lock, says so, and
    runs the new one; the next job loads that."""
    cache, first, *_ = built
    mine, pkg = _copy_of(built, tmp_path)
    whole = pkg.read_bytes()
    pkg.write_bytes(whole[: len(whole) // 2])
    with caplog.at_level(logging.WARNING):
        got, stats = _encode(_params(tiny["bert_mean"], mine, compile=True, compile_mode="aot"), texts)
    assert stats["compile"].startswith("aot, dynamic shapes") and "built in" in stats["compile"], stats["compile"]
    assert any(
        f"{pkg} does not load" in r.getMessage() and "building it again" in r.getMessage() for r in caplog.records
    )
    assert np.array_equal(got, first)
    again, stats = _encode(_params(tiny["bert_mean"], mine, compile=True, compile_mode="aot"), texts)
    assert "loaded in" in stats["compile"] and "built" not in stats["compile"], stats["compile"]
    assert np.array_equal(again, first)
    assert not list((mine / aot.FOLDER).glob("*.failed.json"))


def test_a_package_built_that_does_not_load_is_a_failed_build(tiny, texts, tmp_path, monkeypatch):
    """A build whose package does not load is recorded as failed: the job runs eagerly
    and later jobs do so at once, rather than each building and failing to load again."""
    builds = []

    def unloadable(self, input_ids, mask):
        builds.append(1)
        self.package.write_bytes(b"not a package")
        return "built in 0.0 s, "

    monkeypatch.setattr(aot.AotForward, "_build", unloadable)
    eager, _ = _encode(_params(tiny["bert_mean"], tmp_path), texts)
    got, stats = _encode(_params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot"), texts)
    (failed,) = (tmp_path / aot.FOLDER).glob("*.failed.json")
    assert stats["compile"].startswith("off (compile_mode aot failed: RuntimeError: the package built does not load")
    assert f"recorded in {failed}" in stats["compile"]
    assert np.array_equal(got, eager) and not _packages(tmp_path)
    again, stats = _encode(_params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot"), texts)
    assert len(builds) == 1 and np.array_equal(again, eager)
    assert "an earlier job's build of this package failed (the package built does not load" in stats["compile"]

    # Found in the cache, it is built once more; what that build gives not loading either is recorded too.
    failed.unlink()
    (tmp_path / aot.FOLDER / failed.name.replace(".failed.json", ".pt2")).write_bytes(b"cut short")
    again, stats = _encode(_params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot"), texts)
    assert len(builds) == 2 and np.array_equal(again, eager) and failed.is_file() and not _packages(tmp_path)
    assert "the package built does not load" in stats["compile"], stats["compile"]


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA error: out of memory"),  # AOTInductor's own allocation, not torch's OutOfMemoryError
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        torch.AcceleratorError("CUDA error: unspecified launch failure"),  # torch 2.13, the lock's
    ],
)
def test_a_device_error_while_loading_leaves_the_package_alone(built, tiny, texts, tmp_path, monkeypatch, error):
    """A load that fails on the device (out of memory reported as a CUDA error, a CUDA
    fault) says nothing of the package: it is not deleted, built again or recorded as a
    failed build, which would make every later job run eagerly."""
    mine, pkg = _copy_of(built, tmp_path)
    whole = pkg.read_bytes()
    builds, loads = [], []
    real_load = aot.load_package

    def load_once_failing(path, device_index):
        loads.append(1)
        if len(loads) == 1:
            raise error
        return real_load(path, device_index)

    monkeypatch.setattr(aot, "load_package", load_once_failing)
    monkeypatch.setattr(aot.AotForward, "_build", lambda self, ids, mask: builds.append(1) or "built in 0.0 s, ")
    got, stats = _encode(_params(tiny["bert_mean"], mine, compile=True, compile_mode="aot"), texts)
    assert not builds and not list((mine / aot.FOLDER).glob("*.failed.json"))
    assert pkg.read_bytes() == whole
    assert stats["compile"] == f"off (compile_mode aot failed: {aot.error_line(error)})"
    np.testing.assert_allclose(got, built[1], atol=2e-6)


def test_a_device_error_while_building_is_no_failed_build(tiny, texts, tmp_path, monkeypatch):
    """A CUDA fault during the build runs the job eagerly but records nothing: the next
    job builds the package."""

    def fault(self, input_ids, mask):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(aot.AotForward, "_build", fault)
    _, stats = _encode(_params(tiny["bert_mean"], tmp_path, compile=True, compile_mode="aot"), texts)
    assert stats["compile"].startswith("off (compile_mode aot failed: RuntimeError: CUDA error"), stats["compile"]
    assert not list((tmp_path / aot.FOLDER).glob("*.failed.json"))
