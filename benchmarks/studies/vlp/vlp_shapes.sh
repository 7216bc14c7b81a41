#!/usr/bin/env bash
# Does VLP's masked-token pre-training help? On the built-in shapes world (the demo's world:
# 3,000 train images), vlp_small at one thread; each comparison gives both arms the same number of
# optimizer steps. Results: benchmarks/results/vlp.md.
#   captioning: pre-train 4 epochs (masked tokens) + caption 4 epochs  vs  caption 8 epochs
#   VQA:        pre-train 4 epochs + VQA 3 epochs  vs  the same architecture, new weights, VQA 5 epochs
#               (4 pre-training epochs ~ 1,200 steps ~ 2 VQA epochs of ~550 steps)
# Usage: bash benchmarks/studies/vlp/vlp_shapes.sh WORLD_DIR OUT_DIR      (WORLD_DIR from `catcap demo` or `catcap synth`)
set -euo pipefail
world=${1:-runs/demo/world}
out=${2:-runs/vlp_shapes}
source "$(dirname "$0")/vlp_common.sh"
shapes_data "$world"
catcap train --config configs/models/vlp_small.yaml "${data[@]}" train.mlm.enabled=true train.epochs=4 out_dir=$out/pre
catcap train --config configs/models/vlp_small.yaml "${data[@]}" train.init_from=$out/pre/last train.epochs=4 out_dir=$out/caption_pre
catcap train --config configs/models/vlp_small.yaml "${data[@]}" train.epochs=8 out_dir=$out/caption_only
for run in caption_pre caption_only; do
  catcap evaluate --checkpoint $out/$run/best --split test --beam 3 --output $out/${run}_test.json
done
catcap vqa train --checkpoint $out/pre/last --out $out/vqa_pre --epochs 3 --no-progress
catcap vqa train --checkpoint $out/pre/last --out $out/vqa_fresh --epochs 5 --fresh --no-progress
for run in vqa_pre vqa_fresh; do
  catcap vqa evaluate --model $out/$run/best --split test --output $out/${run}_test.json
done

# Few labelled images: pre-training on all 3,000 training images' captions helps most where
# captions to fine-tune on are few. A copy of the split file marks the first 300 training images
# "few"; captioning on them (12 epochs) from the pre-trained weights vs from new weights.
mark_few "$world/dataset_shapes.json" "$out/dataset_few.json" 300
few=(data.dataset=$out/dataset_few.json data.features=$world/features.h5 data.min_count=1 data.train_split=few
     train.progress=false train.batch_size=50 train.schedule.warmup=150 train.epochs=12)
catcap train --config configs/models/vlp_small.yaml "${few[@]}" train.init_from=$out/pre/last out_dir=$out/few_pre
catcap train --config configs/models/vlp_small.yaml "${few[@]}" out_dir=$out/few_only
for run in few_pre few_only; do
  catcap evaluate --checkpoint $out/$run/best --split test --beam 3 --output $out/${run}_test.json
done
