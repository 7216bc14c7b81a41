#!/usr/bin/env bash
# Why does the pre-trained VLP start never learn the size questions of VQA from 300 labelled images
# (vlp_vqa_seeds.sh: 0.55-0.63 against 0.82-0.97 for new weights, in every seed)? The masked-token
# probe (vlp_size_probe.py) says the 1-epoch pre-training (pre_lo, 2,000 steps) cannot fill a masked
# size word from the image: it scores at the more frequent family. Does longer pre-training learn
# size, and does VQA from it then beat new weights? The same pre-training resumed (the same noam
# schedule, factor 0.25) to 2, 3, 4 and 5 epochs, each epoch's model kept and probed; then the
# 56-epoch VQA of vlp_vqa_seeds.sh (Adam 1e-4, seeds 0, 1 and 2) from the 5-epoch model.
# Results: benchmarks/results/vlp.md. About 10 min per pre-training epoch and 15 min for the VQA run
# on one core. Needs the runs of vlp_pretrain_rate.sh in OUT_DIR.
# Usage: bash benchmarks/studies/vlp/vlp_pretrain_length.sh OUT_DIR [EPOCHS] [VQA_FROM] [SEEDS]
#        (default runs/vlp_pool "2 3 4 5" 5 "0 1 2"; seed 0's run has no _s suffix)
set -euo pipefail
out=${1:-runs/vlp_pool}
epochs=${2:-2 3 4 5}
vqa_from=${3:-5}
seeds=${4:-0 1 2}
source "$(dirname "$0")/vlp_common.sh"
world=$out/world
[ -e $out/pre_lo/last ] && [ -e $out/dataset_vqa300.json ] || \
  { echo "run benchmarks/studies/vlp/vlp_pretrain_rate.sh $out first (needs $out/pre_lo/last and $out/dataset_vqa300.json)" >&2; exit 2; }
pool_pretraining $world
[ -e $out/pre_len ] || cp -r $out/pre_lo $out/pre_len
for k in $epochs; do
  [ -e $out/pre_len_e$k/last ] || {
    catcap train "${pretrain[@]}" train.epochs=$k out_dir=$out/pre_len --resume
    mkdir -p $out/pre_len_e$k && cp -r $out/pre_len/last $out/pre_len_e$k/last; }
  python "$(dirname "$0")/vlp_size_probe.py" $out/pre_len_e$k/last | tee $out/pre_len_e${k}_probe.txt
done
for seed in $seeds; do
  run=vqa300_pre_len_e$vqa_from$([ $seed = 0 ] || echo _s$seed)
  [ -e $out/$run/best ] || catcap vqa train --checkpoint $out/pre_len_e$vqa_from/last --out $out/$run --epochs 56 \
      --dataset $out/dataset_vqa300.json --no-progress --seed $seed
  [ -e $out/${run}_test.json ] || catcap vqa evaluate --model $out/$run/best --split test --output $out/${run}_test.json
done
