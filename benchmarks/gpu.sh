#!/usr/bin/env bash
# The GPU speed figures of benchmarks/RESULTS.md, in one run on one NVIDIA GPU:
#   bash benchmarks/gpu.sh [results folder, default benchmarks/results/gpu/<date>] [stages, default all]
#
# Stages (the second argument names some, e.g. 'b256 vs_open_clip'):
#   b256: train_step.py, a ViT-B/16 CLIP step in bf16 (fp32 parameters, optimizer state and loss math) at batch 256,
#     against the bf16 matmul peak measured in the same process (`utilisation`) and the card's published peak (`mfu`).
#   vs_open_clip: vs_open_clip.py, the same network, optimizer and batch trained by open_clip (torch autocast bf16,
#     as its --precision amp_bf16) and by vlp_jax, each in its own process on the same GPU, in alternating rounds.
#   b1024: train_step.py at batch 1024 with patch dropout 0 and 0.5 (FLIP), timed in alternating rounds.
#
# Each stage has its own time limit and writes its JSON lines as they come, so a stage that fails or runs out of time
# leaves the others' rows. Needs jax with CUDA, torch with CUDA and open_clip_torch.
set -u
out=${1:-benchmarks/results/gpu/$(date +%F)}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c 'import jax, jaxlib, flax, optax, torch; print("jax", jax.__version__, "jaxlib", jaxlib.__version__,
"flax", flax.__version__, "optax", optax.__version__, "torch", torch.__version__, "devices", jax.devices())'
} 2>&1 | tee "$out/environment.txt"

stage() {  # stage <name> <seconds> <command...>: run with a time limit, stdout to <name>.jsonl, all output shown
  local name=$1 seconds=$2
  shift 2
  echo "== $name ($(date +%T), limit ${seconds}s): $*"
  timeout -s INT -k 15 "$seconds" "$@" > >(tee -a "$out/$name.jsonl") 2> >(tee -a "$out/$name.log" >&2)
  echo "== $name exit $?"
}

# XLA's Triton GEMM autotuning off: cuBLAS takes the matmuls, and the step compiles in a fraction of the time (with it
# on, a ViT-B/16 step had not compiled after 130 s on an H200).
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_triton_gemm=false"
stages=${2:-b256 vs_open_clip b1024}
for name in $stages; do
  case $name in
    b256) XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 stage train_step 200 python3 benchmarks/train_step.py --model=ViT-B-16 \
            --precision=bf16 --batch_size=256 --steps=10 --warmup=3 ;;
    vs_open_clip) stage vs_open_clip 200 python3 benchmarks/vs_open_clip.py --rows=ViT-B-16:256 --precision=bf16 \
            --device=gpu --rounds=3 --steps=10 --warmup=2 ;;
    b1024) XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 stage train_step 200 python3 benchmarks/train_step.py --model=ViT-B-16 \
            --precision=bf16 --batch_size=1024 --patch_dropout=0,0.5 --rounds=2 --steps=5 --warmup=2 ;;
    *) echo "unknown stage '$name'; stages: b256 vs_open_clip b1024" >&2; exit 2 ;;
  esac
done
