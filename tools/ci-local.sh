#!/usr/bin/env bash
# This repository's real workflow files, run under nektos/act (a local GitHub Actions runner) over
# a local podman, offline, from a clean clone: what GitHub would run, on this machine.
#
#   tools/ci-local.sh SCENARIO        matrix-gate (default), matrix-action, kernel-gate, nightly
#   tools/ci-local.sh job             one job or event of this repository's own workflows:
#                                     WORKFLOW (e.g. pr.yml), JOB (optional), EVENT (pull_request)
#   tools/ci-local.sh setup           only install act and podman, start nothing
#
# Scenarios (each a repository, an event and the reusable workflows of this clone):
#   matrix-gate   a repository of matrices (docs/workflows/matrix-repository/): its pull request
#                 retunes the device profile (SCENARIO_CHANGE, default "throttle": the disk at
#                 half its IOPS limit; "none": an A/A). The gate runs both sides of `iomatrix ab`
#                 on TCG; then the comment the comment workflow would post is rendered from the
#                 gate's artifact, by this clone's code, as reusable-comment.yml does.
#   matrix-action the same pull request, gated by iomatrix's composite action in a job of the
#                 repository's own (docs/workflows/matrix-action/: `uses: iomatrix/iomatrix@SHA`,
#                 mapped to the clone under test with act's --local-repository)
#   kernel-gate   a kernel tree's pull request with a one-file patch (docs/workflows/kernel-*.yml)
#   nightly       reusable-nightly.yml over a tiny matrix: plan, two shards, merge, the results
#                 branch in a local bare repository, alerts, the regression issue's text
#
# What GitHub itself does (posting comments, Pages, issues, the registry) is not run: the jobs
# write what they would send, and the scenario checks it (docs/ci.md, "Run the workflows on your
# machine").
#
# Everything lands in OUT (default results/ci-local/<time>-<scenario>/): act.log, event.json,
# the repositories, artifacts/ (act's artifact server), outcome.json ({"exit": N, ...}).
# Exit status: act's (0 when every job passed).
#
# Environment: ACT_VERSION (v0.2.89), CI_LOCAL_STATE (where act, the podman socket and the git
# server live; default .tools/ci-local), REQUIRE_KVM (passed to the gate as its input; default 0
# here), SCENARIO_CHANGE (matrix-gate), SCENARIO_BREAK (matrix-gate: kernel-spec-string puts a
# known script bug back into the clone under test, to show the run turns red), NIGHTLY_HISTORY
# (nightly: a repository whose `results` branch the night starts from), ACT_ARGS (more act
# options, split on spaces).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
REPO=$PWD

ACT_VERSION=${ACT_VERSION:-v0.2.89}
STATE=${CI_LOCAL_STATE:-$REPO/.tools/ci-local}
ACT_BIN=$REPO/.tools/act-$ACT_VERSION/act
ACTIONS=${IOMATRIX_ACTIONS_DIR:-$REPO/../shared/external/actions}
SOCKET=$STATE/podman.sock
# The stand-in for GitHub's ubuntu-24.04 image: Debian trixie (node 20 for JavaScript actions,
# git, sudo, make, the docker CLI that talks to podman's API), built here with mmdebstrap since no
# registry can be reached. Its tag is a hash of this recipe, so a changed recipe builds anew.
RUNNER_PACKAGES=git,sudo,make,curl,ca-certificates,python3,python3-venv,zstd,jq,nodejs,docker-cli,xz-utils,procps,file
# The shared libraries a CPython build needs (ssl, sqlite3, ctypes, readline, ...): the Python
# the workflows ask setup-python for (3.11) is lent from this machine (host_python) and runs here.
RUNNER_PYTHON_LIBS=libffi8,libsqlite3-0,libssl3t64,libbz2-1.0,liblzma5,libreadline8t64,libncursesw6,libexpat1,libnsl2,libuuid1,zlib1g
RUNNER_HOOKS=(
  # actions/checkout of another repository or ref fetches https://github.com/OWNER/NAME: here
  # that is a bare repository under /srv/git (mounted into every job container).
  'git config --system url.file:///srv/git/.insteadOf https://github.com/'
  'git config --system uploadpack.allowAnySHA1InWant true'
  'git config --system --add safe.directory "*"'
)

