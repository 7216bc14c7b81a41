#!/usr/bin/env bash
# Issue 37, part 4: the paper's experiment on real data, as the paper ran it. On the Flickr8k Lite2
# recipe, three seeds each (train.seed orders the batches and initialises the weights):
#   lane xe    the Transformer, CAT with catcap's default CACA (history entries LayerNorm(c_tmp)) and
#              CAT with the paper's literal CACA (entries c_tmp, model.history.normalize=false), XE + AWC
#   lane lstm  Up-Down against Up-Down + CACA + AWC, then CAT (literal) without AWC, seed 0 (Fig. 5's
#              "without AWC" curve)
#   lane scst  SCST (CIDEr-D, mean of 5 samples) for the arms named in ARMS, from each seed's best XE
# Every run is scored on the 1,000 val photos at beam 3 (results saved for the paired bootstrap) and,
# for CACA runs, its history weight per step is recorded (catcap analyze history, 250 val photos).
# The summary (per seed, mean and spread, pooled paired bootstrap): benchmarks/flickr8k_seeds.py.
# Per run on one core, the two lanes side by side: Transformer 74 min, CAT 87-92, Up-Down 46-56,
# Up-Down + CACA 61, SCST 19-23 (benchmarks/flickr8k.md); each lane is one process at one thread,
# so two lanes share the 2-core machine.
# Lanes share the work: a lane takes a run only while it holds the run's lock
# (OUT_DIR/.<run>.lock, flock; freed when the lane's process ends, even killed), and skips a run
# another lane holds, so `xe; scst` beside `lstm; xe; scst` keeps both cores busy to the end.
# Interrupt at will: a rerun resumes each training from its last checkpoint (--resume) and skips
# whatever is finished. Lane scst skips an arm whose XE run is not finished yet (rerun it later).
# Finished runs outlive the machine: each scored run's small files (corpus scores, the 1,000 val captions,
# its training log, its config, its history curves; no weights) are copied into RECORD
# (default benchmarks/results/flickr8k_seeds, committed), written to a temporary folder and renamed,
# and a lane skips any run RECORD holds. The summary reads RECORD (benchmarks/flickr8k_seeds.py).
# Checkpoints are not recorded, so lane xe trains the SCST run of each arm in SCST_ARMS (default
# "cat cat_literal transformer": every arm of lane xe; SCST_ARMS= for none) right after its XE run, from the XE checkpoint
# on this machine.
# XE_ARMS="transformer cat_literal" limits lane xe to those arms (default all three); SEEDS="0" to seeds.
# Lane record copies every finished run of OUT_DIR into RECORD (runs scored by an older script).
# Usage: bash benchmarks/flickr8k_seeds.sh xe|lstm|scst|record [OUT_DIR] [ARMS for scst, default SCST_ARMS]
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
lane=${1:?usage: flickr8k_seeds.sh xe|lstm|scst|record [OUT_DIR] [ARMS]}
out=${2:-runs/flickr8k_seeds}
seeds=${SEEDS:-0 1 2}
record=${RECORD:-benchmarks/results/flickr8k_seeds}
scst_arms=${SCST_ARMS-cat cat_literal transformer}
for f in data/flickr8k/dataset_flickr8k.json data/flickr8k/lite2.h5; do
  [ $lane = record ] || [ -e $f ] || { echo "missing $f: make it as configs/experiments/flickr8k_cat_lite2.yaml says" >&2; exit 2; }
done
declare -A config=(
  [transformer]=flickr8k_transformer_lite2 [cat]=flickr8k_cat_lite2 [cat_literal]=flickr8k_cat_lite2_literal
  [cat_literal_noawc]=flickr8k_cat_lite2_literal [updown]=flickr8k_updown_lite2 [updown_caca]=flickr8k_updown_caca_lite2)
declare -A extra=([cat_literal_noawc]="train.awc.enabled=false")
mkdir -p $out

# claim RUN: hold RUN's lock (true), or say that another lane holds it (false); release with `release`
claim() {
  exec {lock}>"$out/.$(basename $1).lock"
  flock -n $lock && return 0
  exec {lock}>&-
  echo "[seeds] $1 is being trained by another lane: skipped here" >&2
  return 1
}
release() { exec {lock}>&-; }

