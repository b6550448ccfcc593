#!/usr/bin/env bash
# The whole GPU programme in one command, on a bare CUDA machine with no network:
#
#   bash benchmarks/gpu/prepare.sh          # first, on a machine with network (packs .whl/, .gpu_data/)
#   bash benchmarks/gpu/run.sh all          # then, on the GPU machine, from the repository root
#
# The packed folders (.whl/, .gpu_data/, .gpu_src/) are ignored by git: copy them with the tree.
# Where $OUT names a folder (a lent machine that returns only what is there, 8 files at most),
# perf/, gpu_logs/ and the FHRR results go into it at the end as one archive, gpu_run.tar.gz, and
# Triton's autotuning results as triton_autotune.tar.gz (unpack both in the repository root; carry
# .triton_cache to the next machine).
#
# Steps (each one also runs alone: run.sh tests, run.sh gpt, ...), each bounded to under 10 minutes:
#   tests      the unit tests, every device-parametrised one on CUDA too  -> gpu_logs/tests.txt
#   notebooks  every chapter executed on CUDA under nbval (errors and asserts) -> gpu_logs/notebooks.txt
#   bench      fast paths against built-ins, scaling with length        -> perf/cuda.txt, perf/cuda.json
#   gpt        GPT-2-small throughput and MFU, beside Hugging Face's GPT-2 -> perf/cuda.json ("mfu"), perf/gpt.json
#   long       time against length up to 16k (attention, linear attention, scans, Mamba),
#              generation with and without the KV cache, and per token against the number of
#              key/value heads of chapter 6's Llama-style model          -> perf/long_context.json
#   kernels    chapter 10's readable linear attention, gated recurrence, delta rule and Mamba scans
#              beside the production kernels (flash-linear-attention, mamba_ssm): outputs and gradients
#              checked on the GPU, then time and memory against length -> perf/kernels.json
#   train      the training command on the GPU: one plain process, then torchrun with one process,
#              DDP and FSDP over NCCL, bf16, GPT-2-small's sizes on characters; tokens/s and peak
#              memory in each JSON log                                    -> perf/gpt_train/*.json
#   fhrr       the FHRR paper-scale runs (n = 1024, 2000 steps)          -> results/fhrr_*.json
# Knobs: SEQBOOK_GPU_NOTEBOOKS (which notebooks), SEQBOOK_GPU_NB_JOBS (notebooks at once),
# SEQBOOK_GPU_NB_LOG (log name under gpu_logs/, to run several notebook streams side by side),
# SEQBOOK_GPU_GPT_ARGS (e.g. "--profile --variants loss-only,chunked-ce,cudagraphs"), SEQBOOK_GPU_SECONDS (time for 'all', default 540),
# SEQBOOK_GPU_SKIP (steps 'all' leaves out, e.g. "bench fhrr").
# 'all' runs kernels, long, bench, gpt and train first and alone (their timings), in that order of value,
# then tests, notebooks and fhrr side by side.
# A copy of the tree without .git records the commit it measures from SEQBOOK_COMMIT (set it when copying).
#
# SEQBOOK_GPU_DRY=1 runs every step at toy size on the CPU, to check the programme itself.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dry=${SEQBOOK_GPU_DRY:-0}

if [ -d .whl ] && ! python3 -c "import nbval, pooch, faker" 2>/dev/null; then
  (  # once, even when several steps start side by side
    flock 9
    [ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.installed; }
  ) 9> /tmp/seqbook-wheels.lock
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
[ -d .gpu_data ] && export SEQBOOK_DATA="$root/.gpu_data"
export TQDM_DISABLE=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
# Triton's compiled kernels and autotuning results: fla's kernels took minutes to autotune on their
# first call on an H200 (chunk_linear_attn: 4 min in float32, before its first timing), and a lent
# machine starts bare. The results (*.autotune.json, small) come back in $OUT; unpacked here and
# carried to the next machine, they leave only the winning configurations to compile.
export TRITON_CACHE_DIR="$root/.triton_cache"

if [ "$dry" = 1 ]; then  # the dry run writes nothing the project keeps
  perf=gpu_logs/dry/perf; results=gpu_logs/dry/results
  device=cpu; fhrr_args=(--dim 64 --steps 20 --blocks 2 --train-size 2000); gpt_args=(--dry); long_args=(--dry)
  bench_args=(--smoke); nb_filter=(chapters/09_losses.ipynb); kernel_args=(--dry)
  train_args=(--n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 4 --steps 3 --warmup 1
              --eval-every 3 --eval-windows 4 --threads 1)
  test_paths=(tests/package/test_utils.py)
