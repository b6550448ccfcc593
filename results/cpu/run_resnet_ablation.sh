#!/usr/bin/env bash
# Chapter 8's figure-3 experiment at the paper's budget (2000 steps of batch 128) on the CPU,
# one PyTorch thread each: the 24-layer residual network without binding skips, and with skips
# but the standard initial scale (out_scale 1) of each block's last layer, at symbol dimensions
# 64 and 256 (plus the default network, skips and out_scale 0.25, at n = 64; at n = 256 it is
# fhrr_resnet_n256_seed*.json). Run from the repository root:
#     bash results/cpu/run_resnet_ablation.sh
# Each run writes results/cpu/<name>.json (settings, loss curve, held-out accuracy curve, test result).
set -euo pipefail
resnet() {  # resnet <name> <dim> <args...>
  local name=$1 dim=$2; shift 2
  python -m seqbook.vsa_train --model resnet --dim "$dim" --steps 2000 --batch 128 --device cpu \
    --threads 1 --quiet --eval-every 100 --seed 0 --out "results/cpu/$name.json" "$@"
}
for dim in 64 256; do
  resnet "fhrr_resnet_noskip_n${dim}_seed0" "$dim" --no-skip
  resnet "fhrr_resnet_noskip_scale1_n${dim}_seed0" "$dim" --no-skip --out-scale 1
  resnet "fhrr_resnet_scale1_n${dim}_seed0" "$dim" --out-scale 1
done
resnet fhrr_resnet_n64_seed0 64
