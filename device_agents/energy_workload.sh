#!/bin/sh
# as2d energy dry-run workload: keep one core busy for MS milliseconds, then report TOKENS
# body tokens the way a request command must (one AS2D_REQUEST line on stdout).
# Usage: energy_workload.sh MS TOKENS [MIN_MS]
# MIN_MS (as2d energy's {min_ms}: the load a method's last warm-up holds at least) makes it
# run max(MS, MIN_MS) milliseconds.
# It stands in for the native runner's request until that runner is hooked up; it is a
# real CPU load (on the emulated phone it counts as one busy worker).
set -eu
# Android keeps toybox in /system/bin; elsewhere (the emulated phone runs this on the host)
# the usual places hold date.
PATH="$PATH:/system/bin:/usr/bin:/bin"
ms=${1:?usage: energy_workload.sh MS TOKENS}
tokens=${2:?usage: energy_workload.sh MS TOKENS}
min_ms=${3:-0}
if [ "$min_ms" -gt "$ms" ]; then ms=$min_ms; fi
now_ms() { ns=$(date +%s%N); echo $(( ns / 1000000 )); }
start=$(now_ms)
end=$(( start + ms ))
now=$start
while [ "$now" -lt "$end" ]; do
  now=$(now_ms)
done
echo "AS2D_REQUEST body_tokens=$tokens"
