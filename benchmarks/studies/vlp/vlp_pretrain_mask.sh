#!/usr/bin/env bash
# Which pre-training mask transfers to captioning? vlp_finetune_lr.sh pre-trains with the seq2seq
# or the bidirectional mask at random (train.mlm.seq2seq_ratio 0.5, VLP's mix); here the seq2seq
# mask only (ratio 1.0: every masked word is predicted from the image and the words before it,
# the situation of captioning), same 4 epochs, then the same 4 captioning epochs at each rate.
# Compare with runs of vlp_finetune_lr.sh (same world, same OUT_DIR).
# Usage: bash benchmarks/studies/vlp/vlp_pretrain_mask.sh WORLD_DIR OUT_DIR
set -euo pipefail
world=${1:-runs/world}
out=${2:-runs/vlp_lr}
source "$(dirname "$0")/vlp_common.sh"
shapes_data "$world"
[ -e $out/pre_s2s/last ] || catcap train --config configs/models/vlp_small.yaml "${data[@]}" train.mlm.enabled=true \
    train.mlm.seq2seq_ratio=1.0 train.epochs=4 out_dir=$out/pre_s2s
for factor in 1.0 0.25; do
  [ -e $out/pre_s2s_f$factor/best ] || catcap train --config configs/models/vlp_small.yaml "${data[@]}" \
      train.init_from=$out/pre_s2s/last train.epochs=4 train.schedule.factor=$factor out_dir=$out/pre_s2s_f$factor
  catcap evaluate --checkpoint $out/pre_s2s_f$factor/best --split test --beam 3 --output $out/pre_s2s_f${factor}_test.json
done
