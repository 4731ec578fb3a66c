#!/usr/bin/env bash
# The recipe of the shipped models: corpus, tokenizer, target, drafter and CTC source, and
# their export to as2d_cli/assets/models/ (docs/models.md, "Training" and "How the shipped
# models were made", has the same stages as tables).
#
# Needs: apt-get install espeak-ng; pip install -e '.[train]'. Two cores: where two models
# train at once, each has one thread (`&` ... `wait`). The shipped target alone trained for
# 20 h 48 min (models.json trained.wall_seconds); each 6,000-utterance corpus shard takes
# 10-35 minutes to synthesise on two cores.
#
# Everything is written under training/work/ (not shipped): train/ (the base training set),
# train_shards/N/ (shard N), <model>/ckpt.pt and log.jsonl (a run; train.py resumes from its
# ckpt.pt, so a stopped script can be rerun), <model>_<step>.pt (copies of checkpoints the
# next steps start from). The last step writes the shipped files.
#
# Where this reproduces the shipped models only approximately:
# - the shipped runs annealed by wall clock (train.py --deadline); this script anneals by
#   steps (--anneal-from/--anneal-steps over the same steps), so the learning rate per step,
#   and therefore the weights, match only approximately;
# - the shipped target restarted several times from a checkpoint rebuilt from the ONNX files
#   (training/from_onnx.py: fresh optimiser moments); this script continues one checkpoint;
# - training/distill.py transcribes with the target bundled in as2d_cli/assets/models (ONNX
#   Runtime), not with a checkpoint. The shipped transcripts of each shard are by the target
#   named in the comments, which was the bundled one at the time; this script exports only at
#   the end, so its transcripts come from whatever target is bundled when it runs (to match,
#   run `training/export.py --models target` on that checkpoint before each distill.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
# The evaluation windows (as2d_cli/assets/corpus/, from the fixed seed) and the base training
# set (training/work/train/: 6,000 utterances, log-mel features and texts).
$PY training/make_corpus.py                      # shipped eval windows + training set (training/work/train)
# The shared BPE tokenizer and the CTC character table, from the training texts.
$PY training/make_tokenizer.py                   # as2d_cli/assets/models/tokenizer.json, ctc_chars.json

train() {  # model, phase end step, anneal start, anneal steps, extra flags...
  # One train.py call up to step `end`; with an anneal start, the schedule is a re-warm over
  # 150 steps (a later --warmup wins) to --lr and a linear decay to 0 at start + steps.
  local m=$1 end=$2 from=$3 n=$4; shift 4
  $PY training/train.py --model "$m" --threads 1 --max-steps "$end" --batch-frames 4000 \
    ${from:+--anneal-from "$from" --anneal-steps "$n" --warmup 150} "$@"
}
phases() {  # model, lr, inverse-sqrt end, guide start, specaug start, dropout+shard1 start, shard2 start, end
  # The first training stages: the default schedule (peak 1.5e-3, inverse square root) on the
  # base set, then one anneal over the rest, adding the guided-attention loss, SpecAugment,
  # dropout with shard 1 and shard 2 at the given steps (--shards N: the base set + shards 1..N).
  local m=$1 lr=$2 a=$3 g=$4 s=$5 d=$6 s2=$7 e=$8 n=$(( $8 - $3 ))
  train "$m" "$a" "" "" --shards 0
  train "$m" "$g" "$a" "$n" --lr "$lr" --shards 0
  train "$m" "$s" "$a" "$n" --lr "$lr" --shards 0 --guide-weight 2
  train "$m" "$d" "$a" "$n" --lr "$lr" --shards 0 --guide-weight 2 --specaug
  train "$m" "$s2" "$a" "$n" --lr "$lr" --shards 1 --guide-weight 2 --specaug --dropout 0.1
  train "$m" "$e" "$a" "$n" --lr "$lr" --shards 2 --guide-weight 2 --specaug --dropout 0.1
}
# Shards 1-2 (6,000 utterances each, seed offset 100 + N, more random-word text), then target
# stages 1-2 (0 -> 4,949 -> 16,929) beside the separate drafter's (0 -> 10,890 -> 33,514).
$PY training/make_corpus.py --only train --shard 1   # training/work/train_shards/1
$PY training/make_corpus.py --only train --shard 2   # training/work/train_shards/2
phases target  8e-4 4949  5847  8801  10215 13384 16929 &
phases drafter 6e-4 10890 12852 19050 19050 25896 33514
wait
# Shard 3, and one more anneal for each (target stage 3: 16,929 -> 32,624 at peak 6e-4; the
# drafter 33,514 -> 40,848 at 5e-4) with the phoneme CTC auxiliary (training/phonemes.py,
# --aux phones --ctc-weight 0.5) from the given step and shard 3 added from the given step.
$PY training/make_corpus.py --only train --shard 3   # training/work/train_shards/3
phases3() {  # model, lr, anneal start, phones start, shard-3 start, end
  local m=$1 lr=$2 a=$3 p=$4 s3=$5 e=$6 n=$(( $6 - $3 ))
  local base=(--lr "$lr" --guide-weight 2 --specaug --dropout 0.1)
  if [ "$p" -gt "$a" ]; then train "$m" "$p" "$a" "$n" "${base[@]}" --shards 2; fi
  if [ "$s3" -gt "$p" ]; then train "$m" "$s3" "$a" "$n" "${base[@]}" --shards 2 --aux phones --ctc-weight 0.5; fi
  train "$m" "$e" "$a" "$n" "${base[@]}" --shards 3 --aux phones --ctc-weight 0.5
}
phases3 target 6e-4 16929 18114 19075 32624 &
phases3 drafter 5e-4 33514 33514 33514 40848
wait
# Shards 4-5. Target stage 4 (32,624 -> 38,339) on them alone with the target flags
# (--lr 2e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 --specaug --dropout 0.1
# --aux phones --ctc-weight 0.5; --aux-head-steps trains a fresh auxiliary head alone first,
# as after training/from_onnx.py); beside it the CTC source from scratch (50 encoder
# frames/s, English utterances only) on the same shards: 0 -> 7,700.
$PY training/make_corpus.py --only train --shard 4   # training/work/train_shards/4
$PY training/make_corpus.py --only train --shard 5   # training/work/train_shards/5
train target 38339 32624 5715 --lr 2e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 --specaug \
  --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 4,5 &
