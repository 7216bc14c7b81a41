#!/bin/bash
# The bundled flickr8k-m2 + flickr8k-cat ensemble against each alone on Flickr8k val (1,000 photos),
# beam 3 and at most 20 words (GenerationConfig's defaults, the zoo cards' setting), and the two ways
# of combining the members (catcap/decoding/ensemble.py). Results in benchmarks/flickr8k.md.
# Usage: benchmarks/flickr8k_ensemble.sh OUT_DIR   (run from the repository root; data/flickr8k as in the zoo configs)
set -euo pipefail
out=${1:?usage: benchmarks/flickr8k_ensemble.sh OUT_DIR}
mkdir -p "$out"
metrics=bleu,meteor,rouge,cider
for m in m2 cat; do
  catcap evaluate --checkpoint zoo/flickr8k-$m --split val --metrics $metrics --quiet \
    --output "$out/${m}_scores.json" --save-results "$out/${m}_results.json"
done
catcap evaluate --checkpoint zoo/flickr8k-m2 --checkpoint zoo/flickr8k-cat --split val --metrics $metrics --quiet \
  --output "$out/m2_cat_scores.json" --save-results "$out/m2_cat_results.json"
python -c "
import sys
from catcap import api
ev, _ = api.evaluate_checkpoint(['zoo/flickr8k-m2', 'zoo/flickr8k-cat'], split='val', metrics='$metrics', progress=False,
                                combine='mean_prob', save_results='$out/m2_cat_mean_prob_results.json')
api.write_json_atomic('$out/m2_cat_mean_prob_scores.json', ev.to_json())
"
for a in m2 cat; do
  catcap compare "$out/${a}_results.json" "$out/m2_cat_results.json" --refs data/flickr8k/dataset_flickr8k.json \
    --split val --metrics bleu,meteor,rouge,cider | tee "$out/compare_${a}_vs_m2_cat.txt"
done
catcap compare "$out/m2_cat_results.json" "$out/m2_cat_mean_prob_results.json" --refs data/flickr8k/dataset_flickr8k.json \
  --split val --metrics bleu,meteor,rouge,cider | tee "$out/compare_mean_log_prob_vs_mean_prob.txt"
