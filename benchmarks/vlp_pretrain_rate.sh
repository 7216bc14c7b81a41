#!/usr/bin/env bash
# Is the pre-training *rate* what made VLP's pre-training transfer negatively? vlp_pretrain_pool.sh
# pre-trained at noam factor 1 (peak 2.6e-3 at D=256), a rate at which even captioning from new
# weights is worse than at factor 0.25 (vlp_finetune_lr.sh: test CIDEr-D 1.22 vs 1.52). Here the
# same pool pre-training (1 epoch of masked-token prediction over the 20,000 images' captions,
# mixed masks) runs at factor 0.25 (peak 6.4e-4), then:
#   - captioning on the 3,000 labelled images, 4 epochs at factor 0.25 (as vlp_pretrain_pool.sh;
#     its new-weights arm, few_new, is the control);
#   - captioning on only 300 labelled images, 12 epochs (360 steps, 150 warm-up) at factor 0.25,
#     from the low-rate pre-training, from the factor-1 pre-training, and from new weights.
# Then (parts 2 and 3 below) new-weights controls with as many steps in all, and VQA from the
# 3,000 and from 300 labelled images. Results: benchmarks/results/vlp.md. Runs for about 2.5 hours.
# Needs the world and runs of vlp_pretrain_pool.sh in OUT_DIR. vlp_small, one thread.
# Usage: bash benchmarks/vlp_pretrain_rate.sh OUT_DIR   (default runs/vlp_pool)
set -euo pipefail
out=${1:-runs/vlp_pool}
source "$(dirname "$0")/vlp_common.sh"
world=$out/world
[ -e $out/pre/last ] || bash "$(dirname "$0")/vlp_pretrain_pool.sh" "$out"
common=(data.features=$world/features.h5 data.min_count=1 train.progress=false train.batch_size=50
        train.schedule.factor=0.25)
[ -e $out/pre_lo/last ] || catcap train --config configs/models/vlp_small.yaml "${common[@]}" \
    data.dataset=$world/dataset_shapes.json train.mlm.enabled=true train.epochs=1 train.schedule.warmup=600 \
    out_dir=$out/pre_lo
few=("${common[@]}" data.dataset=$out/dataset_pool.json data.train_split=few train.epochs=4 train.schedule.warmup=600)
[ -e $out/few_pre_lo/best ] || catcap train --config configs/models/vlp_small.yaml "${few[@]}" \
    train.init_from=$out/pre_lo/last out_dir=$out/few_pre_lo
[ -e $out/dataset_300.json ] || mark_few "$world/dataset_shapes.json" "$out/dataset_300.json" 300
f300=("${common[@]}" data.dataset=$out/dataset_300.json data.train_split=few train.epochs=12 train.schedule.warmup=150)
[ -e $out/f300_pre_lo/best ] || catcap train --config configs/models/vlp_small.yaml "${f300[@]}" \
    train.init_from=$out/pre_lo/last out_dir=$out/f300_pre_lo
[ -e $out/f300_pre_hi/best ] || catcap train --config configs/models/vlp_small.yaml "${f300[@]}" \
    train.init_from=$out/pre/last out_dir=$out/f300_pre_hi
[ -e $out/f300_new/best ] || catcap train --config configs/models/vlp_small.yaml "${f300[@]}" out_dir=$out/f300_new
for run in few_pre_lo f300_pre_lo f300_pre_hi f300_new; do
  [ -e $out/${run}_test.json ] || catcap evaluate --checkpoint $out/$run/best --split test --beam 3 --quiet \
      --output $out/${run}_test.json
done
# --- part 2: equal *total* steps for the new-weights controls, and VQA ---
# Captioning from new weights for as many steps as pre-training + fine-tuning took (2,000 + 1,200 on
# the 3,000 labelled images: 11 epochs = 3,300 steps; 2,000 + 360 on the 300: 80 epochs = 2,400 steps).
[ -e $out/few_new_long/best ] || catcap train --config configs/models/vlp_small.yaml "${few[@]}" train.epochs=11 \
    out_dir=$out/few_new_long
[ -e $out/f300_new_long/best ] || catcap train --config configs/models/vlp_small.yaml "${f300[@]}" train.epochs=80 \
    out_dir=$out/f300_new_long
for run in few_new_long f300_new_long; do
  [ -e $out/${run}_test.json ] || catcap evaluate --checkpoint $out/$run/best --split test --beam 3 --quiet \
      --output $out/${run}_test.json
done
# VQA on the 3,000 labelled images' questions (the other 17,000 images are split "pool": their
# captions were pre-training text, their questions are not used), Adam 1e-4 as vlp_shapes.sh:
# from the low-rate pre-training for 3 epochs, from new weights for 3 epochs (equal fine-tuning
# steps) and for 7 epochs (about the pre-training's 2,000 steps more).
[ -e $out/dataset_vqa.json ] || mark_pool "$world/dataset_shapes.json" "$out/dataset_vqa.json" 3000
vqa=(--dataset $out/dataset_vqa.json --no-progress)
[ -e $out/vqa_pre_lo/best ] || catcap vqa train --checkpoint $out/pre_lo/last --out $out/vqa_pre_lo --epochs 3 "${vqa[@]}"
[ -e $out/vqa_new/best ] || catcap vqa train --checkpoint $out/pre_lo/last --fresh --out $out/vqa_new --epochs 3 "${vqa[@]}"
[ -e $out/vqa_new_long/best ] || catcap vqa train --checkpoint $out/pre_lo/last --fresh --out $out/vqa_new_long \
    --epochs 7 "${vqa[@]}"
for run in vqa_pre_lo vqa_new vqa_new_long; do
  [ -e $out/${run}_test.json ] || catcap vqa evaluate --model $out/$run/best --split test --output $out/${run}_test.json
done
# --- part 3: VQA from few labelled images (the questions of the first 300 training images; the
# other 19,700 are "pool") and the 7-epoch pre-trained arm of part 2 ---
[ -e $out/vqa_pre_lo_long/best ] || catcap vqa train --checkpoint $out/pre_lo/last --out $out/vqa_pre_lo_long \
    --epochs 7 "${vqa[@]}"
[ -e $out/dataset_vqa300.json ] || mark_pool "$world/dataset_shapes.json" "$out/dataset_vqa300.json" 300
v300=(--dataset $out/dataset_vqa300.json --no-progress)
[ -e $out/vqa300_pre_lo/best ] || catcap vqa train --checkpoint $out/pre_lo/last --out $out/vqa300_pre_lo --epochs 20 "${v300[@]}"
[ -e $out/vqa300_new/best ] || catcap vqa train --checkpoint $out/pre_lo/last --fresh --out $out/vqa300_new --epochs 20 "${v300[@]}"
[ -e $out/vqa300_new_long/best ] || catcap vqa train --checkpoint $out/pre_lo/last --fresh --out $out/vqa300_new_long \
    --epochs 56 "${v300[@]}"
[ -e $out/vqa300_pre_lo_long/best ] || catcap vqa train --checkpoint $out/pre_lo/last --out $out/vqa300_pre_lo_long \
    --epochs 56 "${v300[@]}"
for run in vqa_pre_lo_long vqa300_pre_lo vqa300_new vqa300_new_long vqa300_pre_lo_long; do
  [ -e $out/${run}_test.json ] || catcap vqa evaluate --model $out/$run/best --split test --output $out/${run}_test.json
done