train ctc 7700 0 7700 --lr 1.5e-3 --warmup 300 --specaug --only-sets 4,5
wait
# Shards 6-7. Target stage 5 (38,339 -> 44,220) on them alone; the CTC source continues on
# their reference text (7,700 -> 13,571, peak 5e-4).
$PY training/make_corpus.py --only train --shard 6   # training/work/train_shards/6
$PY training/make_corpus.py --only train --shard 7   # training/work/train_shards/7
train target 44220 38339 5881 --lr 2e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 --specaug \
  --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 6,7 &
train ctc 13571 7700 5871 --lr 5e-4 --warmup 200 --specaug --only-sets 6,7
wait
# Target stage 6 (44,220 -> 55,716): shards 6-7 plus long composites of their short
# utterances (--concat 1.0: 6-20 s items, as long as the evaluation windows). The shipped run
# used both threads (train() uses one: the same steps, other rounding).
train target 55716 44220 11496 --lr 2e-4 --warmup 200 --guide-weight 2 --specaug \
  --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 6,7 --concat 1.0
# Shards 8-9. Target stage 7 (55,716 -> 66,651) on shards 6-9 with composites drawn afresh
# every epoch (--fresh-concat).
$PY training/make_corpus.py --only train --shard 8   # training/work/train_shards/8
$PY training/make_corpus.py --only train --shard 9   # training/work/train_shards/9
train target 66651 55716 10935 --lr 2e-4 --warmup 200 --guide-weight 2 --specaug \
  --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 6,7,8,9 --concat 1.0 --fresh-concat
# The separate drafter gets the target flags at --lr 3e-4 on shards 6-9 with fresh composites
# (40,848 -> 52,276), then the CTC source continues on shards 6-9 (13,571 -> 18,083), while
# target stage 8 (66,651 -> 76,554) runs on shards 6-9 again on the other core.
{ train drafter 52276 40848 11428 --lr 3e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 --specaug \
    --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 6,7,8,9 --concat 1.0 --fresh-concat
  train ctc 18083 13571 4512 --lr 5e-4 --warmup 200 --specaug --only-sets 6,7,8,9; } &
train target 76554 66651 9903 --lr 2e-4 --warmup 200 --guide-weight 2 --specaug \
  --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 6,7,8,9 --concat 1.0 --fresh-concat
