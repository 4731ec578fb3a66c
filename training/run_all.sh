#!/usr/bin/env bash
# Regenerate everything the models need, from scratch, as the shipped bundle was made.
# Needs: apt-get install espeak-ng; pip install -e '.[train]'. Takes about 2 hours on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
$PY training/make_corpus.py                      # shipped eval windows + training set (training/work/train)
$PY training/make_tokenizer.py                   # as2d_cli/assets/models/tokenizer.json, ctc_chars.json
# The shipped models were trained with these step counts (see docs/models.md); each run
# resumes from training/work/<model>/ckpt.pt if interrupted.
$PY training/train.py --model target  --threads 1 --max-steps "${TARGET_STEPS:-4571}" --batch-frames 4000 &
$PY training/train.py --model drafter --threads 1 --max-steps "${DRAFTER_STEPS:-10078}" --batch-frames 4000
$PY training/train.py --model ctc     --threads 1 --max-steps "${CTC_STEPS:-1017}" --batch-frames 4000
wait
$PY training/export.py                           # ONNX files + models.json + training logs
