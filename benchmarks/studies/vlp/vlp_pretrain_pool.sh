#!/usr/bin/env bash
# Pre-training on more than the fine-tuning data (VLP's situation: pre-train on a large pool of
# image-caption pairs, fine-tune on a smaller labelled set). A shapes world of 20,000 training
# images; the first 3,000 are the labelled set ("few" in a copy of the split file). Masked-token
# pre-training for 1 epoch over all 20,000 images' captions (2,000 steps), then captioning on the
# 3,000 for 4 epochs at peak rate 6.4e-4 (noam factor 0.25, the best rate for new weights in
# vlp_finetune_lr.sh), against the same 4 epochs from new weights. vlp_small, one thread.
# Usage: bash benchmarks/studies/vlp/vlp_pretrain_pool.sh OUT_DIR
set -euo pipefail
out=${1:-runs/vlp_pool}
source "$(dirname "$0")/vlp_common.sh"
world=$out/world
[ -e $world/features.h5 ] || catcap synth --out $world --train 20000 --val 250 --test 250
mark_few "$world/dataset_shapes.json" "$out/dataset_pool.json" 3000
common=(data.features=$world/features.h5 data.min_count=1 train.progress=false train.batch_size=50)
# pre-training reads every training caption (the original split file: all 20,000 images)
[ -e $out/pre/last ] || catcap train --config configs/models/vlp_small.yaml "${common[@]}" data.dataset=$world/dataset_shapes.json \
    train.mlm.enabled=true train.epochs=1 train.schedule.warmup=600 out_dir=$out/pre
few=("${common[@]}" data.dataset=$out/dataset_pool.json data.train_split=few train.epochs=4
     train.schedule.warmup=600 train.schedule.factor=0.25)
[ -e $out/few_pre/best ] || catcap train --config configs/models/vlp_small.yaml "${few[@]}" train.init_from=$out/pre/last out_dir=$out/few_pre
[ -e $out/few_new/best ] || catcap train --config configs/models/vlp_small.yaml "${few[@]}" out_dir=$out/few_new
for run in few_pre few_new; do
  catcap evaluate --checkpoint $out/$run/best --split test --beam 3 --output $out/${run}_test.json
done