wait
# Shards 10-12, and the three models on them alone, one thread each: target stage 9
# (76,554 -> 83,012) on one core; on the other the drafter (52,276 -> 60,101), then the CTC
# source (18,083 -> 22,356, its shipped weights).
$PY training/make_corpus.py --only train --shard 10  # training/work/train_shards/10
$PY training/make_corpus.py --only train --shard 11  # training/work/train_shards/11
$PY training/make_corpus.py --only train --shard 12  # training/work/train_shards/12
{ train drafter 60101 52276 7825 --lr 3e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 --specaug \
    --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 10,11,12 --concat 1.0 --fresh-concat
  train ctc 22356 18083 4273 --lr 5e-4 --warmup 200 --specaug --only-sets 10,11,12; } &
train target 83012 76554 6458 --lr 2e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 --specaug \
  --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 10,11,12 --concat 1.0 --fresh-concat
wait
# Shard 13 and a half-size shard 14 (3,000 utterances); the separate drafter's last stage on
# them alone (60,101 -> 63,737). The target does not train on shards 13-14.
$PY training/make_corpus.py --only train --shard 13  # training/work/train_shards/13
$PY training/make_corpus.py --only train --shard 14 --train-utterances 3000
train drafter 63737 60101 3636 --lr 3e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 --specaug \
  --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets 13,14 --concat 1.0 --fresh-concat
# From here the target trains with bfloat16 autocast (--bf16) and the target flags plus
# --concat 1.0 --fresh-concat on the newest shards, one wall-clock anneal per stage.
target_recipe() {  # the target's training flags from stage 10 on (bf16): phase end step, anneal start, anneal steps, sets
  local end=$1 from=$2 n=$3 sets=$4; shift 4
  train target "$end" "$from" "$n" --bf16 --lr 2e-4 --warmup 200 --aux-head-steps 300 --guide-weight 2 \
    --specaug --dropout 0.1 --aux phones --ctc-weight 0.5 --only-sets "$sets" --concat 1.0 --fresh-concat "$@"
}
# Shard 15 and the step-83,012 target's transcripts of it (training/distill.py writes
# target_tokens.json beside the shard). Target stage 10 (83,012 -> 93,243) on shard 15 on one
# core; on the other, shared-encoder drafter run 1 (18,000 steps, training/work/drafter_shared):
# the separate drafter's decoder (fresh cross-attention K/V) on a frozen copy of the step-83,012
# target's encoder, trained on the target's transcripts (--labels target) plus a KL term to its
# next-token distributions (--teacher, --kd-weight 0.5).
$PY training/make_corpus.py --only train --shard 15  # training/work/train_shards/15
$PY training/distill.py --set 15                     # the step-83,012 target's transcripts
cp training/work/target/ckpt.pt training/work/target_83012.pt
cp training/work/drafter/ckpt.pt training/work/drafter_63737.pt
{ $PY training/train.py --model drafter --out drafter_shared --threads 1 --bf16 --max-steps 18000 \
    --shared-encoder training/work/target_83012.pt --init-decoder training/work/drafter_63737.pt \
    --teacher training/work/target_83012.pt --kd-weight 0.5 --labels target --lr 5e-4 --warmup 200 \
    --guide-weight 2 --dropout 0.1 --only-sets 15 --concat 1.0 --fresh-concat \
    --anneal-from 0 --anneal-steps 18000; } &
