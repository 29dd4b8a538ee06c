#!/usr/bin/env bash
# What `iomatrix run matrix/quick.yaml` does, written by hand as a user without iomatrix would:
# run inside one VM that bench_harness.py boots with the same vng command, kernel and disk options
# as iomatrix. For each of the six cells: set the scheduler, mkfs, mount, run the same unmodified
# job file, unmount. No read-backs, no dropped caches, no records: the floor iomatrix is held to.
#
#   handwritten-quick.sh JOB_FILE OUT_DIR      (inside the guest; OUT_DIR is shared with the host)
set -euo pipefail
job=$1
out=$2
stamp() { echo "$(cut -d' ' -f1 /proc/uptime) $*" >>"$out/phases.txt"; }
stamp start
# shellcheck source=benchmarks/handwritten-find-disk.sh
. "$(dirname "$0")/handwritten-find-disk.sh"
mnt=/tmp/handwritten
mkdir -p "$mnt"
for fs in ext4 xfs btrfs; do
  for scheduler in none mq-deadline; do
    stamp "cell $fs $scheduler"
    echo "$scheduler" >"/sys/block/$dev/queue/scheduler"
    case $fs in
      ext4) mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$dev" ;;
      xfs) mkfs.xfs -f -q "/dev/$dev" ;;
      btrfs) mkfs.btrfs -f -q "/dev/$dev" ;;
    esac
    mount -t "$fs" "/dev/$dev" "$mnt"
    stamp "workload $fs $scheduler"
    fio --directory="$mnt" --output-format=json+ --output="$out/$fs-$scheduler.json" "$job"
    stamp "teardown $fs $scheduler"
    umount "$mnt"
  done
done
stamp end