say() { echo "ci-local: $*" >&2; }

# The CA bundle this machine trusts (a TLS-intercepting proxy's, where pip is told of one): the
# runner stand-in trusts it too, as a hosted runner trusts the registries it reaches.
ca_bundle() {
  local bundle=${PIP_CERT:-${SSL_CERT_FILE:-}}
  if [ -n "$bundle" ] && [ -s "$bundle" ]; then echo "$bundle"; fi
}

# apt's date checks as this machine's apt has them (Acquire::Check-Valid-Until, Check-Date; only
# where set), for the runner stand-in: it is this machine's runner and uses its mirror, whose
# Release files a frozen snapshot lets expire. tools/container.sh lends the job's settings on to
# the containers a job starts (the kernel fetch's apt), as it lends this machine's to its own.
# GitHub's runners set none (their mirror is live): a workflow that needs them fails there too.
host_apt_dates() {
  apt-config dump 2>/dev/null | grep -E '^Acquire::Check-(Valid-Until|Date) ' || true
}

runner_image() {
  local key bundle
  bundle=$(ca_bundle)
  key=$( (printf '%s\n' "$RUNNER_PACKAGES" "$RUNNER_PYTHON_LIBS" "${RUNNER_HOOKS[@]}"
    host_apt_dates
    cat "$REPO/tools/ci-local-gh.py"
    if [ -n "$bundle" ]; then cat "$bundle"; fi) | sha256sum | cut -c1-12)
  echo "localhost/iomatrix-act-runner:$key"
}

podman_() { CONTAINERS_CONF=$STATE/containers.conf podman "$@"; }

install_tools() {
  bash tools/container.sh install
  local missing=()
  for tool in uidmap:newuidmap slirp4netns:slirp4netns fuse-overlayfs:fuse-overlayfs; do
    command -v "${tool#*:}" >/dev/null 2>&1 || missing+=("${tool%%:*}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      say "missing: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}"
      exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  fi
  if [ ! -x "$ACT_BIN" ]; then
    command -v go >/dev/null 2>&1 || { say "act is built with Go, which is not installed"; exit 1; }
    say "installing act $ACT_VERSION (go install, through the Go module proxy, about a minute)"
    mkdir -p "$(dirname "$ACT_BIN")"
    CGO_ENABLED=0 GOFLAGS=-modcacherw GOPATH=$REPO/.tools/go GOCACHE=$REPO/.tools/go-cache \
      GOBIN=$(dirname "$ACT_BIN") go install "github.com/nektos/act@$ACT_VERSION" >&2
  fi
}

# podman's Docker API for act and for the docker CLI inside the jobs. runc and cgroupfs: crun fails
# here ("cgroups in hybrid mode not supported"); the ulimits: podman's defaults ask for more than
# the host's hard limits, and every container then fails with "error setting rlimit".
start_service() {
  mkdir -p "$STATE"
  local nofile nproc
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
  cat >"$STATE/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  if [ -S "$SOCKET" ] && curl -sf --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1; then
    return 0
  fi
  rm -f "$SOCKET"
  # The service outlives this script (later runs reuse it), so it must not keep open what this
  # script inherited: `flock /tmp/iomatrix-vm.lock tools/ci-local.sh` hands its lock down as a
  # descriptor, and a service holding it held the machine's VM lock until it was killed.
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done
    CONTAINERS_CONF=$STATE/containers.conf exec setsid podman system service --time=0 \
      "unix://$SOCKET"
  ) >"$STATE/podman-service.log" 2>&1 &
  echo $! >"$STATE/podman-service.pid"
  local _
  for _ in $(seq 50); do
    if curl -sf --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  say "podman's API service did not start: $(tail -3 "$STATE/podman-service.log")"
  exit 1
}

