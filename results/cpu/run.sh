#!/usr/bin/env bash
# The CPU runs of chapter 8's FHRR models at symbol dimension 256, one PyTorch thread each
# (the residual network with three seeds, the attention models with two).
# Fashion-MNIST: the paper's 2000 steps of batch 128. Run from the repository root:
#     bash results/cpu/run.sh
# Each run writes results/cpu/<name>.json (settings, loss curve, held-out accuracy curve, test result).
set -euo pipefail
fashion() {  # fashion <name> <args...>
  local name=$1; shift
  python -m seqbook.vsa_train --dim 256 --steps 2000 --batch 128 --device cpu --threads 1 --quiet \
    --eval-every 100 --out "results/cpu/$name.json" "$@"
}
for seed in 0 1 2; do
  fashion "fhrr_resnet_n256_seed$seed" --model resnet --seed "$seed"
done
for seed in 0 1; do
  fashion "fhrr_self_n256_seed$seed" --model self --seed "$seed"
  fashion "fhrr_cross_n256_seed$seed" --model cross --seed "$seed"
done
# the authors' sparse class codebook (sparsity 0.75) against the dense one
fashion fhrr_self_sparse_n256_seed0 --model self --codebook-sparsity 0.75
fashion fhrr_cross_sparse_n256_seed0 --model cross --codebook-sparsity 0.75
# the same attention classifiers on molecules (solubility, 3 classes), 500 steps of batch 64
for model in self cross; do
  python -m seqbook.vsa_train --data solubility --model "$model" --dim 256 --steps 500 --batch 64 \
    --device cpu --threads 1 --quiet --eval-every 50 --out "results/cpu/solubility_${model}_n256_seed0.json"
done
