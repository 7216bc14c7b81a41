#!/usr/bin/env bash
# Is "new weights beat the pre-trained start on VQA from 300 labelled images" (vlp_pretrain_rate.sh's
# 56-epoch pair at Adam 1e-4: test accuracy 0.919 against 0.847, all of it in size and count
# questions) a property of the starts or of one seed? The same pair again with seeds 1 and 2 (the
# seed orders the fine-tuning batches and initialises the new weights and the VQA head).
# Results: benchmarks/results/vlp.md. About 13 min per run on one core (4 runs); two processes
# (e.g. SEEDS "1" and "2" side by side) halve the wall time.
# Needs the runs of vlp_pretrain_rate.sh in OUT_DIR (the pre-training pre_lo and dataset_vqa300.json).
# Usage: bash benchmarks/studies/vlp/vlp_vqa_seeds.sh OUT_DIR [SEEDS]   (default runs/vlp_pool, "1 2")
set -euo pipefail
out=${1:-runs/vlp_pool}
seeds=${2:-1 2}
[ -e $out/pre_lo/last ] && [ -e $out/dataset_vqa300.json ] || \
  { echo "run benchmarks/studies/vlp/vlp_pretrain_rate.sh $out first (needs $out/pre_lo/last and $out/dataset_vqa300.json)" >&2; exit 2; }
for seed in $seeds; do
  for arm in new pre_lo; do
    run=vqa300_${arm}_long_s$seed
    fresh=$([ $arm = new ] && echo --fresh || true)
    [ -e $out/$run/best ] || catcap vqa train --checkpoint $out/pre_lo/last --out $out/$run --epochs 56 \
        --dataset $out/dataset_vqa300.json --no-progress --seed $seed $fresh
    [ -e $out/${run}_test.json ] || catcap vqa evaluate --model $out/$run/best --split test --output $out/${run}_test.json
  done
done