build_runner_image() {
  local image
  image=$(runner_image)
  if podman_ image exists "$image"; then return 0; fi
  say "building the runner stand-in $image (Debian trixie, mmdebstrap, about a minute)"
  local work hooks=() hook
  work=$(mktemp -d "${TMPDIR:-/tmp}/ci-local-runner.XXXXXX")
  for hook in "${RUNNER_HOOKS[@]}"; do hooks+=(--customize-hook="chroot \"\$1\" $hook"); done
  local bundle
  bundle=$(ca_bundle)
  if [ -n "$bundle" ]; then
    hooks+=(--customize-hook="upload $bundle /etc/ssl/certs/ca-certificates.crt")
  fi
  host_apt_dates >"$work/apt-dates.conf"
  hooks+=(--customize-hook="upload $work/apt-dates.conf /etc/apt/apt.conf.d/99iomatrix-host"
    --customize-hook="chmod 644 \"\$1/etc/apt/apt.conf.d/99iomatrix-host\"")
  # GitHub's gh, recording what a workflow would send (tools/ci-local-gh.py).
  hooks+=(--customize-hook="upload $REPO/tools/ci-local-gh.py /usr/local/bin/gh"
    --customize-hook="chmod 755 \"\$1/usr/local/bin/gh\"")
  local mirror
  mirror=$(PYTHONPATH=harness "${VENV:-.venv}/bin/python" -c \
    'from iomatrix.host.kernels import debian_mirror; print(debian_mirror("the runner image"))')
  mmdebstrap --quiet --variant=minbase --include="$RUNNER_PACKAGES,$RUNNER_PYTHON_LIBS" \
    "${hooks[@]}" --format=tar trixie "$work/rootfs.tar" "deb $mirror trixie main" >&2
  podman_ import --quiet --change 'CMD ["bash"]' "$work/rootfs.tar" "$image" >/dev/null
  rm -rf "$work"
}

# The CPython 3.11 this checkout's venv is built on, when it is a build of its own prefix (pyenv's,
# a hosted tool cache's), not a distribution's /usr: the one the jobs' setup-python is lent.
host_python() {
  "${VENV:-.venv}/bin/python" -c 'import sys
if sys.version_info[:2] == (3, 11) and sys.base_prefix != "/usr":
    print(sys.base_prefix)'
}

# act's tool cache (the volume act-toolcache, mounted at /opt/hostedtoolcache in every job) with
# that Python filed as setup-python looks for it: Python/<version>/x64 (a link to its prefix,
# which every job container mounts read-only at the same path) and x64.complete, <version> the
# one it reports; setup-python then finds it instead of downloading one (nothing can be here).
# A hosted runner's cache holds such builds of its own. The check imports what a venv and pip
# need, so a library missing from the runner stand-in fails here, not in a job.
toolcache_python() {
  local prefix
  prefix=$(host_python)
  if [ -z "$prefix" ]; then
    say "no CPython 3.11 build of its own prefix under ${VENV:-.venv}: jobs with setup-python will fail"
    return 0
  fi
  # shellcheck disable=SC2016 # expanded by the bash in the container, not here
  local script='set -eu
version=$("$1/bin/python3.11" -c "import platform; print(platform.python_version())")
"$1/bin/python3.11" -c "import ssl, sqlite3, ctypes, ensurepip, venv, lzma, bz2, zlib"
dir=/opt/hostedtoolcache/Python/$version
mkdir -p "$dir"
ln -sfn "$1" "$dir/x64"
touch "$dir/x64.complete"
echo "$version"'
  local version
  version=$(podman_ run --rm -v act-toolcache:/opt/hostedtoolcache -v "$prefix:$prefix:ro" \
    "$(runner_image)" bash -c "$script" toolcache "$prefix")
  HOST_PYTHON=$prefix
  say "act's tool cache: Python $version (this machine's $prefix, lent read-only)"
}

# The base image the runner image's Dockerfile starts FROM, as a GitHub runner would pull it.
base_image() {
  bash tools/container.sh base
}

setup() {
  install_tools
  [ -x "${VENV:-.venv}/bin/python" ] || make --no-print-directory venv >&2
  start_service
  build_runner_image
  toolcache_python
  base_image
}

# A clean clone of this checkout at OUT/iomatrix; uncommitted changes, if any, committed there on
# top ("ci-local: the work tree"), so a run tests what is on disk and every ref is a commit.
clean_clone() {
  local dest=$1
  git clone --quiet --no-hardlinks "$REPO" "$dest"
  # act names the repository (github.repository) after the origin's URL.
  git -C "$dest" remote set-url origin https://github.com/iomatrix/iomatrix
  if [ -n "$(git status --porcelain --untracked-files=normal)" ]; then
    git diff HEAD --binary | git -C "$dest" apply --index --whitespace=nowarn
    git ls-files --others --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$dest"
    git -C "$dest" add -A
    git -C "$dest" -c user.name=ci-local -c user.email=ci-local@localhost \
      commit --quiet -m "ci-local: the work tree"
  fi
}

