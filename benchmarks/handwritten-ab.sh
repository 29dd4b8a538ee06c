#!/usr/bin/env bash
# One side of a kernel A/B as a developer without iomatrix would run it, inside one VM that
# bench_verdict.py boots with the vng command iomatrix builds: REPS times mkfs, mount, the same
# unmodified job file, unmount, on the disk with serial iomatrix0. No read-backs, no records.
#
#   handwritten-ab.sh JOB_FILE OUT_DIR REPS      (inside the guest; OUT_DIR is shared with the host)
set -euo pipefail
job=$1
out=$2
reps=$3
stamp() { echo "$(cut -d' ' -f1 /proc/uptime) $*" >>"$out/phases.txt"; }
stamp start
# shellcheck source=benchmarks/handwritten-find-disk.sh
. "$(dirname "$0")/handwritten-find-disk.sh"
mnt=/tmp/handwritten
mkdir -p "$mnt"
echo none >"/sys/block/$dev/queue/scheduler"
for rep in $(seq 0 $((reps - 1))); do
  stamp "repetition $rep"
  mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$dev"
  mount -t ext4 "/dev/$dev" "$mnt"
  fio --directory="$mnt" --output-format=json --output="$out/rep-$rep.json" "$job"
  umount "$mnt"
done
stamp end
