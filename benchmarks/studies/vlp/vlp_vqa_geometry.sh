#!/usr/bin/env bash
# Does the region geometry term help VQA? The shapes world's questions include relations ("is
# the X left of the Y") that new-weights VQA answered at chance (benchmarks/results/vlp.md).
# Both arms: vlp_small architecture, new weights (--fresh), VQA 5 epochs at Adam 1e-4; one with
# model.region_geometry=true (each region's box corners and area, docs/vlp.md). The architecture
# comes from a 1-epoch captioning run of each kind (its weights are not used).
# Usage: bash benchmarks/studies/vlp/vlp_vqa_geometry.sh WORLD_DIR OUT_DIR
set -euo pipefail
world=${1:-runs/world}
out=${2:-runs/vlp_geometry}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
data=(data.dataset=$world/dataset_shapes.json data.features=$world/features.h5 data.min_count=1 train.progress=false
      train.batch_size=50 train.epochs=1)
for arm in plain geometry; do
  extra=(); [ $arm = geometry ] && extra=(model.region_geometry=true)
  [ -e $out/arch_$arm/last ] || catcap train --config configs/models/vlp_small.yaml "${data[@]}" "${extra[@]}" out_dir=$out/arch_$arm
  [ -e $out/vqa_$arm/best ] || catcap vqa train --checkpoint $out/arch_$arm/last --out $out/vqa_$arm --epochs 5 --fresh --no-progress
  catcap vqa evaluate --model $out/vqa_$arm/best --split test --output $out/vqa_${arm}_test.json
done
