# Shared by the benchmarks/studies/vlp/vlp_*.sh scripts: sourced, not run.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# shapes_data WORLD: sets the array `data` to the overrides that train vlp_small on a shapes
# world's split file and features (batch 50, 600 warm-up steps, no progress bars).
shapes_data() {
  data=(data.dataset=$1/dataset_shapes.json data.features=$1/features.h5 data.min_count=1 train.progress=false
        train.batch_size=50 train.schedule.warmup=600)
}

# pool_pretraining WORLD: sets the array `pretrain` to the arguments of the low-rate masked-token
# pre-training on a pool world's captions (vlp_small, noam factor 0.25, 600 warm-up steps, batch 50;
# add train.epochs and out_dir): vlp_pretrain_rate.sh's pre_lo, resumed by vlp_pretrain_length.sh.
pool_pretraining() {
  pretrain=(--config configs/models/vlp_small.yaml data.dataset=$1/dataset_shapes.json data.features=$1/features.h5
            data.min_count=1 train.progress=false train.batch_size=50 train.schedule.factor=0.25
            train.schedule.warmup=600 train.mlm.enabled=true)
}

# mark_few SPLIT_IN SPLIT_OUT N: a copy of a split file whose first N training images are in a
# split of their own, "few" (the labelled set of a few-labels or larger-pool comparison).
mark_few() {
  python - "$1" "$2" "$3" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
train = [im for im in data["images"] if im["split"] == "train"]
for im in train[:int(sys.argv[3])]:
    im["split"] = "few"
json.dump(data, open(sys.argv[2], "w"))
PY
}

# mark_pool SPLIT_IN SPLIT_OUT N: a copy of a split file whose training images after the first N are
# in a split of their own, "pool" (unlabelled for a fine-tuning that reads the "train" split).
mark_pool() {
  python - "$1" "$2" "$3" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
train = [im for im in data["images"] if im["split"] == "train"]
for im in train[int(sys.argv[3]):]:
    im["split"] = "pool"
json.dump(data, open(sys.argv[2], "w"))
PY
}
