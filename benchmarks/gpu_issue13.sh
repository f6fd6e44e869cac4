#!/usr/bin/env bash
# Issue 13's GPU figures in one prepared run of at most 8 minutes (H200 or H100), with
# the random-weight models of ../shared/gpu-kit (see its README for the offline setup):
#
#   echo /.gpu/ >> .git/info/exclude; mkdir -p .gpu/whl; cp -r ../shared/gpu-kit .gpu/kit
#   (optional: wheels of the pinned transformers / sentence-transformers / tokenizers in
#    .gpu/whl, and of liger-kernel for the "fused" rows; flash-attn for flash varlen)
#   bash benchmarks/gpu_issue13.sh            # on the GPU host, from the repository root
#
# Stages, each under its own timeout so one slow compile cannot eat the rest:
#   A  Qwen3-0.6B-shape, synthetic 4,000 texts, bf16: engine vs st@32/st@best (3 rounds),
#      then eager / fused / packed, and a profile of the best of them   (~150 s)
#   B  the same texts, compiled and all (compile + packing + fused), few buckets (~150 s)
#   C  MiniLM-shape, demo 3,000 and synthetic 20,000 texts: eager / packed / compiled (~90 s)
#   D  compile: true end to end on a 20,000-text chunk, compile time included (~60 s)
# Targets: Qwen3 >= 45% of peak and >= 3x st@best; MiniLM >= 2x 1.67M tokens/s (demo) and
# 0.86M (synthetic); D: compiled (warm-up + steady) faster than eager.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/issue13}
mkdir -p "$OUT"
left() { echo $((480 - ($(date +%s) - START))); }
stage() {  # stage NAME SECONDS CMD...: run CMD with at most SECONDS (or what is left)
  local name=$1 secs=$2; shift 2
  local budget; budget=$(left); ((budget < secs)) && secs=$budget
  if ((secs < 20)); then echo "## $name: skipped, $(left) s left"; return; fi
  echo "## $name (timeout ${secs}s)"
  timeout "$secs" "$@" 2>"$OUT/$name.err" | tee "$OUT/$name.txt"
  echo "## $name: exit ${PIPESTATUS[0]}, $(( $(date +%s) - START )) s elapsed"
}

if compgen -G ".gpu/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
KIT=${KIT:-.gpu/kit}
[ -d "$KIT" ] || KIT=../shared/gpu-kit
python3 "$KIT/make_models.py" /tmp/models >/dev/null
QWEN=/tmp/models/qwen3-embedding-0.6b-shape
MINILM=/tmp/models/minilm-l6-shape
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import liger_kernel" 2>/dev/null && echo "liger-kernel: installed" || echo "liger-kernel: not installed (fused rows fall back)"
python3 -c "import flash_attn" 2>/dev/null && echo "flash-attn: installed" || echo "flash-attn: not installed (packing uses flex attention)"
B=benchmarks/bench_engine.py

stage A_qwen_eager 170 python3 $B --model $QWEN --texts synthetic --n 4000 --rounds 3 --no-naive \
  --configs eager,fused,packed --config-rounds 2 --profile --profile-config packed --profile-top 15
stage B_qwen_compiled 150 python3 $B --model $QWEN --texts synthetic --n 4000 --configs-only \
  --configs compiled,all --config-rounds 2 --length-buckets 256,512
stage C_minilm_demo 50 python3 $B --model $MINILM --texts demo --n 3000 --configs-only \
  --configs eager,packed,compiled --config-rounds 3 --profile --profile-config eager --profile-top 10
stage C_minilm_synth 50 python3 $B --model $MINILM --texts synthetic --n 20000 --configs-only \
  --configs eager,packed --config-rounds 2
# D: one encode each, as a job runs it: compile and warm-up inside the timed run.
stage D_compile_e2e 60 python3 - <<'EOF'
import os, sys, time, torch
sys.path.insert(0, "benchmarks")
from bench_engine import synthetic_texts
from shardflow.embed import EmbedParams, load_encoder
texts = synthetic_texts(20000, 0)
for compile_ in (False, True):
    t0 = time.perf_counter()
    enc = load_encoder(EmbedParams(model="/tmp/models/minilm-l6-shape", compile=compile_))
    enc.encode(texts); torch.cuda.synchronize()
    s = enc.last_stats.as_dict()
    print(f"compile={compile_}: {time.perf_counter() - t0:.1f} s end to end (load included), encode {s['seconds']:.1f} s, "
          f"warm-up {s['warmup_seconds']:.1f} s over {s['warmup_shapes']} shapes, steady {s['steady_tokens_per_s']:.0f} tokens/s")
EOF
echo "## done in $(( $(date +%s) - START )) s; outputs in $OUT"