target_recipe 93243 83012 10231 15
wait
# export.py reads training/work/<model>: the shared-encoder drafter replaces the separate one
mv training/work/drafter training/work/drafter_separate && mv training/work/drafter_shared training/work/drafter
# Shard 16 and the step-93,243 target's transcripts; target stage 11 (93,243 -> 100,189) on
# shards 15-16 on one core; on the other, drafter run 2 (12,151 steps) on an exact frozen
# copy of the step-93,243 target's encoder with that target as teacher; then run 3 (6,599
# steps) on the step-100,189 target's encoder and teacher. From here the drafter's encoder
# equals the target's, so export.py ships only its cross-attention projection
# (encoder_from: target). Each run is a new --out folder (steps from 0), started from the
# previous run's checkpoint.
$PY training/make_corpus.py --only train --shard 16  # training/work/train_shards/16
$PY training/distill.py --set 16                     # the step-93,243 target's transcripts
cp training/work/target/ckpt.pt training/work/target_93243.pt
cp training/work/drafter/ckpt.pt training/work/drafter_18000.pt
shared_drafter() {  # out, target ckpt, decoder ckpt, steps, extra flags (a later flag wins)...
  # A new shared-encoder drafter run: the target checkpoint's encoder (frozen) and teacher,
  # the decoder from the given checkpoint, the target's transcripts of $SETS, one step anneal
  # (bfloat16 autocast unless BF16 is set empty).
  local out=$1 tgt=$2 dec=$3 n=$4; shift 4
  $PY training/train.py --model drafter --out "$out" --threads 1 ${BF16---bf16} --max-steps "$n" --batch-frames 4000 \
    --shared-encoder "$tgt" --init-decoder "$dec" --teacher "$tgt" --kd-weight 0.5 --labels target --lr 3e-4 \
    --warmup 200 --guide-weight 2 --dropout 0.1 --only-sets "${SETS:-15,16}" --concat 1.0 --fresh-concat \
    --anneal-from 0 --anneal-steps "$n" "$@"
}
shared_drafter drafter_p1 training/work/target_93243.pt training/work/drafter_18000.pt 12151 &
target_recipe 100189 93243 6946 15,16
wait
shared_drafter drafter_p2 training/work/target/ckpt.pt training/work/drafter_p1/ckpt.pt 6599
mv training/work/drafter training/work/drafter_shared_run1 && mv training/work/drafter_p2 training/work/drafter
cat training/work/drafter_shared_run1/log.jsonl training/work/drafter_p1/log.jsonl training/work/drafter_p2/log.jsonl > training/work/drafter/log.tmp && mv training/work/drafter/log.tmp training/work/drafter/log.jsonl  # the shipped log keeps all three runs
# Shard 17, and target stage 12 (100,189 -> 111,465) on it on one core while shard 18 is
# synthesised on the other (one worker), then on shards 17-18 (one anneal throughout). Then
# drafter run 4 (12,075 steps): a third decoder layer (--dec-layers 3, added as the identity)
# on the step-100,189 target's encoder, teacher and transcripts of shards 17-18, beside the
# target; and run 5 (8,838 steps) on the step-111,465 target's encoder and teacher.
$PY training/make_corpus.py --only train --shard 17  # training/work/train_shards/17
$PY training/make_corpus.py --only train --shard 18 --workers 1 &
cp training/work/target/ckpt.pt training/work/target_100189.pt
cp training/work/drafter/ckpt.pt training/work/drafter_6599.pt
target_recipe 102873 100189 11276 17
wait  # shard 18: the same anneal continues on both shards (the shipped run moved at step 102,873)
{ $PY training/distill.py --set 17 && $PY training/distill.py --set 18  # the step-100,189 target's transcripts
  SETS=17,18 shared_drafter drafter3_p1 training/work/target_100189.pt training/work/drafter_6599.pt 12075 --dec-layers 3 --lr 4e-4; } &
target_recipe 111465 100189 11276 17,18
wait
SETS=17,18 shared_drafter drafter3_p2 training/work/target/ckpt.pt training/work/drafter3_p1/ckpt.pt 8838 --dec-layers 3
mv training/work/drafter training/work/drafter_shared_runs1to3 && mkdir training/work/drafter && cp training/work/drafter3_p2/ckpt.pt training/work/drafter/
cat training/work/drafter_shared_runs1to3/log.jsonl training/work/drafter3_p1/log.jsonl training/work/drafter3_p2/log.jsonl > training/work/drafter/log.jsonl
# Shard 19, and target stage 13 (111,465 -> 119,737) on it on one core while shard 20 is
# synthesised on the other, then on shards 19-20. Drafter run 6 (8,191 steps) on the
# step-111,465 target's encoder, teacher and transcripts of shards 19-20; run 7 (3,297 steps)
# on the step-119,737 target's encoder and teacher.
$PY training/make_corpus.py --only train --shard 19  # training/work/train_shards/19
$PY training/make_corpus.py --only train --shard 20 --workers 1 &
cp training/work/target/ckpt.pt training/work/target_111465.pt
cp training/work/drafter/ckpt.pt training/work/drafter_8838.pt
target_recipe 113375 111465 8272 19
wait  # shard 20: the same anneal continues on both shards (the shipped run moved at step 113,375)
{ $PY training/distill.py --set 19 && $PY training/distill.py --set 20  # the step-111,465 target's transcripts
  SETS=19,20 shared_drafter drafter3_p3 training/work/target_111465.pt training/work/drafter_8838.pt 8191 --dec-layers 3; } &