else
  perf=perf; results=results
  device=cuda; fhrr_args=(--dim 1024 --steps 2000 --batch 128); gpt_args=(--peer hf); long_args=()
  bench_args=(--scaling); nb_filter=(${SEQBOOK_GPU_NOTEBOOKS:-chapters/[0-9]*.ipynb}); kernel_args=()
  train_args=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 16 --steps 40
              --warmup 5 --eval-every 40 --eval-windows 16 --bf16)
  test_paths=(tests)
fi
mkdir -p "$perf" "$results" gpu_logs

# 'all' must end inside one 10-minute command: every step's time limit is cut to what is left.
deadline=$((SECONDS + ${SEQBOOK_GPU_SECONDS:-540}))
left() { local l=$((deadline - SECONDS)); [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"; }

step_env() {
  {
    date -u
    nvidia-smi 2>/dev/null || echo "no nvidia-smi"
    python3 -c "import torch, sys; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
  } > gpu_logs/environment.txt 2>&1
}

step_tests() {
  # The device fixture (tests/conftest.py) adds 'cuda' to every device-parametrised test.
  OMP_NUM_THREADS=3 timeout "$(left 570)" python3 -m pytest -q -p no:cacheprovider "${test_paths[@]}" --deselect tests/rendered/test_book_browser.py \
    -n 4 --durations=15 > gpu_logs/tests.txt 2>&1
  echo "tests exit $?" >> gpu_logs/tests.txt
}

step_notebooks() {
  # nbval-lax: every cell runs and every assert must hold; printed values are not compared (they
  # were recorded on a CPU). One notebook at a time, so each one's time is its own, unless
  # SEQBOOK_GPU_NB_JOBS > 1: then that many at once (per-cell times in the log's durations).
  local log=gpu_logs/${SEQBOOK_GPU_NB_LOG:-notebooks}.txt
  : > "$log"
  local jobs=${SEQBOOK_GPU_NB_JOBS:-1}
  if [ "$jobs" -gt 1 ]; then
    timeout "$(left 400)" python3 -m pytest -q -p no:cacheprovider --nbval-lax -n "$jobs" --dist loadfile \
      --durations=0 "${nb_filter[@]}" >> "$log" 2>&1
    echo "NOTEBOOKS exit $?" >> "$log"
    return
  fi
  for nb in "${nb_filter[@]}"; do
    local t0=$SECONDS
    timeout "$(left 400)" python3 -m pytest -q -p no:cacheprovider --nbval-lax --durations=8 "$nb" >> "$log" 2>&1
    local rc=$?
    echo "NOTEBOOK $nb exit $rc seconds $((SECONDS - t0))" >> "$log"
  done
}

step_bench() {
  timeout "$(left 150)" python3 -m benchmarks --device "$device" "${bench_args[@]}" --out "$perf" --quiet \
    > gpu_logs/bench.txt 2>&1
  local rc=$?
  echo "bench exit $rc" >> gpu_logs/bench.txt
  return $rc
}

step_gpt() {
  timeout "$(left 240)" python3 -m benchmarks.gpu.gpt_throughput --device "$device" "${gpt_args[@]}" \
    ${SEQBOOK_GPU_GPT_ARGS:-} \
    --json "$perf/gpt.json" --merge-into "$perf/$device.json" > gpu_logs/gpt.txt 2>&1
  local rc=$?
  echo "gpt exit $rc" >> gpu_logs/gpt.txt
  return $rc
}

step_long() {
  timeout "$(left 200)" python3 -m benchmarks.gpu.long_context --device "$device" "${long_args[@]}" \
    --json "$perf/long_context.json" > gpu_logs/long.txt 2>&1
  local rc=$?
  echo "long exit $rc" >> gpu_logs/long.txt
  return $rc
}

step_kernels() {
  # not --quiet: each check and row is logged as it ends, with the seconds since the start
  # --resume: the computations that an earlier, interrupted run of this commit finished are kept
  timeout "$(left 300)" python3 -m benchmarks.gpu.kernels --device "$device" "${kernel_args[@]}" \
    --resume --json "$perf/kernels.json" > gpu_logs/kernels.txt 2>&1
  local rc=$?
  echo "kernels exit $rc" >> gpu_logs/kernels.txt
  return $rc
}

step_train() {
  # rank 0 writes each log; torchrun's one process runs the same code path as many would (NCCL on CUDA)
  local out="$perf/gpt_train" common=("${train_args[@]}" --device "$device" --quiet)
  mkdir -p "$out"; : > gpu_logs/train.txt
  timeout "$(left 120)" python3 -m seqbook.gpt_train "${common[@]}" --json-log "$out/single.json" \
    >> gpu_logs/train.txt 2>&1
  local rc=$? failed=0
  echo "train single exit $rc" >> gpu_logs/train.txt
  [ "$rc" = 0 ] || failed=1
  for par in ddp fsdp; do
    timeout "$(left 120)" python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
      -m seqbook.gpt_train "${common[@]}" --parallel "$par" --json-log "$out/$par.json" \
      >> gpu_logs/train.txt 2>&1
    rc=$?
    echo "train $par exit $rc" >> gpu_logs/train.txt
    [ "$rc" = 0 ] || failed=1
  done
  return $failed
}

step_fhrr() {
  : > gpu_logs/fhrr.txt
  for model in self cross resnet; do
    timeout "$(left 300)" python3 -m seqbook.vsa_train --model "$model" "${fhrr_args[@]}" --device "$device" \
      --eval-every 100 --quiet --out "$results/fhrr_$model.json" >> gpu_logs/fhrr.txt 2>&1
    echo "fhrr $model exit $?" >> gpu_logs/fhrr.txt
  done
}

# A timing step that ends well leaves gpu_logs/done/<step> naming the commit it measured; 'all'
# skips a step whose mark names this commit, so that the next slot (with gpu_logs/ unpacked from the
# last one's archive and carried) goes on with what is left.
commit=${SEQBOOK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
once() {
  local mark=gpu_logs/done/$1
  if [ -f "$mark" ] && [ "$(cat "$mark")" = "$commit" ]; then
    echo "$1: done at this commit, skipped" >> gpu_logs/skipped.txt
    return 0
  fi
  "step_$1" && mkdir -p gpu_logs/done && echo "$commit" > "$mark"
}

case "${1:-all}" in
  all)  # SEQBOOK_GPU_SKIP="bench fhrr" leaves steps out (e.g. when the device time is short)
    skip=" ${SEQBOOK_GPU_SKIP:-} "
    step_env
    # by value: what no run has measured yet (the kernels), then re-runs of what an older commit
    # measured, then the GPT and the training command (both measured at a65c586)
    [[ $skip == *" kernels "* ]] || once kernels
    [[ $skip == *" long "* ]] || once long
    [[ $skip == *" bench "* ]] || once bench
    [[ $skip == *" gpt "* ]] || once gpt
    [[ $skip == *" train "* ]] || once train
    step_tests & step_notebooks & { [[ $skip == *" fhrr "* ]] || step_fhrr; } & wait ;;
  timings)  # the measurements alone: bench, gpt, long, kernels
    step_env
    step_bench
    step_gpt
    step_long
    step_kernels ;;
  checks)  # the tests and the notebooks side by side
    step_tests & step_notebooks & wait ;;
  env|tests|notebooks|bench|gpt|long|kernels|train|fhrr) "step_$1" ;;
  check)  # after a first 'all': the tests, the notebooks and the GPT run again, without bench and fhrr
    step_env
    step_gpt
    step_tests & step_notebooks & wait ;;
  *) echo "usage: run.sh [all|timings|checks|env|tests|notebooks|bench|gpt|long|kernels|train|fhrr]" >&2; exit 2 ;;
esac
tail -n 3 gpu_logs/*.txt
# A lent machine returns only what is under $OUT, and at most 8 files: one archive of the
# measurements and logs (unpack it in the repository root)
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  tar -czf "$OUT/gpu_run.tar.gz" "$perf" gpu_logs $(ls "$results"/fhrr_*.json 2>/dev/null)
  if [ -d .triton_cache ]; then
    find .triton_cache -name '*.autotune.json' -print0 | tar -czf "$OUT/triton_autotune.tar.gz" --null -T -
  fi
fi
