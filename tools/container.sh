#!/usr/bin/env bash
# The runner container (images/runner/Dockerfile): docker where a Docker engine answers, else podman.
#
#   tools/container.sh engine       print the engine that will be used (docker or podman)
#   tools/container.sh install      install podman, runc, catatonit and mmdebstrap if missing
#                                   (apt, root only; otherwise print the command and fail)
#   tools/container.sh build        build the image; where the base image cannot be pulled, bootstrap
#                                   it from Debian packages (tools/bootstrap-base-image.sh)
#   tools/container.sh ensure       build the image only if it does not exist yet
#   tools/container.sh probe        exit 0 when the engine can run a container here (podman: a
#                                   static busybox as the root filesystem, no image needed)
#   tools/container.sh run CMD...   run CMD in the image: the repository mounted at /iomatrix, the
#                                   kernel cache (~/.cache/iomatrix or $IOMATRIX_CACHE) at
#                                   /root/.cache/iomatrix, /dev/kvm passed through when this user can
#                                   open it (the harness still probes it and falls back to TCG)
#   tools/container.sh base         make sure the Dockerfile's base image (bare Debian) is here
#   tools/container.sh bare CMD...  run CMD in the bare base image, a machine with nothing installed
#                                   (tools/fresh-machine.sh): it gets only what this machine has for
#                                   reaching the package registries (see cmd_bare)
#
# Environment: IOMATRIX_IMAGE (default iomatrix-runner:latest), CONTAINER_ENGINE (docker|podman,
# default: detect), CONTAINER_ARGS (extra run options, split on spaces, e.g. "-v /data:/data"),
# IOMATRIX_SHM_SIZE (the container's /dev/shm, for ram-backed disks; default 4g).
# Podman runs as `podman --runtime runc --cgroup-manager cgroupfs`, the combination that works on
# hosts without systemd or a writable cgroup v2 (see docs/DESIGN.md).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IOMATRIX_IMAGE:-iomatrix-runner:latest}
DOCKERFILE=images/runner/Dockerfile
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
# The base image, as the Dockerfile's first FROM names it.
BASE=$(awk 'toupper($1) == "FROM" { print $2; exit }' "$DOCKERFILE")

say() { echo "iomatrix: $*" >&2; }

engine() {
  if [ -n "${CONTAINER_ENGINE:-}" ]; then
    echo "$CONTAINER_ENGINE"
  elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    echo docker
  else
    echo podman
  fi
}

# The engine's command as an array: ENGINE_CMD.
set_engine() {
  case "$(engine)" in
    docker) ENGINE_CMD=(docker) ;;
    podman) ENGINE_CMD=("${PODMAN[@]}") ;;
    *) say "CONTAINER_ENGINE must be docker or podman, not $(engine)"; exit 2 ;;
  esac
}