target_recipe 119737 111465 8272 19,20
wait
SETS=19,20 shared_drafter drafter3_p4 training/work/target/ckpt.pt training/work/drafter3_p3/ckpt.pt 3297 --dec-layers 3
mv training/work/drafter training/work/drafter_shared_runs1to5 && mkdir training/work/drafter && cp training/work/drafter3_p4/ckpt.pt training/work/drafter/
cat training/work/drafter_shared_runs1to5/log.jsonl training/work/drafter3_p3/log.jsonl training/work/drafter3_p4/log.jsonl > training/work/drafter/log.jsonl
# Export of the models so far (ONNX files checked against torch, models.json v2 with the
# per-layer decoder contract, training logs into as2d_cli/assets/models/).
$PY training/export.py                           # ONNX files + models.json (v2: per-layer decoder I/O) + training logs
# Shard 21. Target stage 14 (119,737 -> 129,066) on shards 19-21, keeping the checkpoints at
# steps 127,459, 128,104 and 129,066 (the run's last 14 minutes); the shipped target is their
# mean (training/average.py; chosen with training/dev_wer.py on dev and val). Meanwhile drafter
# run 8 (12,569 steps) on the step-119,737 target's encoder and teacher (transcripts of shard
# 21 by that target; shards 19-20 keep the step-111,465 target's); then run 9 (4,546 steps,
# two threads) on the averaged target's encoder and teacher.
$PY training/make_corpus.py --only train --shard 21  # training/work/train_shards/21
cp training/work/target/ckpt.pt training/work/target_119737.pt
cp training/work/drafter/ckpt.pt training/work/drafter_3297.pt
{ $PY training/distill.py --set 21                   # the step-119,737 target's transcripts
  SETS=19,20,21 shared_drafter drafter3_p5 training/work/target_119737.pt training/work/drafter_3297.pt 12569 --dec-layers 3; } &
for end in 127459 128104 129066; do  # the checkpoints averaged into the shipped target
  target_recipe $end 119737 9329 19,20,21 --aux-head-steps 0  # (its checkpoint has a trained CTC head)
  cp training/work/target/ckpt.pt training/work/target_$end.pt