# SCENARIO_BREAK=kernel-spec-string: the clone under test gets back the kind of bug act found in
# its first run (a kernel spec handed to kernels.fetch() as a plain string), committed, in the
# code every gate runs before its first VM (workflows/prepare.py): the run must turn red, with
# the traceback in its log, not pass around it.
break_clone() {
  case "${SCENARIO_BREAK:-}" in
    "") return 0 ;;
    kernel-spec-string)
      local code=$1/harness/iomatrix/workflows/prepare.py
      grep -q 'fetch(source) if isinstance(source, KernelSpec)' "$code" || {
        say "workflows/prepare.py no longer fetches a KernelSpec as it did: the break needs updating"
        exit 2
      }
      sed -i 's/fetch(source) if isinstance(source, KernelSpec)/fetch(source.raw) if isinstance(source, KernelSpec)/' "$code"
      commit_all "$1" "ci-local: a kernel spec passed as a string (a deliberate break)" >/dev/null
      ;;
    *) say "SCENARIO_BREAK is kernel-spec-string or empty"; exit 2 ;;
  esac
}

# A bare copy of a repository under the git server's folder, as https://github.com/OWNER/NAME.
serve() {
  local source=$1 name=$2
  rm -rf "$STATE/git/$name"
  mkdir -p "$(dirname "$STATE/git/$name")"
  git clone --quiet --bare "$source" "$STATE/git/$name"
  git -C "$STATE/git/$name" config uploadpack.allowAnySHA1InWant true
}

