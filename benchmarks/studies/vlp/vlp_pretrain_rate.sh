#!/usr/bin/env bash
# Is the pre-training *rate* what made VLP's pre-training transfer negatively? vlp_pretrain_pool.sh
# pre-trained at noam factor 1 (peak 2.6e-3 at D=256), a rate at which even captioning from new
# weights is worse than at factor 0.25 (vlp_finetune_lr.sh: test CIDEr-D 1.22 vs 1.52). Here the
# same pool pre-training (1 epoch of masked-token prediction over the 20,000 images' captions,
# mixed masks) runs at factor 0.25 (peak 6.4e-4), then, every fine-tuning at factor 0.25:
#   - captioning on the 3,000 labelled images, 4 epochs (as vlp_pretrain_pool.sh, whose
#     new-weights arm few_new is the control), and new weights for 11 epochs (as many steps in all);
#   - captioning on 300 labelled images, 12 epochs (360 steps, 150 warm-up), from the low-rate
#     pre-training, from the factor-1 one and from new weights, and new weights for 80 epochs;
#   - VQA (Adam 1e-4) on the 3,000 labelled images' questions, 3 and 7 epochs from each start, and
#     on the 300's, 20 and 56 epochs from each start (the other images are split "pool": their
#     captions were pre-training text, their questions are not used);
#   - the 56-epoch VQA pair on the 300's again at Adam 3e-4 (is 1e-4 too low to move the
#     pre-trained start off the majority answer on size questions?).
# Results: benchmarks/results/vlp.md. About 2.5 hours on one core.
# Needs the world and runs of vlp_pretrain_pool.sh in OUT_DIR. vlp_small, one thread.
# Usage: bash benchmarks/studies/vlp/vlp_pretrain_rate.sh OUT_DIR   (default runs/vlp_pool)
set -euo pipefail
out=${1:-runs/vlp_pool}
source "$(dirname "$0")/vlp_common.sh"
world=$out/world
[ -e $out/pre/last ] || bash "$(dirname "$0")/vlp_pretrain_pool.sh" "$out"
common=(data.features=$world/features.h5 data.min_count=1 train.progress=false train.batch_size=50
        train.schedule.factor=0.25)

# caption RUN ARGS...: train vlp_small into $out/RUN unless it is there
caption() { local run=$1; shift
  [ -e $out/$run/best ] || catcap train --config configs/models/vlp_small.yaml "$@" out_dir=$out/$run; }
# vqa RUN SPLIT_FILE EPOCHS ["--fresh --lr X"]: VQA from the low-rate pre-training (--fresh: its
# architecture only; the fourth argument's words go to catcap vqa train)
vqa() { [ -e $out/$1/best ] || catcap vqa train --checkpoint $out/pre_lo/last --out $out/$1 --epochs $3 \
    --dataset $2 --no-progress ${4:-}; }

pool_pretraining $world
[ -e $out/pre_lo/last ] || catcap train "${pretrain[@]}" train.epochs=1 out_dir=$out/pre_lo
few=("${common[@]}" data.dataset=$out/dataset_pool.json data.train_split=few train.epochs=4 train.schedule.warmup=600)
[ -e $out/dataset_300.json ] || mark_few "$world/dataset_shapes.json" "$out/dataset_300.json" 300
f300=("${common[@]}" data.dataset=$out/dataset_300.json data.train_split=few train.epochs=12 train.schedule.warmup=150)
caption few_pre_lo "${few[@]}" train.init_from=$out/pre_lo/last
caption f300_pre_lo "${f300[@]}" train.init_from=$out/pre_lo/last
caption f300_pre_hi "${f300[@]}" train.init_from=$out/pre/last
caption f300_new "${f300[@]}"
# new weights for as many steps as pre-training + fine-tuning took (2,000 + 1,200 on the 3,000
# labelled images: 11 epochs = 3,300 steps; 2,000 + 360 on the 300: 80 epochs = 2,400 steps)
caption few_new_long "${few[@]}" train.epochs=11
caption f300_new_long "${f300[@]}" train.epochs=80
for run in few_pre_lo f300_pre_lo f300_pre_hi f300_new few_new_long f300_new_long; do
  [ -e $out/${run}_test.json ] || catcap evaluate --checkpoint $out/$run/best --split test --beam 3 --quiet \
      --output $out/${run}_test.json
done

[ -e $out/dataset_vqa.json ] || mark_pool "$world/dataset_shapes.json" "$out/dataset_vqa.json" 3000
[ -e $out/dataset_vqa300.json ] || mark_pool "$world/dataset_shapes.json" "$out/dataset_vqa300.json" 300
vqa vqa_pre_lo $out/dataset_vqa.json 3
vqa vqa_new $out/dataset_vqa.json 3 --fresh
vqa vqa_pre_lo_long $out/dataset_vqa.json 7
vqa vqa_new_long $out/dataset_vqa.json 7 --fresh  # ~ the pre-training's 2,000 steps more than 3 epochs
vqa vqa300_pre_lo $out/dataset_vqa300.json 20
vqa vqa300_new $out/dataset_vqa300.json 20 --fresh
vqa vqa300_pre_lo_long $out/dataset_vqa300.json 56
vqa vqa300_new_long $out/dataset_vqa300.json 56 --fresh  # 3,024 steps ~ 2,000 + 20 epochs
# is the pre-trained start stuck at the majority answer on sizes because 1e-4 cannot move it?
vqa vqa300_pre_lo_lr3 $out/dataset_vqa300.json 56 "--lr 3e-4"
vqa vqa300_new_lr3 $out/dataset_vqa300.json 56 "--fresh --lr 3e-4"
for run in vqa_pre_lo vqa_new vqa_pre_lo_long vqa_new_long vqa300_pre_lo vqa300_new vqa300_pre_lo_long vqa300_new_long \
    vqa300_pre_lo_lr3 vqa300_new_lr3; do
  [ -e $out/${run}_test.json ] || catcap vqa evaluate --model $out/$run/best --split test --output $out/${run}_test.json
done
