# shellcheck shell=bash
# Sourced by the hand-written scripts (handwritten-quick.sh, handwritten-ab.sh) in the guest:
# load the disk's driver (without udev nothing else does, as in iomatrix's agent) and set `dev`
# to the kernel name of the disk with serial iomatrix0.
modprobe virtio_blk
dev=
for _ in $(seq 300); do
  for block in /sys/block/vd*; do
    if [ "$(cat "$block/serial" 2>/dev/null)" = iomatrix0 ]; then dev=${block##*/}; fi
  done
  [ -n "$dev" ] && break
  sleep 0.1
done
[ -n "$dev" ] || { echo "no disk with serial iomatrix0" >&2; exit 1; }