# score RUN: beam-3 val results and scores of RUN/best; for CACA models the history curve of the
# top decoder layer (RUN/history) and of each lower one (RUN/history_layerK, K = 0 the bottom)
score() {
  local run=$1
  [ -e $run/val_beam3.json ] || catcap evaluate --checkpoint $run/best --split val --beam 3 --quiet \
      --save-results $run/val_beam3_results.json --output $run/val_beam3.json
  grep -q '"cross_attention": "\(light_\)\?caca"' $run/best/config.json 2>/dev/null || return 0
  [ -e $run/history/history_weight.json ] || \
    catcap analyze history --checkpoint $run/best --out $run/history --split val --limit 250 --quiet
  local layers=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["checkpoints"][0]["num_layers"])' \
      $run/history/history_weight.json)
  for ((k = 0; k < layers - 1; k++)); do
    [ -e $run/history_layer$k/history_weight.json ] || catcap analyze history --checkpoint $run/best \
        --out $run/history_layer$k --layer $k --split val --limit 250 --quiet
  done
}

# recorded RUN: RECORD holds RUN's files (it finished and was scored, maybe on another machine)
recorded() { [ -e $record/$(basename $1)/val_beam3_results.json ]; }

# keep RUN: copy a finished, scored RUN's small files into RECORD/RUN (temporary folder, renamed)
keep() {
  local run=$1 name=$(basename $1)
  recorded $run && return 0
  mkdir -p $record
  local tmp=$(mktemp -d $record/.$name.XXXXXX)
  # the corpus scores (the per-image ones, 270 kB a run, follow from the captions and references)
  python -c 'import json, sys; s = json.load(open(sys.argv[1])); s.pop("per_image", None); json.dump(s, open(sys.argv[2], "w"), indent=1)' \
      $run/val_beam3.json $tmp/val_beam3.json
  cp $run/val_beam3_results.json $run/log.jsonl $tmp/
  [ ! -e $run/machine.jsonl ] || cp $run/machine.jsonl $tmp/  # what trained it (catcap train writes it)
  cp $run/best/config.json $tmp/config.json
  for h in $run/history $run/history_layer*; do
    [ -e $h/history_weight.json ] || continue
    mkdir -p $tmp/$(basename $h) && cp $h/history_weight.json $tmp/$(basename $h)/
  done
  chmod 755 $tmp
  mv -T $tmp $record/$name
  echo "[seeds] $run recorded in $record/$name" >&2
}

# train RUN ARM SEED [OVERRIDES...]: one training of ARM's config into RUN (resumed if it was
# interrupted, skipped if another lane holds it or RECORD has it), then scored and recorded
train() {
  local run=$1 arm=$2 seed=$3; shift 3
  recorded $run && { echo "[seeds] $run is recorded in $record: skipped" >&2; return 0; }
  claim $run || return 0
  if [ ! -e $run/done ]; then
    local resume=$([ -e $run/last ] && echo --resume || true)
    catcap train --config configs/experiments/${config[$arm]}.yaml out_dir=$run train.seed=$seed \
        train.progress=false ${extra[$arm]:-} "$@" $resume
    touch $run/done
  fi
  score $run
  keep $run
  release
}

# scst ARM SEED: the SCST run of ARM's XE run SEED, from its best checkpoint (skipped, saying why,
# when that XE run is unfinished or its checkpoint is not on this machine)
scst() {
  local arm=$1 seed=$2 xe=$out/${1}_s$2
  recorded $out/${arm}_scst_s$seed && { echo "[seeds] $out/${arm}_scst_s$seed is recorded in $record: skipped" >&2; return 0; }
  if [ ! -e $xe/done ]; then
    if recorded $xe; then
      echo "[seeds] XE run $xe is recorded but its checkpoint is not on this machine: its SCST run skipped (move $record/$(basename $xe) aside to train both again)" >&2
    else
      echo "[seeds] XE run $xe is not finished: its SCST run skipped" >&2
    fi
    return 0
  fi
  train $out/${arm}_scst_s$seed $arm $seed train.objective=scst train.init_from=$xe/best \
      train.epochs=3 train.awc.enabled=false train.scst.baseline=mean train.scst.num_samples=5 \
      train.scst.lr=2.0e-5 train.scst.max_len=16 train.scst.patience=2
}

case $lane in
  xe)   for seed in $seeds; do for arm in ${XE_ARMS:-transformer cat cat_literal}; do
          train $out/${arm}_s$seed $arm $seed
          if [[ " $scst_arms " == *" $arm "* ]]; then scst $arm $seed; fi
        done; done ;;
  lstm) for seed in $seeds; do for arm in updown updown_caca; do train $out/${arm}_s$seed $arm $seed; done; done
        train $out/cat_literal_noawc_s0 cat_literal_noawc 0 ;;
  scst) for seed in $seeds; do for arm in ${3:-$scst_arms}; do scst $arm $seed; done; done ;;
  record) for run in $out/*_s[0-9]*; do
          if [ -e $run/done ] && [ -e $run/val_beam3_results.json ]; then keep $run; fi
        done ;;
  *) echo "unknown lane $lane: xe, lstm, scst or record" >&2; exit 2 ;;
esac
