#!/usr/bin/env bash
# Is the fine-tuning rate what made masked-token pre-training look harmful (benchmarks/results/vlp.md)?
# The first comparison fine-tuned the pre-trained VLP with noam at factor 1 and 600 warm-up steps:
# a peak rate of 2.6e-3 at D=256, the rate used to train from new weights. Here both starts are
# fine-tuned for the same 4 captioning epochs (1,200 steps) at the same rates, peak 2.6e-3 and
# peak 6.4e-4 (factor 0.25), so the pre-trained start is compared with new weights at equal
# fine-tuning steps and at each rate. vlp_small, shapes world, one thread per run.
# Usage: bash benchmarks/studies/vlp/vlp_finetune_lr.sh WORLD_DIR OUT_DIR
set -euo pipefail
world=${1:-runs/world}
out=${2:-runs/vlp_lr}
source "$(dirname "$0")/vlp_common.sh"
shapes_data "$world"
[ -e $out/pre/last ] || catcap train --config configs/models/vlp_small.yaml "${data[@]}" train.mlm.enabled=true train.epochs=4 out_dir=$out/pre
for factor in 1.0 0.25; do
  [ -e $out/pre_f$factor/best ] || catcap train --config configs/models/vlp_small.yaml "${data[@]}" train.init_from=$out/pre/last \
      train.epochs=4 train.schedule.factor=$factor out_dir=$out/pre_f$factor
  [ -e $out/new_f$factor/best ] || catcap train --config configs/models/vlp_small.yaml "${data[@]}" \
      train.epochs=4 train.schedule.factor=$factor out_dir=$out/new_f$factor
done
for run in pre_f1.0 new_f1.0 pre_f0.25 new_f0.25; do
  catcap evaluate --checkpoint $out/$run/best --split test --beam 3 --output $out/${run}_test.json
done
