"""What a direct call of liger-kernel's RMSNorm kernel would save on the host, against
liger's own module forward (the baseline), with the kernel launch itself taken out.

Issue 13's Qwen3-shape profile (docs/gpu.md, stop 34) put liger's RMSNorm wrapper at
188 µs of host time a call, under the profiler, with the Triton launch inside it. What
an inference-only call could remove is everything but the launch: the autograd
function, its argument checks and contiguity wrapper, the per-call block-size settings,
the saved reciprocal std's bookkeeping, and the device context. This measures that
part on the CPU: both paths run with liger's two forward kernels replaced by a recorder
that returns at once, so neither launches anything, and the recorded launches of the
two paths are checked to be the same (grid, tensors' shapes, dtypes and strides,
scalars) before any timing.

Needs liger-kernel and Triton importable (neither is in the lock; no GPU is needed):

    python3 -m venv /tmp/lk && /tmp/lk/bin/pip install --no-deps liger-kernel==0.8.5 triton
    PYTHONPATH=/tmp/lk/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages \\
        /tmp/lk/bin/python benchmarks/bench_liger_host.py

Prints µs a call for each path and each norm shape of the Qwen3-0.6B shape (the layers'
norms over 1,024 features, the per-head q/k norms over 128), the medians of
interleaved rounds, then `direct / liger host-time ratio: <x>` for each shape. On CUDA
liger's call also switches the device twice (a context manager around the launch); on
the CPU that context is empty, so the figures leave it out of the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import time

# Calls of an encode of the benchmark's 4,000 Qwen3-shape texts: 28 layers, four norms a
# layer (input, post-attention, q, k), 42 batches, plus the final norm (stop 34's profile).
CALLS_PER_ENCODE = 4746


class Recorder:
    """Stands in for a Triton kernel: `kernel[grid](*args, **kwargs)` records, returns."""

    def __init__(self, arg_names):
        self.arg_names = arg_names
        self.last = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.last = (grid, args, kwargs)

        return launch


def describe(launch) -> tuple:
    """A launch as comparable values: tensors by shape, dtype and strides."""
    import torch

    grid, args, kwargs = launch

    def value(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), v.dtype, v.stride())
        return v

    return grid, tuple(value(v) for v in args), tuple(sorted((k, value(v)) for k, v in kwargs.items()))


class DirectNorm:
    """liger's RMSNorm forward as an inference-only call: the same kernel and arguments,
    the settings worked out once, nothing saved for a backward pass."""

    def __init__(self, module, ops):
        import torch

        self.ops = ops
        self.weight = module.weight
        self.n = module.weight.shape[0]
        self.eps = module.variance_epsilon
        self.offset = module.offset
        self.casting = ops._str_to_casting_mode[module.casting_mode]
        self.block, self.warps = ops.calculate_settings(self.n)
        self.row_mode = module.row_mode
        self.rstd_dtype = None if self.casting == -1 else torch.float32  # None: the input's dtype

    def __call__(self, x):
        import torch

        shape = x.shape
        if not x.is_contiguous():
            x = x.contiguous()
        x2 = x.view(-1, self.n)
        rows = x2.shape[0]
        y = torch.empty_like(x2)
        rstd = torch.empty(rows, dtype=self.rstd_dtype or x.dtype, device=x.device)
        if self.block > 256 or rows < 4096 * 8 or self.row_mode:
            self.ops._rms_norm_forward_kernel[(rows,)](
                y, y.stride(0), x2, x2.stride(0), self.weight, self.weight.stride(0), rstd, rstd.stride(0),
                self.n, self.eps, self.offset, self.casting,
                elementwise_affine=True, BLOCK_SIZE=self.block, num_warps=self.warps,
            )  # fmt: skip
        else:
            self.ops._block_rms_norm_forward_kernel[(-(-rows // 16),)](
                y, y.stride(0), x2, x2.stride(0), self.weight, self.weight.stride(0), rstd, rstd.stride(0),
                rows, self.n, self.eps, self.offset, self.casting,
                elementwise_affine=True, BLOCK_SIZE=self.block, num_warps=self.warps, BLOCK_ROW=16,
            )  # fmt: skip
        return y.view(shape)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000, help="calls per round and path")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from importlib.metadata import version

    import torch

    try:
        import liger_kernel.ops.rms_norm as ops
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except ImportError as exc:
        raise SystemExit(f"needs liger-kernel and triton importable ({exc}): see this script's docstring") from None

    torch.set_num_threads(1)
    row = ops._rms_norm_forward_kernel = Recorder(ops._rms_norm_forward_kernel.arg_names)
    block = ops._block_rms_norm_forward_kernel = Recorder(ops._block_rms_norm_forward_kernel.arg_names)
    print(
        f"torch {torch.__version__}, liger-kernel {version('liger-kernel')}, triton {version('triton')}; kernels recorded, not launched"
    )
    # Small inputs: both paths allocate the same output and reciprocal std, and on the CPU
    # a large allocation would time malloc, which CUDA's caching allocator does not pay.
    shapes = {
        "layer norm [4, 16, 1024]": ((4, 16, 1024), 1024, row),
        "q/k norm [4, 16, 16, 128]": ((4, 16, 16, 128), 128, row),
        "q/k norm, block kernel [1, 2048, 16, 128]": ((1, 2048, 16, 128), 128, block),
    }
    with torch.inference_mode():
        for label, (shape, n, kernel) in shapes.items():
            module = LigerRMSNorm(n).to(torch.bfloat16)
            direct = DirectNorm(module, ops)
            x = torch.randn(shape, dtype=torch.bfloat16)
            launches = []
            for path in (module, direct):
                kernel.last = None
                path(x)
                if kernel.last is None:
                    raise SystemExit(f"{label}: the path launched another kernel than the one expected")
                launches.append(describe(kernel.last))
            if launches[0] != launches[1]:
                raise SystemExit(
                    f"{label}: the direct call launches differently:\n  liger  {launches[0]}\n  direct {launches[1]}"
                )
            times: dict[str, list[float]] = {"liger": [], "direct": []}
            for _ in range(args.rounds):
                for name, path in (("liger", module), ("direct", direct)):
                    for _ in range(200):
                        path(x)
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        path(x)
                    times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
            liger_us, direct_us = (statistics.median(times[k]) for k in ("liger", "direct"))
            print(f"{label}: liger {liger_us:.1f} µs a call, direct {direct_us:.1f} µs (medians of {args.rounds} rounds "
                  f"of {args.calls:,}); if each of an encode's {CALLS_PER_ENCODE:,} norm calls saved as much, "
                  f"{(liger_us - direct_us) * CALLS_PER_ENCODE / 1e3:.0f} ms less host time")  # fmt: skip
            print(f"direct / liger host-time ratio: {direct_us / liger_us:.3f}")


if __name__ == "__main__":
    main()
