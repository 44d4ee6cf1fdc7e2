#!/usr/bin/env bash
# scripts/docker_test.sh (`make docker-test`): build the image and test it for real.
#
#   1. build the final image (Dockerfile target `runtime`), the trainer image (target `builder`) and
#      the proxy image (deploy/nginx) from ONE snapshot of the working tree (git's tracked and
#      untracked, not ignored files, taken at the start: the tree may be edited while the build
#      runs), so that every stage sees the same code and compose never runs a stale image nor
#      builds one itself
#   2. check it: non-root user, serving extras only (no scipy/matplotlib/dask/tqdm in `pip list`)
#   3. run it: wait for /health then /ready, rank one request (n_features from GET /models),
#      a 64 KiB request head -> 431, run the image's HEALTHCHECK
#   4. bring the compose stack up (TUNEMIX_WORKERS workers behind the nginx proxy) on an EMPTY models
#      directory (as in a clean clone): the models-init service seeds it, the service ranks through
#      the proxy, its healthcheck passes; the proxy refuses a 9 KB header (400) and a declared 100 MB
#      body (413), closes a head that does not arrive within 10 s, does not serve /metrics (the
#      service's own port does, one tunemix_model_info series per worker);
#      then the `trainer` profile runs twice (v2, then v3: safe to run again) and after each run
#      POST /models/reload serves the new version (in every worker); bring the stack down
# Everything listens on 127.0.0.1 only; every wait is bounded; containers are removed on exit.
#
# Engine: docker if a docker engine answers, else podman (+ podman-compose). Environment:
#   DOCKER_TEST_PORT (18080), DOCKER_TEST_COMPOSE_PORT (18081: the proxy), DOCKER_TEST_SERVICE_PORT
#   (18082: the compose service itself), DOCKER_TEST_READY_TIMEOUT (180 s),
#   DOCKER_TEST_BUILD_TIMEOUT (2400 s per image), DOCKER_TEST_TRAIN_TIMEOUT (900 s per trainer run),
#   DOCKER_TEST_WORKERS (2: uvicorn workers of the compose service),
#   DOCKER_TEST_SKIP_TRAINER=1 (skip the trainer image and runs), IMAGE (localhost/tunemix:latest),
#   TRAINER_IMAGE (localhost/tunemix-trainer:latest), PROXY_IMAGE (localhost/tunemix-proxy:latest), PODMAN_COMPOSE (path of podman-compose if not on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/tunemix:latest}
TRAINER_IMAGE=${TRAINER_IMAGE:-localhost/tunemix-trainer:latest}
PORT=${DOCKER_TEST_PORT:-18080}
COMPOSE_PORT=${DOCKER_TEST_COMPOSE_PORT:-18081}
SERVICE_PORT=${DOCKER_TEST_SERVICE_PORT:-18082}
PROXY_IMAGE=${PROXY_IMAGE:-localhost/tunemix-proxy:latest}
READY_TIMEOUT=${DOCKER_TEST_READY_TIMEOUT:-180}
BUILD_TIMEOUT=${DOCKER_TEST_BUILD_TIMEOUT:-2400}
TRAIN_TIMEOUT=${DOCKER_TEST_TRAIN_TIMEOUT:-900}
WORKERS=${DOCKER_TEST_WORKERS:-2}
PROJECT=tunemix-dockertest
TOKEN=docker-test-token
NAME=tunemix-dockertest-$$
T0=$SECONDS

log()  { printf '\n== [%4ss] %s\n' "$((SECONDS - T0))" "$*"; }
ok()   { printf '   ok: %s\n' "$*"; }
fail() { printf '\nFAIL: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------ engine and compose
ENGINE=""
if command -v docker >/dev/null 2>&1 && timeout 15 docker info >/dev/null 2>&1; then
  ENGINE=docker
elif command -v podman >/dev/null 2>&1 && timeout 30 podman info >/dev/null 2>&1; then
  ENGINE=podman
else
  fail "no container engine: neither a docker engine nor podman answers"
fi
COMPOSE=()
if [ "$ENGINE" = docker ]; then
  if timeout 15 docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose)
  elif command -v docker-compose >/dev/null 2>&1; then COMPOSE=(docker-compose)
  fi
