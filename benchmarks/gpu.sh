#!/usr/bin/env bash
# The GPU speed figures of benchmarks/RESULTS.md, in one run on one NVIDIA GPU (docs/scaling.md, "Measuring a GPU"):
#   bash benchmarks/gpu.sh [--dry_run] [--budget_s=SECONDS] [results folder] [stages]
# results folder: default benchmarks/results/gpu/<date>; stages: default the first five, in this order (by what
# they decide; the dry run: every stage):
#   b16: train_step.py, a ViT-B/16 CLIP step in bf16 (fp32 parameters, optimizer state and loss math) at batch 256,
#     each attention route (XLA's unfused attention, cuDNN's fused kernel on padded rows) in alternating rounds,
#     against the bf16 matmul peak measured in the same process (`utilisation`) and the published peak (`mfu`).
#   vs_open_clip: vs_open_clip.py, the same network, optimizer and batch trained by open_clip at its fastest (torch
#     autocast bf16 as --precision amp_bf16, torch.compile as --torchcompile, its fused SDPA attention, fused AdamW,
#     channels-last; torch.compile's default mode and 'reduce-overhead' (CUDA graphs), each a process) and by
#     vlp_jax, each in its own process on the same GPU, in alternating rounds; each side's FLOPs per step beside.
#   end_to_end: end_to_end.py, the trainer fed from 256 px JPEG webdataset shards through the real input pipeline on
#     the host's cores, against its own step alone; checkpoint save and restore times.
#   so400m: train_step.py, a SigLIP So400m/14 step (sigmoid loss) in bf16 at batch 256.
#   l14: train_step.py, a ViT-L/14 CLIP step in bf16 at batch 256.
# Named only (each compiles afresh; `levers` names the levers_* stages, about 25 minutes on a fresh machine):
#   attention: attention.py, self-attention alone at ViT-B/16's shapes in bf16 (batch 256; 197 image rows, 77 causal
#     text rows): cuDNN's values and gradients against XLA's (padded to 64, to 2, unpadded), then those, XLA's and
#     torch's SDPA timed forward and backward in alternating rounds.
#   profile: vs_open_clip.py profiling 5 steps of each side: GPU kernel time by op kind, the GPU's idle time, the
#     costliest kernels; vlp_jax's kernels also by kernel name (matmul kernels as matmul, whatever HLO op). XLA's
#     command buffers are off here, since a CUDA graph hides which HLO op each kernel runs.
#   levers_variants: patch dropout 0.5 and remat against neither, alternating rounds in one process.
#   levers_batch: batch 256, 512 and 1024.
#   levers_xla: xla_flags.py, a process per XLA flag set (xla_levers below) in alternating rounds.
#   levers_patch_embedding: the patch embedding as a convolution and as a reshape and one matmul, alternating.
#   levers_embedding_grad: the token table's gradient as one scatter-add, sorted, and without the positions after
#     the EOT, alternating.
#   rival_autotune: vs_open_clip.py with open_clip's torch.compile in its default mode and 'max-autotune'
#     (autotuned kernels and CUDA graphs; minutes of autotuning), alternating.
#   levers_workers: end_to_end.py with 4 grain workers instead of the host's cores less two.
# The stages after b16 use the attention route that b16 found fastest; the levers use the ViT-B/16 step at batch 256.
#
# Each stage has its own time limit (cut to what --budget_s leaves) and writes its JSON lines as they come, so a
# stage that fails or runs out of time leaves the others' rows. Needs jax with CUDA, torch with CUDA and
# open_clip_torch. --dry_run runs every stage's code with the test suite's micro shapes on the CPU (about five
# minutes; the stages that only rerun another's script with other flags say so), so that no GPU minute is lost to a
# typo (tests/integration/test_benchmarks.py runs it).
set -u
dry=0 budget=0 positional=()
for arg in "$@"; do
  case $arg in
    --dry_run) dry=1 ;;
    --budget_s=*) budget=${arg#--budget_s=} ;;
    --*) echo "unknown option '$arg'; options: --dry_run, --budget_s=SECONDS" >&2; exit 2 ;;
    *) positional+=("$arg") ;;
  esac