act_args() {
  ACT=("$ACT_BIN" --pull=false --action-offline-mode -b
    -P "ubuntu-24.04=$(runner_image)" -P "ubuntu-latest=$(runner_image)"
    --container-options "-v $STATE/git:/srv/git:${GIT_SERVER_MODE:-ro} -v $OUT/github:/srv/github${RUNNER_CACHE:+ -v $RUNNER_CACHE:/root/.cache/iomatrix -v $RUNNER_CACHE:$RUNNER_CACHE}${HOST_PYTHON:+ -v $HOST_PYTHON:$HOST_PYTHON:ro}"
    --artifact-server-path "$OUT/artifacts"
    --cache-server-path "$STATE/cache"
    -s GITHUB_TOKEN=ci-local-token
    # One job at a time: with -b every job works in the one work tree, where GitHub gives each
    # its own, and the nightly's two shards checking out .iomatrix at once broke each other's
    # ("could not lock config file .iomatrix/.git/config"). A self-hosted runner with one work
    # folder also runs its jobs one after another.
    --concurrent-jobs 1)
  if [ -n "${RUNNER_CACHE:-}" ]; then
    # The jobs' ~/.cache/iomatrix is this host folder, and tools/container.sh in a job mounts it
    # by its host path (IOMATRIX_CACHE): the engine is the host's, so a path is the host's. The
    # job sees it at that path too: what a job writes there for a container it starts (this
    # machine's apt settings) was written into the job's own file system, and the engine made
    # an empty folder of the same name on the host.
    ACT+=(--env "IOMATRIX_CACHE=$RUNNER_CACHE")
  fi
  if [ -n "$(ca_bundle)" ]; then
    # In the jobs the bundle is the image's own (this machine's, copied in); tools/container.sh
    # lends the same path of the host to the containers it starts.
    ACT+=(--env PIP_CERT=/etc/ssl/certs/ca-certificates.crt
      --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
  fi
  local dir name owner rest
  for dir in "$ACTIONS"/*@*; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir"); owner=${name%%-*}; rest=${name#*-}
    ACT+=(--local-repository "$owner/$rest=$dir")
  done
  if [ -n "${ACT_ARGS:-}" ]; then
    # shellcheck disable=SC2206 # extra options are split on spaces on purpose
    ACT+=(${ACT_ARGS})
  fi
}

# act names a job's container (and its volumes) after the caller job, the workflow and the job,
# its own way (createContainerName in act's pkg/runner): every character but [A-Za-z0-9] a dash,
# then each "--" one dash. The same scenario gives the same names run after run.
act_name_prefix() {
  local name="act-$1-$2-"
  name=${name//[^A-Za-z0-9]/-}
  echo "${name//--/-}"
}

# act leaves its job containers running after a run, and the next run of the same scenario then
# fails at "Set up job" (it removes the job's volumes first: "volume ... is being used"). Before a
# run, the containers this scenario's jobs will be named after are removed; those of other
# scenarios are left alone. Act runs one at a time on a machine (under the VM lock), so a
# container of this scenario's names is a previous run's, and would collide with this one anyway.
remove_stale_jobs() {
  local prefix name
  prefix=$(act_name_prefix "$1" "$2")
  podman_ ps -a --format '{{.Names}}' | while read -r name; do
    case "$name" in
      "$prefix"*)
        say "removing act's container of a previous run: $name"
        podman_ rm -f -t 5 "$name" >/dev/null
        ;;
    esac
  done
}

# Run act in folder $1 with the rest of the arguments; its log in OUT/act.log, its status kept.
run_act() {
  local where=$1
  shift
  act_args
  say "act $* (log: $OUT/act.log)"
  set +e
  (cd "$where" && DOCKER_HOST=unix://$SOCKET "${ACT[@]}" "$@") 2>&1 | tee -a "$OUT/act.log"
  ACT_STATUS=${PIPESTATUS[0]}
  set -e
}

outcome() {
  local status=$1
  shift
  python3 - "$OUT/outcome.json" "$status" "$@" <<'EOF'
import json, sys
out, status, *pairs = sys.argv[1:]
record = {"exit": int(status)}
record.update(dict(p.split("=", 1) for p in pairs))
with open(out, "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
EOF
}

new_out() {
  OUT=${OUT:-$REPO/results/ci-local/$(date -u +%Y%m%dT%H%M%SZ)-$1}
  mkdir -p "$OUT/github"
  OUT=$(cd "$OUT" && pwd)
  : >"$OUT/act.log"
}

# Commit everything in repository $1 (ignored files too: a kernel tree's .gitignore ignores
# every dot-folder, .github among them) and print the commit; fail when nothing was committed.
commit_all() {
  git -C "$1" add -A -f .github 2>/dev/null || true
  git -C "$1" add -A
  if ! git -C "$1" -c user.name=ci-local -c user.email=ci-local@localhost commit --quiet -m "$2" >&2
  then
    say "nothing to commit in $1 for: $2"
    return 1
  fi
  git -C "$1" rev-parse HEAD
}

# The example repository's files, with iomatrix pinned to the clone's commit (the examples pin
# a SHA, as the docs say to; here it is the commit under test).
example_repo() {
  local example=$1 dest=$2 sha=$3 # $4: the repository's owner/name
  mkdir -p "$dest"
  cp -r "$REPO/docs/workflows/$example/." "$dest/"
  git -C "$dest" init --quiet -b main
  git -C "$dest" remote add origin "https://github.com/$4"
  grep -rlE 'iomatrix/iomatrix|iomatrix-ref' "$dest/.github" | while read -r file; do
    sed -i -E "s#(iomatrix/iomatrix/\.github/workflows/[A-Za-z0-9_.-]+\.yml)@[0-9a-f]{40}#\1@$sha#;
      s#(uses: iomatrix/iomatrix)@[0-9a-f]{40}#\1@$sha#;
      s#(iomatrix-ref: )[0-9a-f]{40}#\1$sha#" "$file"
  done
}

event_json() {
  local number=$1 base=$2 head=$3 repo=$4
  cat >"$OUT/event.json" <<EOF
{"pull_request": {"number": $number, "base": {"sha": "$base", "ref": "main"},
  "head": {"sha": "$head", "ref": "pull/$number"}},
 "repository": {"full_name": "$repo", "name": "${repo#*/}", "owner": {"login": "${repo%%/*}"}}}
EOF
}

# matrix-gate: the example repository calls the reusable gate; matrix-action: the action's example
# (its workflow, with the matrix-repository example's matrix, as its README says to copy).
scenario_matrix_gate() {
  local scenario=${1:-matrix-gate} example=matrix-repository workflow=storage-gate.yml
  if [ "$scenario" = matrix-action ]; then example=matrix-action workflow=storage-gate-action.yml; fi
  new_out "$scenario"
  setup
  clean_clone "$OUT/iomatrix"
  local sha
  break_clone "$OUT/iomatrix"
  sha=$(git -C "$OUT/iomatrix" rev-parse HEAD)
  serve "$OUT/iomatrix" iomatrix/iomatrix
  local repo=$OUT/storage-matrix
  example_repo "$example" "$repo" "$sha" example/storage-matrix
  if [ ! -e "$repo/gate/storage.yaml" ]; then
    mkdir -p "$repo/gate"
    cp "$REPO/docs/workflows/matrix-repository/gate/storage.yaml" "$repo/gate/"
  fi
  local base head
  base=$(commit_all "$repo" "the storage gate and its matrix")
  case "${SCENARIO_CHANGE:-throttle}" in
    throttle)
      # The pull request retunes the profile: the disk at half the IOPS it had (a known -50%).
      sed -i 's/iops_limit: 200}/iops_limit: 100}/' "$repo/gate/storage.yaml"
      grep -q 'iops_limit: 100}' "$repo/gate/storage.yaml" || { say "the example's disk changed"; exit 2; }
      ;;
    none) echo "# an A/A: the pull request changes nothing the gate measures" >>"$repo/README.md" ;;
    *) say "SCENARIO_CHANGE is throttle or none"; exit 2 ;;
  esac
  head=$(commit_all "$repo" "retune the gate's disk")
  serve "$repo" example/storage-matrix
  remove_stale_jobs gate "iomatrix gate (reusable)"
  event_json 7 "$base" "$head" example/storage-matrix
  git -C "$repo" checkout --quiet "$head"
  run_act "$repo" pull_request -W ".github/workflows/$workflow" -e "$OUT/event.json" \
    --var IOMATRIX_REQUIRE_KVM=false \
    --local-repository "iomatrix/iomatrix@$sha=$OUT/iomatrix"
  local status=$ACT_STATUS
  comment "$status" "$head"
  outcome "$status" "scenario=$scenario" "base=$base" "head=$head" "iomatrix=$sha" \
    "comment=$OUT/comment.md" "break=${SCENARIO_BREAK:-}"
  return "$status"
}

# What the comment workflow (reusable-comment.yml, on workflow_run) would post, which needs
# GitHub's API to fetch another run's artifact: here the gate run's ab-report artifact from act's
# artifact server, rendered by the clone's tools/gate_comment.py as that workflow renders it.
comment() {
  local status=$1 head=$2 zip conclusion=success
  [ "$status" -eq 0 ] || conclusion=failure
  zip=$(find "$OUT/artifacts" -path '*/ab-report/*' -name '*.zip' -print -quit)
  if [ -z "$zip" ]; then
    say "the gate left no ab-report artifact: no comment"
    return 0
  fi
  rm -rf "$OUT/comment-artifact"
  mkdir -p "$OUT/comment-artifact"
  python3 -m zipfile -e "$zip" "$OUT/comment-artifact"
  if PYTHONPATH=$OUT/iomatrix/harness "${VENV:-$REPO/.venv}/bin/python" \
    "$OUT/iomatrix/tools/gate_comment.py" "$OUT/comment-artifact" "$OUT/comment.md" \
    "$conclusion" "$head" "https://github.com/example/repository/actions/runs/1" >/dev/null; then
    say "the comment the comment workflow would post: $OUT/comment.md"
    sed -n '1,20s/^/  | /p' "$OUT/comment.md" >&2
  else
    say "the comment could not be rendered from the artifact"
  fi
}

# The kernel tree of the kernel-gate scenario: Debian's 6.1 source as iomatrix imports it (the
# tree the bisection tests build), with the gate's two workflow files and matrix committed on top;
# the pull request's one-file patch makes ext4's direct writes 3 ms slower: about 330 a second at
# most, below the disk's throttle of 600 (tests/vm/test_bisect_vm.py measures the same change).
KERNEL_GATE_MATRIX='format: 1
name: storage-gate
extends: iomatrix:base
repeat: 5
devices:
  gate-disk: {size: 1GiB, bus: virtio-blk, backing: file, cache: none, aio: native, iops_limit: 600}
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [none]
  device: [gate-disk]
  workload: [randwrite-4k]'

scenario_kernel_gate() {
  new_out kernel-gate
  setup
  clean_clone "$OUT/iomatrix"
  local sha
  sha=$(git -C "$OUT/iomatrix" rev-parse HEAD)
  serve "$OUT/iomatrix" iomatrix/iomatrix
  # Debian's 6.1 source, imported into iomatrix's kernel cache (once per cache), as a repository.
  local source
  source=$(PYTHONPATH=harness "${VENV:-.venv}/bin/python" -c '
from iomatrix.host.kernels import cache_root, sources
from iomatrix.model.kernel_spec import parse_spec
s = sources.resolve(parse_spec("debian-source:6.1"), cache_root(), print, offline=False)
print(s.repo, s.commit)' | tail -n 1)
  local repo=$OUT/linux
  git clone --quiet --no-checkout "${source% *}" "$repo"
  git -C "$repo" checkout --quiet -B main "${source#* }"
  git -C "$repo" remote set-url origin https://github.com/example/linux
  mkdir -p "$repo/.github/workflows" "$repo/.github/iomatrix"
  local name
  for name in kernel-pr-gate.yml kernel-pr-gate-comment.yml; do
    sed -E "s#(iomatrix/iomatrix/\.github/workflows/[A-Za-z0-9_.-]+\.yml)@[0-9a-f]{40}#\1@$sha#;
      s#(iomatrix-ref: )[0-9a-f]{40}#\1$sha#" "$REPO/docs/workflows/$name" \
      >"$repo/.github/workflows/$name"
  done
  printf '%s\n' "$KERNEL_GATE_MATRIX" >"$repo/.github/iomatrix/gate.yaml"
  local base head
  base=$(commit_all "$repo" "the storage gate")
  python3 - "$repo/fs/ext4/file.c" <<'PY'
import sys
path = sys.argv[1]
old = "static ssize_t ext4_dio_write_iter(struct kiocb *iocb, struct iov_iter *from)\n{\n"
text = open(path).read()
assert old in text, "ext4_dio_write_iter moved"
new = "#include <linux/delay.h>\n\n" + old + "\tmdelay(3); /* a slower write path */\n"
open(path, "w").write(text.replace(old, new, 1))
PY
  head=$(commit_all "$repo" "ext4: a slower direct write (3 ms each)")
  serve "$repo" example/linux
  remove_stale_jobs gate "iomatrix gate (reusable)"
  event_json 11 "$base" "$head" example/linux
  run_act "$repo" pull_request -W .github/workflows/kernel-pr-gate.yml -e "$OUT/event.json" \
    --var IOMATRIX_REQUIRE_KVM=false \
    --local-repository "iomatrix/iomatrix@$sha=$OUT/iomatrix"
  local status=$ACT_STATUS
  comment "$status" "$head"
  outcome "$status" "scenario=kernel-gate" "base=$base" "head=$head" "iomatrix=$sha" \
    "comment=$OUT/comment.md"
  return "$status"
}

# The runner's own iomatrix cache for the nightly's jobs (kept in STATE between runs), not this
# host's: the image job fetches the matrix's kernels into it and prunes the others (--prune), and
# the shards restore them from the Actions cache, as on a hosted runner. On a hosted runner the
# jobs and the engine share one file system; under act a job's ~/.cache/iomatrix and the
# engine's differ, so the image job fetched into the host's cache and saved nothing, and its
# prune reached the host's kernels. The kernels are fetched, as a hosted runner's nightly fetches
# them (a first run downloads them from the mirror). The guest roots (built, not fetched, by any
# job that boots) are copied from the host's cache when this one has none, to spare every first
# run their build.
runner_cache() {
  local cache=$STATE/runner-cache host=${IOMATRIX_CACHE:-$HOME/.cache/iomatrix}
  mkdir -p "$cache"
  if [ ! -d "$cache/guest-roots" ] && [ -d "$host/guest-roots" ]; then
    cp -a "$host/guest-roots" "$cache/guest-roots"
  fi
  (cd "$cache" && pwd)
}

# The matrix repository's own nightly (storage-nightly.yml, on workflow_dispatch as a schedule
# would start it) through reusable-nightly.yml at the commit under test: plan, the runner image,
# two shards in TCG VMs, the merge, the night archived on the results branch and pushed to the
# local git server (mounted read-write for this scenario only), the report, and what the
# regression-issue step would send (the gh stand-in's record in github/calls.jsonl).
scenario_nightly() {
  new_out nightly
  setup
  clean_clone "$OUT/iomatrix"
  local sha
  sha=$(git -C "$OUT/iomatrix" rev-parse HEAD)
  serve "$OUT/iomatrix" iomatrix/iomatrix
  local repo=$OUT/storage-matrix
  example_repo matrix-repository "$repo" "$sha" example/storage-matrix
  local head
  head=$(commit_all "$repo" "the storage nightly and its matrix")
  serve "$repo" example/storage-matrix
  if [ -n "${NIGHTLY_HISTORY:-}" ]; then
    # Earlier nights on the results branch (a repository whose `results` branch holds them, e.g.
    # the seeded one of tests/support/seeded_history.py): tonight's merge job fetches, extends
    # and pushes it, and its alert step judges tonight against them.
    git -C "$STATE/git/example/storage-matrix" fetch --quiet "$NIGHTLY_HISTORY" \
      "+refs/heads/results:refs/heads/results"
    say "the results branch starts from $NIGHTLY_HISTORY's ($(git -C "$NIGHTLY_HISTORY" \
      rev-list --count results) nights)"
  fi
  printf '%s\n' '{"inputs": {}, "ref": "refs/heads/main",' \
    ' "repository": {"full_name": "example/storage-matrix", "name": "storage-matrix",' \
    '   "owner": {"login": "example"}}}' >"$OUT/event.json"
  git -C "$repo" checkout --quiet "$head"
  remove_stale_jobs nightly "iomatrix nightly (reusable)"
  local GIT_SERVER_MODE=rw RUNNER_CACHE
  RUNNER_CACHE=$(runner_cache)
  run_act "$repo" workflow_dispatch -W .github/workflows/storage-nightly.yml -e "$OUT/event.json" \
    --var IOMATRIX_REQUIRE_KVM=false \
    --local-repository "iomatrix/iomatrix@$sha=$OUT/iomatrix"
  local status=$ACT_STATUS results
  # What the merge job pushed: the results branch of the repository on the git server.
  results=$(git -C "$STATE/git/example/storage-matrix" rev-parse --verify --quiet refs/heads/results || true)
  if [ -n "$results" ]; then
    git -C "$STATE/git/example/storage-matrix" ls-tree -r --name-only "$results" >"$OUT/results-branch.txt"
  fi
  outcome "$status" "scenario=nightly" "head=$head" "iomatrix=$sha" "results=$results" \
    "results_files=$OUT/results-branch.txt" "github_calls=$OUT/github/calls.jsonl"
  return "$status"
}

scenario_job() {
  local workflow=${WORKFLOW:?WORKFLOW=<file in .github/workflows> is needed}
  local event=${EVENT:-pull_request}
  new_out "job-${workflow%.yml}${JOB:+-$JOB}"
  setup
  clean_clone "$OUT/iomatrix"
  local sha base
  sha=$(git -C "$OUT/iomatrix" rev-parse HEAD)
  base=$(git -C "$OUT/iomatrix" rev-parse HEAD~1)
  serve "$OUT/iomatrix" iomatrix/iomatrix
  event_json 1 "$base" "$sha" iomatrix/iomatrix
  local args=("$event" -W ".github/workflows/$workflow" -e "$OUT/event.json")
  if [ -n "${JOB:-}" ]; then args+=(-j "$JOB"); fi
  run_act "$OUT/iomatrix" "${args[@]}"
  outcome "$ACT_STATUS" "scenario=job" "workflow=$workflow" "job=${JOB:-}" "event=$event"
  return "$ACT_STATUS"
}

case "${1:-matrix-gate}" in
  setup) setup ;;
  matrix-gate) scenario_matrix_gate ;;
  matrix-action) scenario_matrix_gate matrix-action ;;
  job) scenario_job ;;
  kernel-gate) scenario_kernel_gate ;;
  nightly) scenario_nightly ;;
  *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