else
  for pc in "${PODMAN_COMPOSE:-}" "$(command -v podman-compose || true)" \
            /var/tmp/container-engine/.venv/bin/podman-compose; do
    if [ -n "$pc" ] && [ -x "$pc" ]; then COMPOSE=("$pc"); break; fi
  done
  # keep HEALTHCHECK in images that podman-compose builds
  export BUILDAH_FORMAT=docker
fi
[ ${#COMPOSE[@]} -gt 0 ] || fail "no compose tool for $ENGINE (docker compose, docker-compose or podman-compose)"
echo "engine: $ENGINE ($($ENGINE --version)); compose: ${COMPOSE[*]}"

# podman without systemd prints 'unable to get systemd connection' for every container with a
# HEALTHCHECK: filter that noise. (stderr goes to a file: a pipe would be held open by conmon.)
ERR=$(mktemp)
quiet_err() { grep -v 'systemd connection' "$ERR" >&2 || true; : > "$ERR"; }

# ------------------------------------------------------------------ cleanup
CID=""
MODELS_TMP=""
CTX=""
COMPOSE_UP=0
cleanup() {
  rc=$?
  set +e
  if [ -n "$CID" ]; then
    [ "$rc" = 0 ] || { echo "--- logs of $NAME (last 40 lines)"; $ENGINE logs "$CID" 2>&1 | tail -40; }
    $ENGINE rm -f "$CID" >/dev/null 2>&1
  fi
  if [ "$COMPOSE_UP" = 1 ]; then
    if [ "$rc" != 0 ]; then
      echo "--- compose logs (last 40 lines)"
      compose logs 2>&1 | tail -40
    fi
    timeout -k 10 120 "${COMPOSE[@]}" -p "$PROJECT" --profile train down >/dev/null 2>&1 \
      || timeout -k 10 120 "${COMPOSE[@]}" -p "$PROJECT" down >/dev/null 2>&1
    # e.g. a `compose run` container of a timed-out trainer: remove what is left of the project
    for c in $($ENGINE ps -aq --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null); do
      $ENGINE rm -f "$c" >/dev/null 2>&1
    done
  fi
  [ -n "$MODELS_TMP" ] && rm -rf "$MODELS_TMP"
  [ -n "$CTX" ] && rm -rf "$CTX"
  rm -f "$ERR"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# every compose call is bounded (COMPOSE_TIMEOUT, default 300 s; the trainer runs get TRAIN_TIMEOUT)
compose() { timeout -k 10 "${COMPOSE_TIMEOUT:-300}" "${COMPOSE[@]}" -p "$PROJECT" "$@"; }

# ------------------------------------------------------------------ HTTP helpers (curl + python3)
# wait_http URL STATUS TIMEOUT [STREAK]: poll until URL answers STATUS STREAK times in a row (default
# 1; more with several workers, each of which turns ready on its own)
wait_http() {
  local url=$1 want=$2 limit=$3 need=${4:-1} start=$SECONDS code="" streak=0
  while [ $((SECONDS - start)) -lt "$limit" ]; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url" || true)
    if [ "$code" = "$want" ]; then
      streak=$((streak + 1))
      [ "$streak" -ge "$need" ] && { ok "$url -> $code after $((SECONDS - start)) s"; return 0; }
      continue
    fi
    streak=0
    sleep 1
  done
  fail "$url did not answer $want within $limit s (last: ${code:-none})"
}

# rank_once BASE: read n_features from GET /models, rank one query of 5 documents, check the ranking
rank_once() {
  local base=$1 models nf body out
  models=$(curl -fsS --max-time 10 "$base/models") || fail "GET $base/models"
  nf=$(python3 -c 'import json, sys; d = json.load(sys.stdin); m = [m for m in d["models"] if m["name"] == d["default"]][0]; print(m["n_features"])' <<<"$models") \
    || fail "GET /models has no served default model: $models"
  body=$(python3 -c '
import json, sys
n = int(sys.argv[1])
docs = [{"id": "d%d" % i, "features": [((i * 13 + j * 7) % 17) / 17 for j in range(n)]} for i in range(5)]
print(json.dumps({"queries": [{"qid": "q1", "documents": docs}]}))' "$nf")
  out=$(curl -fsS --max-time 30 -H 'Content-Type: application/json' -d "$body" "$base/rank") \
    || fail "POST $base/rank"
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
q = r["results"][0]
ids = [d["id"] for d in q["ranking"]]
ranks = [d["rank"] for d in q["ranking"]]
scores = [d["score"] for d in q["ranking"]]
assert q["qid"] == "q1", q
assert sorted(ids) == ["d%d" % i for i in range(5)], ids
assert ranks == [1, 2, 3, 4, 5], ranks
assert scores == sorted(scores, reverse=True), scores
print("   ok: POST /rank (%s features) -> model %s %s, ranking %s" % (sys.argv[2], r["model"], r["version"], " ".join(ids)))
' "$out" "$nf" || fail "unexpected /rank response: $out"
}

# status_of CURL_ARGS...: the HTTP status curl gets (000: no answer)
status_of() { curl -s -o /dev/null -w '%{http_code}' --max-time 30 "$@" || true; }

# head_closed_within PORT LIMIT: open a connection, send half a request head and nothing more; pass
# if the server answers or closes it within LIMIT seconds (prints what it sent back and when)
head_closed_within() {
  python3 - "$1" "$2" <<'PY' || fail "a half-sent request head on port $1 was still open after $2 s"
import socket, sys, time
port, limit = int(sys.argv[1]), float(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(limit)
t0 = time.monotonic()
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
data = b""
try:
    while chunk := s.recv(4096):
        data += chunk
except (socket.timeout, TimeoutError):
    sys.exit(1)
except ConnectionResetError:
    pass
print("   ok: a half-sent request head on port %d closed after %.1f s (answer: %r)"
      % (port, time.monotonic() - t0, data.split(b"\r\n")[0].decode() or "none"))
PY
}

# check_health CID: run the container's HEALTHCHECK (podman: now; docker: wait for its verdict)
check_health() {
  local cid=$1 status=""
  if [ "$ENGINE" = podman ]; then
    timeout -k 5 60 podman healthcheck run "$cid" 2>"$ERR" || { quiet_err; fail "podman healthcheck run $cid"; }
    quiet_err
    status=$(podman inspect --format '{{.State.Health.Status}}' "$cid" 2>/dev/null \
             || podman inspect --format '{{.State.Healthcheck.Status}}' "$cid")
  else
    # docker runs the HEALTHCHECK on its own schedule (interval 30 s): wait for its verdict
    for _ in $(seq 1 60); do
      status=$(docker inspect --format '{{.State.Health.Status}}' "$cid")
      [ "$status" = healthy ] && break
      sleep 2
    done
  fi
  [ "$status" = healthy ] || fail "HEALTHCHECK of $cid: status '$status'"
}

served_version() {
  curl -fsS --max-time 10 "$1/models" | python3 -c 'import json, sys; d = json.load(sys.stdin); print([m for m in d["models"] if m["name"] == d["default"]][0]["version"])'
}

# wait_version BASE VERSION TIMEOUT: until 10 requests in a row see VERSION. With several workers the
# reload reaches one of them; the others adopt it by polling the shared state (about a second).
wait_version() {
  local base=$1 want=$2 limit=$3 start=$SECONDS streak=0 v=""
  while [ $((SECONDS - start)) -lt "$limit" ]; do
    v=$(served_version "$base" 2>/dev/null || true)
    if [ "$v" = "$want" ]; then
      streak=$((streak + 1))
      [ "$streak" -ge 10 ] && { ok "$want served by every worker after $((SECONDS - start)) s"; return 0; }
    else
      streak=0; sleep 0.5
    fi
  done
  fail "$base does not serve $want consistently within $limit s (last: ${v:-none})"
}

# train_and_reload BASE VERSION: run the trainer once, expect VERSION on disk, reload, serve it
train_and_reload() {
  local base=$1 want=$2 reload
  log "compose --profile train run --rm trainer (expect $want of default in the models dir)"
  COMPOSE_TIMEOUT=$TRAIN_TIMEOUT compose --profile train run --rm trainer >"$ERR" 2>&1 \
    || { cat "$ERR"; fail "trainer"; }
  grep -E 'written to|ensemble|report' "$ERR" | sed 's/^/   /' || true
  : > "$ERR"
  [ -f "$MODELS_TMP/default/$want/manifest.json" ] || fail "the trainer did not write default/$want"
  ok "versions on disk: $(ls "$MODELS_TMP/default" | tr '\n' ' ')"
  [ "$(served_version "$base")" != "$want" ] || fail "$want served before the reload"
  reload=$(curl -fsS --max-time 120 -X POST -H "Authorization: Bearer $TOKEN" \
           -H 'Content-Type: application/json' -d '{"model": "default"}' "$base/models/reload") \
    || fail "POST /models/reload"
  ok "POST /models/reload -> $reload"
  wait_version "$base" "$want" 30
  rank_once "$base"
}

# ------------------------------------------------------------------ 1. build
# The build context: a snapshot of the working tree (without git: the tree itself).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  CTX=$(mktemp -d)
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$CTX"
  BUILD_CTX=$CTX
  echo "build context: snapshot of the working tree in $CTX ($(du -sh "$CTX" | cut -f1))"
else
  BUILD_CTX=.
fi
build() {  # build TARGET TAG
  if [ "$ENGINE" = docker ]; then
    DOCKER_BUILDKIT=1 timeout -k 30 "$BUILD_TIMEOUT" docker build --target "$1" -t "$2" "$BUILD_CTX"
  else
    timeout -k 30 "$BUILD_TIMEOUT" podman build --pull=never --format docker --target "$1" -t "$2" "$BUILD_CTX"
  fi || fail "build of target $1 failed (or took more than $BUILD_TIMEOUT s)"
}
log "build $IMAGE (target runtime)"
b0=$SECONDS
build runtime "$IMAGE"
BUILD_S=$((SECONDS - b0))
SIZE=$($ENGINE image inspect --format '{{.Size}}' "$IMAGE")
ok "built in ${BUILD_S} s; image size $((SIZE / 1000000)) MB"
log "build $PROXY_IMAGE (deploy/nginx: Debian's nginx on the base image)"
if [ "$ENGINE" = docker ]; then
  timeout -k 30 "$BUILD_TIMEOUT" docker build -t "$PROXY_IMAGE" "$BUILD_CTX/deploy/nginx"
else
  timeout -k 30 "$BUILD_TIMEOUT" podman build --pull=never --format docker -t "$PROXY_IMAGE" "$BUILD_CTX/deploy/nginx"
fi || fail "build of the proxy image failed"
ok "proxy image: $($ENGINE run --rm --entrypoint nginx "$PROXY_IMAGE" -v 2>&1 | tail -1)"
if [ "${DOCKER_TEST_SKIP_TRAINER:-0}" != 1 ]; then
  log "build $TRAINER_IMAGE (target builder: cached stages of the build above)"
  build builder "$TRAINER_IMAGE"
  ok "trainer image $((SECONDS - b0 - BUILD_S)) s"
fi

# ------------------------------------------------------------------ 2. image contents
log "image contents: user, installed packages"
user=$($ENGINE image inspect --format '{{.Config.User}}' "$IMAGE")
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || fail "image runs as root (User='$user')"
ok "runs as user '$user'"
pkgs=$($ENGINE run --rm --entrypoint pip "$IMAGE" list --format=freeze 2>"$ERR"); quiet_err
bad=$(grep -iE '^(scipy|matplotlib|dask|distributed|tqdm)==' <<<"$pkgs" || true)
[ -z "$bad" ] || fail "training-only packages in the final image: $(echo $bad)"
for p in tunemix numba fastapi uvicorn prometheus[-_]client pydantic[-_]settings; do
  grep -iqE "^$p==" <<<"$pkgs" || fail "package $p missing from the final image"
done
ok "no scipy/matplotlib/dask/tqdm; $(grep -icE '==' <<<"$pkgs") packages: $(grep -iE '^(tunemix|numba|numpy|fastapi|uvicorn|prometheus.client|pydantic.settings)==' <<<"$pkgs" | tr '\n' ' ')"

# every feature view scores in the image: numba's np.linalg needs scipy, which it does not have
views=$($ENGINE run --rm --entrypoint python "$IMAGE" -c '
import numpy as np
from tunemix.core.data.normalization import apply_view
x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
off = np.array([0, 15, 40])
w = apply_view(x, off, "raw+white")[15:, 6:].astype(np.float64)
assert np.allclose(np.cov(w.T, bias=True), np.eye(6), atol=1e-3)
print(" ".join(v for v in ("raw", "raw+std", "raw+white") if apply_view(x, off, v).shape[0] == 40))
' 2>"$ERR") || fail "feature views in the image: $(tail -3 "$ERR")"
ok "feature views without scipy: $views"

# ------------------------------------------------------------------ 3. run the image
log "run $IMAGE on 127.0.0.1:$PORT (baked-in default model)"
r0=$SECONDS
CID=$($ENGINE run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" -e TUNEMIX_RELOAD_TOKEN=$TOKEN "$IMAGE" 2>"$ERR"); quiet_err
wait_http "http://127.0.0.1:$PORT/health" 200 60
wait_http "http://127.0.0.1:$PORT/ready" 200 "$READY_TIMEOUT" 10   # one worker per core: each turns ready on its own
ok "ready $((SECONDS - r0)) s after docker run"
rank_once "http://127.0.0.1:$PORT"
big=$(python3 -c 'print("a" * 65536)')
code=$(status_of -H "X-Big: $big" "http://127.0.0.1:$PORT/health")
[ "$code" = 431 ] || fail "a 64 KiB request head straight to the service: $code (expected 431)"
ok "a 64 KiB request head straight to the service -> 431"
$ENGINE exec "$CID" sh -c 'test "$(id -u)" != 0' || fail "the service runs as root"
ok "service process runs as uid $($ENGINE exec "$CID" id -u)"
check_health "$CID"
ok "image HEALTHCHECK: healthy"
$ENGINE rm -f "$CID" >/dev/null 2>"$ERR"; quiet_err; CID=""

# ------------------------------------------------------------------ 4. compose
BASE="http://127.0.0.1:$COMPOSE_PORT"
MODELS_TMP=$(mktemp -d)
chmod 755 "$MODELS_TMP"   # like ./models in a clean clone: empty, world-readable
export TUNEMIX_MODELS_HOST_DIR=$MODELS_TMP TUNEMIX_HOST_PORT=$COMPOSE_PORT TUNEMIX_RELOAD_TOKEN=$TOKEN \
       TUNEMIX_WORKERS=$WORKERS TUNEMIX_SERVICE_PORT=$SERVICE_PORT TUNEMIX_PROXY_IMAGE=$PROXY_IMAGE
log "compose up (project $PROJECT, empty models dir $MODELS_TMP, proxy 127.0.0.1:$COMPOSE_PORT, service 127.0.0.1:$SERVICE_PORT, $WORKERS workers)"
COMPOSE_UP=1
compose up -d >"$ERR" 2>&1 || { cat "$ERR"; fail "compose up"; }
: > "$ERR"
wait_http "$BASE/health" 200 60
wait_http "$BASE/ready" 200 "$READY_TIMEOUT" 10
[ -f "$MODELS_TMP/default/v1/manifest.json" ] || fail "models-init did not seed default/v1"
ok "models-init seeded $(ls "$MODELS_TMP/default" | tr '\n' ' ')"
rank_once "$BASE"
server=$(curl -sS -o /dev/null -D - --max-time 10 "$BASE/health" | tr -d '\r' | awk -F': ' 'tolower($1) == "server" {print $2}')
[ "$server" = nginx ] || fail "GET $BASE/health was not answered through nginx (Server: '$server')"
ok "requests on 127.0.0.1:$COMPOSE_PORT go through nginx"
code=$(status_of -H "X-Big: $(python3 -c 'print("a" * 9000)')" "$BASE/health")
[ "$code" = 400 ] || fail "the proxy took a 9 KB header line: $code (expected 400)"
ok "a 9 KB header line -> 400 from the proxy"
code=$(status_of -X POST -H 'Content-Type: application/json' -H 'Content-Length: 100000000' "$BASE/rank")
[ "$code" = 413 ] || fail "the proxy took a declared 100 MB body: $code (expected 413)"
ok "a declared 100 MB body -> 413 from the proxy"
head_closed_within "$COMPOSE_PORT" 20
code=$(status_of "$BASE/metrics")
[ "$code" = 404 ] || fail "the proxy serves /metrics: $code (expected 404)"
series=$(curl -fsS --max-time 10 "http://127.0.0.1:$SERVICE_PORT/metrics" | grep -c '^tunemix_model_info{' || true)
[ "$series" = "$WORKERS" ] || fail "/metrics of the service: $series tunemix_model_info series, not $WORKERS"
ok "/metrics: 404 through the proxy; on the service's own port one tunemix_model_info series per worker ($series)"
SVC=$($ENGINE ps -q --filter "label=com.docker.compose.project=$PROJECT" \
      --filter "label=com.docker.compose.service=tunemix" | head -1)
[ -n "$SVC" ] || fail "no running container of the compose service tunemix"
check_health "$SVC"
started=$($ENGINE logs "$SVC" 2>&1 | grep -c 'Started server process' || true)
[ "$started" = "$WORKERS" ] || fail "the compose service started $started uvicorn workers, not $WORKERS"
ok "compose service healthcheck: healthy; $started uvicorn workers"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST -H 'Content-Type: application/json' \
       -d '{"model": "default"}' "$BASE/models/reload")
[ "$code" = 401 ] || fail "POST /models/reload without a token: $code (expected 401)"
ok "POST /models/reload without the token -> 401"

if [ "${DOCKER_TEST_SKIP_TRAINER:-0}" != 1 ]; then
  train_and_reload "$BASE" v2
  before=$(cd "$MODELS_TMP/default" && sha256sum v1/* v2/*)
  train_and_reload "$BASE" v3   # running the trainer again is safe: a new version, v1/v2 untouched
  [ "$(cd "$MODELS_TMP/default" && sha256sum v1/* v2/*)" = "$before" ] || fail "the second trainer run changed v1 or v2"
  [ "$(ls -A "$MODELS_TMP/default")" = "$(printf 'v1\nv2\nv3')" ] || fail "unexpected entries: $(ls -A "$MODELS_TMP/default")"
fi

log "compose down"
compose --profile train down >"$ERR" 2>&1 || { cat "$ERR"; fail "compose down"; }
: > "$ERR"
COMPOSE_UP=0
left=$($ENGINE ps -a --filter "name=$PROJECT" --format '{{.Names}}')
[ -z "$left" ] || fail "containers left after down: $left"
ok "stack removed"

log "docker-test passed ($ENGINE; build ${BUILD_S} s; image $((SIZE / 1000000)) MB)"