cmd_install() {
  if [ "$(engine)" = docker ]; then
    return 0
  fi
  local missing=()
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  # `run --init` (signals reach make, not an init-less PID 1) needs podman's catatonit.
  [ -x /usr/libexec/podman/catatonit ] || [ -x /usr/bin/catatonit ] || missing+=(catatonit)
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    say "missing container tools: ${missing[*]}"
    say "install them with: sudo apt-get install --no-install-recommends ${missing[*]}"
    exit 1
  fi
  say "installing container tools: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# docker.io/library/<name> for a bare Docker Hub name, as docker itself resolves it.
qualified() {
  case "$1" in
    */*) echo "$1" ;;
    *) echo "docker.io/library/$1" ;;
  esac
}

ensure_base_podman() {
  local full
  full=$(qualified "$BASE")
  if "${PODMAN[@]}" image exists "$full" || "${PODMAN[@]}" image exists "$BASE"; then
    return 0
  fi
  say "base image $BASE is not here; trying to pull $full"
  if [ "${IOMATRIX_NO_PULL:-}" != 1 ] && timeout 120 "${PODMAN[@]}" pull -q "$full" >/dev/null; then
    return 0
  fi
  say "cannot pull $full; bootstrapping it from Debian packages"
  bash tools/bootstrap-base-image.sh "$BASE"
}

# The build context: the repository's tracked and not-ignored files (no .venv, results, caches
# or .tools), mtimes kept, so the layer cache sees only real changes.
stage_context() {
  local ctx=$1
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard \
      | tar --null --files-from=- --ignore-failed-read --warning=no-failed-read -cf - \
      | tar -xf - -C "$ctx"
  else
    tar --exclude=./.venv --exclude=./.tools --exclude=./.stamps --exclude=./results \
      --exclude=./.git --exclude='*cache*' -cf - . | tar -xf - -C "$ctx"
  fi
}

cmd_build() {
  set_engine
  local start
  CONTEXT=$(mktemp -d "${TMPDIR:-/tmp}/iomatrix-image.XXXXXX")
  trap 'rm -rf "$CONTEXT"' EXIT
  stage_context "$CONTEXT"
  # A CA bundle the host's pip is told to trust (a TLS-intercepting proxy's): lent to the build
  # as a file of the context (empty without one), which every builder can COPY.
  local bundle=${PIP_CERT:-${SSL_CERT_FILE:-}}
  mkdir -p "$CONTEXT/.build"
  if [ -n "$bundle" ] && [ -s "$bundle" ]; then
    cp "$bundle" "$CONTEXT/.build/ca-bundle.pem"
  else
    : >"$CONTEXT/.build/ca-bundle.pem"
  fi
  start=$(date +%s)
  if [ "${ENGINE_CMD[0]}" = docker ]; then
    docker build -t "$IMAGE" -f "$DOCKERFILE" "$CONTEXT"
  else
    ensure_base_podman
    "${PODMAN[@]}" build --pull=never --network=host --layers \
      -t "$IMAGE" -f "$DOCKERFILE" "$CONTEXT"
  fi
  say "image $IMAGE built with ${ENGINE_CMD[0]} in $(( $(date +%s) - start )) s"
}

cmd_base() {
  set_engine
  if [ "${ENGINE_CMD[0]}" = docker ]; then
    docker image inspect "$BASE" >/dev/null 2>&1 || docker pull -q "$BASE" >/dev/null
  else
    ensure_base_podman
  fi
}

# What a container needs to reach PyPI the way this machine does, as run options in
# REGISTRY_ACCESS: pip's configuration and the CA bundle pip and Go are told to trust (a
# TLS-intercepting proxy's; beside the container's own bundle, since mounting over that breaks
# ca-certificates' postinst).
registry_access() {
  REGISTRY_ACCESS=()
  if [ -r /etc/pip.conf ]; then
    REGISTRY_ACCESS+=(-v /etc/pip.conf:/etc/pip.conf:ro)
  fi
  local bundle=${PIP_CERT:-${SSL_CERT_FILE:-}}
  if [ -n "$bundle" ] && [ -s "$bundle" ]; then
    # pip reads PIP_CERT; Go (actionlint's build) and Python's ssl read SSL_CERT_FILE.
    REGISTRY_ACCESS+=(-v "$bundle:/etc/iomatrix-host-ca.pem:ro" -e PIP_CERT=/etc/iomatrix-host-ca.pem
      -e SSL_CERT_FILE=/etc/iomatrix-host-ca.pem)
  fi
}

# apt's date checks as this machine's apt has them set (Acquire::Check-Valid-Until and
# Check-Date, and only where set: a machine whose apt checks them lends nothing). A dated
# snapshot mirror's Release files read as expired otherwise (sid's carries a Valid-Until a week
# on); a container that uses this machine's mirror is told what this machine's apt is told, no
# more (docs/SECURITY.md).
host_apt_dates() {
  apt-config dump 2>/dev/null | grep -E '^Acquire::Check-(Valid-Until|Date) ' || true
}

# A bare machine still reaches the package registries the way this one does, and nothing more is
# lent to it: registry_access, and apt's date checks (a dated snapshot mirror's Release files read
# as expired otherwise).
# CONTAINER_ARGS adds options (e.g. a folder for results), split on spaces.
cmd_bare() {
  cmd_base
  podman_limits
  # The container is the sandbox of kernel builds (bubblewrap makes no namespaces in it).
  local args=(run --rm --init --network=host --shm-size "${IOMATRIX_SHM_SIZE:-4g}"
    -e IOMATRIX_BUILD_SANDBOX=container)
  if [ "${ENGINE_CMD[0]}" = podman ]; then
    args+=("${PODMAN_LIMITS[@]}")
  fi
  registry_access
  args+=("${REGISTRY_ACCESS[@]}")
  # Global: the EXIT trap runs after this function has returned.
  APTCONF=$(mktemp "${TMPDIR:-/tmp}/iomatrix-apt.XXXXXX")
  trap 'rm -f "$APTCONF"' EXIT
  host_apt_dates >"$APTCONF"
  chmod 644 "$APTCONF"
  args+=(-v "$APTCONF:/etc/apt/apt.conf.d/99iomatrix-host:ro")
  if [ -n "${CONTAINER_ARGS:-}" ]; then
    # shellcheck disable=SC2206 # extra options are split on spaces on purpose
    args+=(${CONTAINER_ARGS})
  fi
  # Not exec: the trap removes the apt settings file afterwards.
  "${ENGINE_CMD[@]}" "${args[@]}" "$BASE" "$@"
}

cmd_ensure() {
  set_engine
  if "${ENGINE_CMD[@]}" image inspect "$IMAGE" >/dev/null 2>&1; then
    return 0
  fi
  cmd_build
}

# Podman asks for a million open files and more processes than a host without CAP_SYS_RESOURCE
# lets it raise to (its conmon keeps 32768 processes), and then fails to start the container:
# ask for what we have.
podman_limits() {
  local nofile nproc
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  if [ "$nofile" = unlimited ]; then
    nofile=1048576
  fi
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then
    nproc=32768
  fi
  PODMAN_LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
}

cmd_probe() {
  set_engine
  if [ "${ENGINE_CMD[0]}" = docker ]; then
    docker info >/dev/null
    return
  fi
  command -v podman >/dev/null 2>&1 || { say "podman is not installed"; exit 1; }
  local busybox
  busybox=$(command -v busybox || true)
  if [ -z "$busybox" ] || ! file -L "$busybox" | grep -q 'statically linked'; then
    say "the probe needs a static busybox (Debian: busybox-static)"
    exit 1
  fi
  podman_limits
  CONTEXT=$(mktemp -d "${TMPDIR:-/tmp}/iomatrix-probe.XXXXXX")
  trap 'rm -rf "$CONTEXT"' EXIT
  mkdir -p "$CONTEXT/bin"
  cp "$busybox" "$CONTEXT/bin/busybox"
  "${PODMAN[@]}" run --rm --network=host "${PODMAN_LIMITS[@]}" --rootfs "$CONTEXT" \
    /bin/busybox true
}

# Whether the docker CLI talks to podman's Docker API (a local Actions runner over podman).
docker_is_podman() {
  [ "${ENGINE_CMD[0]}" = docker ] &&
    docker version --format '{{range .Server.Components}}{{.Name}};{{end}}' 2>/dev/null |
    grep -q 'Podman Engine'
}

cmd_run() {
  set_engine
  podman_limits
  local cache=${IOMATRIX_CACHE:-$HOME/.cache/iomatrix}
  mkdir -p "$cache"
  # podman 4.3's Docker API answers a `docker run --rm` with exit status 0 whatever the
  # container's (it waits for the removal, not the exit): a gate's regression (exit 1) passed the
  # check under act. There the container is named, waited for, then removed, its status kept.
  local remove=(--rm) name=""
  if docker_is_podman; then
    name=iomatrix-run-$$-$RANDOM
    remove=(--name "$name")
  fi
  local args=(run "${remove[@]}" --init --network=host
    -v "$PWD:/iomatrix" -w /iomatrix
    -v "$cache:/root/.cache/iomatrix"
    # The host's name, so the cached KVM-or-TCG verdict (keyed by host name, CPU and kernel)
    # in the shared cache applies inside too, instead of a new probe per container.
    --hostname "$(hostname)"
    --shm-size "${IOMATRIX_SHM_SIZE:-4g}")
  if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    args+=(--device /dev/kvm)
  else
    say "no usable /dev/kvm for $(id -un): the container runs its VMs under TCG"
  fi
  if [ "${ENGINE_CMD[0]}" = podman ]; then
    args+=("${PODMAN_LIMITS[@]}")
  fi
  if [ -t 0 ] && [ -t 1 ]; then
    args+=(-it)
  fi
  # The image's venv serves a checkout with the same pins; one with other pins rebuilds it
  # inside (make venv), which needs PyPI as this machine reaches it.
  registry_access
  args+=("${REGISTRY_ACCESS[@]}")
  # The image's apt (the kernel fetch's, the runner image's sources are this machine's mirror)
  # gets this machine's date checks. The file lives in the cache folder, a path this shell and
  # the engine both see (under a local Actions runner a job's /tmp is not the engine's), and is
  # replaced whole each time (a container already running keeps reading the one it mounted).
  local aptconf=$cache/host-apt.conf
  host_apt_dates >"$aptconf.$$"
  chmod 644 "$aptconf.$$"
  mv -fT "$aptconf.$$" "$aptconf"
  args+=(-v "$aptconf:/etc/apt/apt.conf.d/99iomatrix-host:ro")
  local var
  for var in IOMATRIX_ACCEL IOMATRIX_DEBIAN_MIRROR REQUIRE_KVM CI GITHUB_ACTIONS; do
    if [ -n "${!var:-}" ]; then
      args+=(-e "$var")
    fi
  done
  if [ -n "${CONTAINER_ARGS:-}" ]; then
    # shellcheck disable=SC2206 # extra options are split on spaces on purpose
    args+=(${CONTAINER_ARGS})
  fi
  if [ -z "$name" ]; then
    exec "${ENGINE_CMD[@]}" "${args[@]}" "$IMAGE" "$@"
  fi
  local status=0
  "${ENGINE_CMD[@]}" "${args[@]}" "$IMAGE" "$@" || status=$?
  "${ENGINE_CMD[@]}" rm -f "$name" >/dev/null 2>&1 || true
  return "$status"
}

case "${1:-}" in
  engine) engine ;;
  install) cmd_install ;;
  build) cmd_build ;;
  ensure) cmd_ensure ;;
  probe) cmd_probe ;;
  base) cmd_base ;;
  bare) shift; [ $# -gt 0 ] || { say "usage: tools/container.sh bare CMD..."; exit 2; }; cmd_bare "$@" ;;
  run) shift; [ $# -gt 0 ] || { say "usage: tools/container.sh run CMD..."; exit 2; }; cmd_run "$@" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