done
wait
$PY training/average.py training/work/target_avg.pt training/work/target_127459.pt training/work/target_128104.pt training/work/target_129066.pt
cp training/work/target_avg.pt training/work/target/ckpt.pt
SETS=19,20,21 shared_drafter drafter3_p6 training/work/target/ckpt.pt training/work/drafter3_p5/ckpt.pt 4546 --dec-layers 3 --threads 2
mv training/work/drafter training/work/drafter_shared_runs1to7 && mkdir training/work/drafter && cp training/work/drafter3_p6/ckpt.pt training/work/drafter/
cat training/work/drafter_shared_runs1to7/log.jsonl training/work/drafter3_p5/log.jsonl training/work/drafter3_p6/log.jsonl > training/work/drafter/log.jsonl
# Shard 22 and the shipped target's transcripts of it (exported first: distill.py reads the
# bundled target), then drafter run 10 (6,187 steps, two threads, float32) from run 9; the
# shipped drafter is the mean of run 10's checkpoints at steps 4,465, 5,407 and 6,187.
$PY training/make_corpus.py --only train --shard 22  # training/work/train_shards/22
$PY training/export.py --models target
$PY training/distill.py --set 22 --workers 2         # the shipped target's transcripts
averaged_drafter_run() {  # out, sets, anneal steps, the steps whose checkpoints are averaged...
  # One float32 two-thread run from the current drafter, stopped at each listed step to keep
  # its checkpoint (and resumed); the mean of those becomes the drafter, its log appended.
  local out=$1 sets=$2 n=$3 end kept=(); shift 3
  for end in "$@"; do
    SETS=$sets BF16= shared_drafter "$out" training/work/target/ckpt.pt training/work/drafter/ckpt.pt "$n" \
      --dec-layers 3 --threads 2 --max-steps "$end"
    cp "training/work/$out/ckpt.pt" "training/work/${out}_$end.pt" && kept+=("training/work/${out}_$end.pt")
  done
  $PY training/average.py "training/work/${out}_avg.pt" "${kept[@]}"
  cp "training/work/${out}_avg.pt" training/work/drafter/ckpt.pt
  cat "training/work/$out/log.jsonl" >> training/work/drafter/log.jsonl
}
averaged_drafter_run drafter_p10 22 6187 4465 5407 6187
# Shard 23 and its transcripts by the same target, then drafter run 11 (7,328 steps, two
# threads, float32) from run 10's averaged weights on shards 22-23; the shipped drafter is
# the mean of its final checkpoint and those near steps 5,600 and 6,450 (on disk 16 and 8
# minutes before the end of a 70-minute wall-clock run).
$PY training/make_corpus.py --only train --shard 23  # training/work/train_shards/23
$PY training/distill.py --set 23 --workers 2         # the shipped target's transcripts
averaged_drafter_run drafter_p11 22,23 7328 5600 6450 7328
# Shards 24-26, weighted toward meeting speech (where the drafter departs from the target
# most: 24 half, 25 a third, 26 the five settings in turn), their transcripts, then drafter
# run 12 (14,180 steps, two threads, float32) from run 11 on all three; the shipped drafter
# is the mean of its checkpoints at steps 9,430, 11,550 and 14,180. (The shipped run 12
# started from run 11 rebuilt from its ONNX files, training/from_onnx.py: the 8-bit
# decoder's rounded weights, not the float average this script keeps.)
$PY training/make_corpus.py --only train --shard 24 --settings meeting,read,meeting,multilingual,meeting,accented,meeting,sung
$PY training/make_corpus.py --only train --shard 25 --settings meeting,read,multilingual,meeting,accented,sung
$PY training/make_corpus.py --only train --shard 26
for n in 24 25 26; do $PY training/distill.py --set "$n" --workers 2; done
averaged_drafter_run drafter_p12 24,25,26 14180 9430 11550 14180
# Shards 27-29 on the same plan (27 half meeting speech, 28 a third, 29 the five settings in
# turn), their transcripts, then drafter run 13 (13,924 steps) from run 12's averaged weights
# on all three. Run 13 alone fell on val; the shipped drafter is the mean of run 12's and run
# 13's averaged weights.
$PY training/make_corpus.py --only train --shard 27 --settings meeting,read,meeting,multilingual,meeting,accented,meeting,sung
$PY training/make_corpus.py --only train --shard 28 --settings meeting,read,multilingual,meeting,accented,sung
$PY training/make_corpus.py --only train --shard 29
for n in 27 28 29; do $PY training/distill.py --set "$n" --workers 2; done
averaged_drafter_run drafter_p13 27,28,29 13924 9111 11272 13924
$PY training/average.py training/work/drafter_runs12-13.pt training/work/drafter_p12_avg.pt training/work/drafter_p13_avg.pt
cp training/work/drafter_runs12-13.pt training/work/drafter/ckpt.pt
# Shards 30 (half meeting speech) and 31 (a third), their transcripts, then drafter run 14
# (16,587 steps) from the mean of runs 12 and 13 on all of shards 24-31. Run 14 alone fell on
# val; the shipped drafter is the mean of runs 12's, 13's and 14's averaged weights.
$PY training/make_corpus.py --only train --shard 30 --settings meeting,read,meeting,multilingual,meeting,accented,meeting,sung
$PY training/make_corpus.py --only train --shard 31 --settings meeting,read,multilingual,meeting,accented,sung
for n in 30 31; do $PY training/distill.py --set "$n" --workers 2; done
averaged_drafter_run drafter_p14 24,25,26,27,28,29,30,31 16587 10924 13299 16587
$PY training/average.py training/work/drafter_runs12-14.pt training/work/drafter_p12_avg.pt training/work/drafter_p13_avg.pt training/work/drafter_p14_avg.pt
cp training/work/drafter_runs12-14.pt training/work/drafter/ckpt.pt
# Shards 32 and 33 (half meeting speech) and their transcripts, then the drafter's look-ahead
# head (12,000 steps on the frozen drafter over shards 24-33; docs/models.md, "The look-ahead
# head"), which export.py turns into drafter_ahead_decoder.onnx.
for n in 32 33; do
  $PY training/make_corpus.py --only train --shard "$n" --settings meeting,read,meeting,multilingual,meeting,accented,meeting,sung
  $PY training/distill.py --set "$n" --workers 2
done
$PY training/train_ahead.py --sets 24,25,26,27,28,29,30,31,32,33 --hidden 384 --steps 12000
# The shipped files: target and CTC in float32, the drafter's decoder with 8-bit weights
# (export.py --int8 default), models.json and the training logs.
$PY training/export.py                           # ONNX files (the drafter's decoder 8-bit) + models.json + training logs
# The K70 profile prices the lookahead source from models.json (ahead.macs_share).
$PY training/make_k70_profile.py