done
out=${positional[0]:-benchmarks/results/gpu/$(date +%F)}
default_stages="b16 vs_open_clip end_to_end so400m l14"
lever_stages="levers_variants levers_batch levers_xla levers_workers levers_patch_embedding levers_embedding_grad"
all_stages="$default_stages attention profile rival_autotune $lever_stages"
stages=${positional[1]:-$( (( dry )) && echo "$all_stages" || echo "$default_stages")}
stages=${stages//levers_/LEVER_}  # 'levers' names every lever stage
stages=${stages//levers/$lever_stages}
stages=${stages//LEVER_/levers_}
for name in $stages; do
  [[ " $all_stages " == *" $name "* ]] || { echo "unknown stage '$name'; stages: $all_stages, levers" >&2; exit 2; }
done
logs=${GPU_SH_LOGS:-$out}  # where each stage's stderr goes (<name>.log)
mkdir -p "$out" "$logs"
out=$(cd "$out" && pwd) logs=$(cd "$logs" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
started=$SECONDS

{
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  echo "cpus $(nproc)"
  python3 -c 'import importlib.metadata as m, jax
print(" ".join(f"{p} {m.version(p)}" for p in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "grain")
               + tuple(p for p in ("torch", "open_clip_torch") if __import__("importlib.util").util.find_spec(
                   p.replace("_torch", "")))), "devices", jax.devices())'
} 2>&1 | tee "$out/environment.txt"

stage() {  # stage <name> <seconds> <command...>: run within its limit and the budget; stdout to <name>.jsonl
  local name=$1 seconds=$2
  shift 2
  if (( budget > 0 )); then
    local left=$(( budget - (SECONDS - started) - 5 ))
    if (( left < 30 )); then
      echo "== $name skipped: ${left}s of the ${budget}s budget left" | tee -a "$logs/$name.log"
      return
    fi
    (( left < seconds )) && seconds=$left
  fi
  echo "== $name ($(date +%T), limit ${seconds}s): $*"
  timeout -s INT -k 15 "$seconds" "$@" > >(tee -a "$out/$name.jsonl") 2> >(tee -a "$logs/$name.log" >&2)
  echo "== $name exit $? after $(( SECONDS - started ))s in all"
}

stage_if() {  # stage_if <setting> <why the dry run skips it> <name> <seconds> <command...>: stage, or say why not
  local setting=$1 why=$2
  shift 2
  if [[ -n $setting ]]; then stage "$@"; else echo "== $1 skipped in the dry run: $why"; fi
}

fastest_route() {  # the attention route of b16's fastest row ('auto' when b16 has no timed row)
  python3 - "$out/b16.jsonl" <<'EOF'
import json, sys
try:
  rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith('{')]
except OSError:
  rows = []
timed = [r for r in rows if 'samples_per_sec' in r]
print(max(timed, key=lambda r: r['samples_per_sec'])['attention'] if timed else 'auto')
EOF
}

# XLA's GPU flag sets the levers stage times, each against the default (on top of the Triton setting below): cuBLASLt,
# cuDNN's LayerNorm, Triton GEMMs with a persistent autotune cache (a second run reads the tuned configs instead of
# tuning again), and cuDNN GEMM fusions (level 2) among those candidates. The latency-hiding scheduler and command
# buffers off were measured before (benchmarks/RESULTS.md: 1.008x and 0.956x).
no_command_buffers=--xla_gpu_enable_command_buffer=
autotune_cache=${GPU_SH_AUTOTUNE_CACHE:-/tmp/vlp_jax_autotune_cache}
triton="--xla_gpu_enable_triton_gemm=true --xla_gpu_per_fusion_autotune_cache_dir=$autotune_cache"
xla_levers=(--xla_gpu_enable_cublaslt=true --xla_gpu_enable_cudnn_layer_norm=true "$triton"
            "$triton --xla_gpu_cudnn_gemm_fusion_level=2")

# the patch embedding and embedding-gradient levers: each switch's values in one process, alternating (the same in
# the dry run, so that it checks the values the GPU run takes)
patch_embeddings=conv,matmul embedding_grads=scatter,sorted,drop_after_eot

if (( dry )); then
  # The CPU, the micro shapes, one step: every stage's code path, with the routes the CPU can run.
  export JAX_PLATFORMS=cpu
  micro=(--model_config=tests/support.py)
  b16=(--model=ViT-B-16 "${micro[@]}" --precision=bf16 --batch_size=8 --attention=xla,padded --rounds=2 --steps=1
       --warmup=0 --peak_size=256)
  # the vs_open_clip stage profiles too (the profile stage is the same script with --profile, run separately on a
  # GPU only because there its XLA flags differ)
  vs=(--rows=tiny:8 "${micro[@]}" --precision=fp32 --device=cpu --torch_compile --torch_compile_backend=eager
      --torch_compile_mode=default,reduce-overhead --rounds=2 --steps=1 --warmup=0 --profile=1)
  # rival_autotune is vs_open_clip.py again with other compile modes, which the eager backend ignores
  rival_modes=
  profiled=
  e2e=("${micro[@]}" --precision=fp32 --batch_size=8 --steps=4 --log_every=2 --shards=1 --per_shard=32 --side=64
       --workers=1 --timed_steps=1 --dir="$out/end_to_end_data")
  big=("${micro[@]}" --batch_size=8 --steps=1 --warmup=0 --peak_size=256)
  # CLIP with the SaCo term here, so that a term's way through train_step.py runs too
  lever=(--model=ViT-B-16 "${micro[@]}" --objective=saco --precision=bf16 --steps=1 --warmup=0 --peak_size=256)
  # each lever's code path once (remat with both patch-dropout variants, timed in alternating rounds); the batch and
  # workers levers are train_step.py and end_to_end.py again with another --batch_size or --workers, which the b16
  # and end_to_end stages run
  lever_batch=8 lever_dropouts=0,0.5 lever_remats=true lever_batches= lever_rounds=2 xla_rounds=1 lever_workers=
  # l14 is train_step.py on another ViT preset, which the micro shapes make b16's program again
  l14_on=
  # one run with every lever flag: XLA stops at a flag it does not know, so a typo fails here
  xla_variants=("--variant=${xla_levers[*]}")
  attn=(--batch=2 --heads=2 --head_dim=8 --lengths=17,16t --rounds=2 --steps=1 --warmup=0)
else
  # XLA's Triton GEMM autotuning off: cuBLAS takes the matmuls, and the step compiles in a fraction of the time
  # (with it on, a ViT-B/16 step had not compiled after 130 s on an H200).
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_triton_gemm=false"
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.9
  # one compilation cache for every stage's processes: a program compiled once is not compiled again
  export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/vlp_jax_gpu_cache}
  b16=(--model=ViT-B-16 --precision=bf16 --batch_size=256 --attention=xla,cudnn --rounds=3 --steps=10 --warmup=3)
  vs=(--rows=ViT-B-16:256 --precision=bf16 --device=gpu --torch_compile --torch_compile_mode=default,reduce-overhead
      --rounds=3 --steps=10 --warmup=2)
  rival_modes=default,max-autotune
  profiled=5
  e2e=(--model=ViT-B-16 --precision=bf16 --batch_size=256 --steps=60 --log_every=10)
  big=(--batch_size=256 --steps=5 --warmup=2)
  lever=(--model=ViT-B-16 --precision=bf16 --steps=10 --warmup=3)
  lever_batch=256 lever_dropouts=0,0.5 lever_remats=false,true lever_batches=256,512,1024 lever_rounds=3 xla_rounds=2
  lever_workers=4 l14_on=1
  xla_variants=(--variant=default)
  attn=(--batch=256 --heads=12 --head_dim=64 --lengths=197,77t:8 --rounds=5 --steps=20 --warmup=3)
  for flag in "${xla_levers[@]}"; do xla_variants+=("--variant=$flag"); done
fi

for name in $stages; do
  case $name in
    b16) stage b16 150 python3 benchmarks/train_step.py "${b16[@]}" ;;
    # two processes share the GPU: jax takes under half of its memory, torch the rest
    vs_open_clip) stage vs_open_clip 240 env XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 python3 benchmarks/vs_open_clip.py \
                    "${vs[@]}" --attention="$(fastest_route)" ;;
    end_to_end) stage end_to_end 150 python3 benchmarks/end_to_end.py "${e2e[@]}" --attention="$(fastest_route)" ;;
    so400m) stage so400m 110 python3 benchmarks/train_step.py --model=ViT-SO400M-14-SigLIP --objective=siglip \
              --precision=bf16 "${big[@]}" --attention="$(fastest_route)" ;;
    l14) stage_if "$l14_on" "the b16 stage runs the same script on a ViT" l14 100 python3 benchmarks/train_step.py \
           --model=ViT-L-14 --precision=bf16 "${big[@]}" --attention="$(fastest_route)" ;;
    attention) stage attention 150 env XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 python3 benchmarks/attention.py "${attn[@]}" ;;
    profile) stage_if "$profiled" "the vs_open_clip stage profiled" profile 170 \
               env XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 XLA_FLAGS="${XLA_FLAGS:-} $no_command_buffers" \
               python3 benchmarks/vs_open_clip.py "${vs[@]}" --rounds=1 --profile=$profiled \
               --torch_compile_mode=default \
               --attention="$(fastest_route)" ;;
    levers_variants) stage levers_variants 240 python3 benchmarks/train_step.py "${lever[@]}" \
                       --batch_size=$lever_batch --patch_dropout=$lever_dropouts --remat=$lever_remats \
                       --rounds=$lever_rounds --attention="$(fastest_route)" ;;
    levers_batch) stage_if "$lever_batches" "the b16 stage runs the same script" levers_batch 360 \
                    python3 benchmarks/train_step.py "${lever[@]}" --batch_size=$lever_batches \
                    --attention="$(fastest_route)" ;;
    levers_xla) stage levers_xla 600 python3 benchmarks/xla_flags.py --rounds=$xla_rounds \
                  "${xla_variants[@]}" --run_timeout=240 -- "${lever[@]}" --batch_size=$lever_batch \
                  --attention="$(fastest_route)" ;;
    rival_autotune) stage_if "$rival_modes" "the vs_open_clip stage runs the same script" rival_autotune 540 \
                      env XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 python3 benchmarks/vs_open_clip.py "${vs[@]}" \
                      --torch_compile_mode=$rival_modes --attention="$(fastest_route)" ;;
    levers_patch_embedding) stage levers_patch_embedding 200 python3 benchmarks/train_step.py "${lever[@]}" \
                              --batch_size=$lever_batch --patch_embedding=$patch_embeddings --rounds=$lever_rounds \
                              --attention="$(fastest_route)" ;;
    levers_embedding_grad) stage levers_embedding_grad 240 python3 benchmarks/train_step.py "${lever[@]}" \
                             --batch_size=$lever_batch --embedding_grad=$embedding_grads --rounds=$lever_rounds \
                             --attention="$(fastest_route)" ;;
    levers_workers) stage_if "$lever_workers" "end_to_end's stage runs the same script" levers_workers 150 \
                      python3 benchmarks/end_to_end.py "${e2e[@]}" --workers=$lever_workers \
                      --attention="$(fastest_route)" ;;
  esac
done
echo "== done in $(( SECONDS - started ))s; rows in $out"
