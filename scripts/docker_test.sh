#!/usr/bin/env bash
# scripts/docker_test.sh (`make docker-test`): build the image and test it for real.
#
#   1. build the final image (Dockerfile target `runtime`)
#   2. check it: non-root user, serving extras only (no scipy/matplotlib/dask/tqdm in `pip list`)
#   3. run it: wait for /health then /ready, rank one request (n_features from GET /models),
#      run the image's HEALTHCHECK
#   4. bring the compose stack up on an EMPTY models directory (as in a clean clone): the
#      models-init service seeds it, the service ranks; then the `trainer` profile writes v2 and
#      POST /models/reload serves it; bring the stack down
# Everything listens on 127.0.0.1 only; every wait is bounded; containers are removed on exit.
#
# Engine: docker if a docker engine answers, else podman (+ podman-compose). Environment:
#   DOCKER_TEST_PORT (18080), DOCKER_TEST_COMPOSE_PORT (18081), DOCKER_TEST_READY_TIMEOUT (180 s),
#   DOCKER_TEST_SKIP_TRAINER=1 (skip the trainer run, about a minute), IMAGE (localhost/tunemix:latest),
#   PODMAN_COMPOSE (path of podman-compose if not on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/tunemix:latest}
TRAINER_IMAGE=${TRAINER_IMAGE:-localhost/tunemix-trainer:latest}
PORT=${DOCKER_TEST_PORT:-18080}
COMPOSE_PORT=${DOCKER_TEST_COMPOSE_PORT:-18081}
READY_TIMEOUT=${DOCKER_TEST_READY_TIMEOUT:-180}
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
    compose --profile train down >/dev/null 2>&1 || compose down >/dev/null 2>&1
  fi
  [ -n "$MODELS_TMP" ] && rm -rf "$MODELS_TMP"
  rm -f "$ERR"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

compose() { "${COMPOSE[@]}" -p "$PROJECT" "$@"; }

# ------------------------------------------------------------------ HTTP helpers (curl + python3)
# wait_http URL STATUS TIMEOUT: poll until URL answers STATUS
wait_http() {
  local url=$1 want=$2 limit=$3 start=$SECONDS code=""
  while [ $((SECONDS - start)) -lt "$limit" ]; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url" || true)
    [ "$code" = "$want" ] && { ok "$url -> $code after $((SECONDS - start)) s"; return 0; }
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

served_version() {
  curl -fsS --max-time 10 "$1/models" | python3 -c 'import json, sys; d = json.load(sys.stdin); print([m for m in d["models"] if m["name"] == d["default"]][0]["version"])'
}

# ------------------------------------------------------------------ 1. build
log "build $IMAGE (target runtime)"
b0=$SECONDS
if [ "$ENGINE" = docker ]; then
  DOCKER_BUILDKIT=1 docker build --target runtime -t "$IMAGE" .
else
  podman build --format docker --target runtime -t "$IMAGE" .
fi
BUILD_S=$((SECONDS - b0))
SIZE=$($ENGINE image inspect --format '{{.Size}}' "$IMAGE")
ok "built in ${BUILD_S} s; image size $((SIZE / 1000000)) MB"

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

# ------------------------------------------------------------------ 3. run the image
log "run $IMAGE on 127.0.0.1:$PORT (baked-in default model)"
r0=$SECONDS
CID=$($ENGINE run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" -e TUNEMIX_RELOAD_TOKEN=$TOKEN "$IMAGE" 2>"$ERR"); quiet_err
wait_http "http://127.0.0.1:$PORT/health" 200 60
wait_http "http://127.0.0.1:$PORT/ready" 200 "$READY_TIMEOUT"
ok "ready $((SECONDS - r0)) s after docker run"
rank_once "http://127.0.0.1:$PORT"
$ENGINE exec "$CID" sh -c 'test "$(id -u)" != 0' || fail "the service runs as root"
ok "service process runs as uid $($ENGINE exec "$CID" id -u)"
if [ "$ENGINE" = podman ]; then
  podman healthcheck run "$CID" 2>"$ERR" || { quiet_err; fail "podman healthcheck run"; }
  quiet_err
  status=$(podman inspect --format '{{.State.Health.Status}}' "$CID" 2>/dev/null \
           || podman inspect --format '{{.State.Healthcheck.Status}}' "$CID")
else
  # docker runs the HEALTHCHECK on its own schedule (interval 30 s): wait for its verdict
  status=""
  for _ in $(seq 1 60); do
    status=$(docker inspect --format '{{.State.Health.Status}}' "$CID")
    [ "$status" = healthy ] && break
    sleep 2
  done
fi
[ "$status" = healthy ] || fail "image HEALTHCHECK: status '$status'"
ok "image HEALTHCHECK: $status"
$ENGINE rm -f "$CID" >/dev/null 2>"$ERR"; quiet_err; CID=""

# ------------------------------------------------------------------ 4. compose
BASE="http://127.0.0.1:$COMPOSE_PORT"
MODELS_TMP=$(mktemp -d)
chmod 755 "$MODELS_TMP"   # like ./models in a clean clone: empty, world-readable
export TUNEMIX_MODELS_HOST_DIR=$MODELS_TMP TUNEMIX_HOST_PORT=$COMPOSE_PORT TUNEMIX_RELOAD_TOKEN=$TOKEN
log "compose up (project $PROJECT, empty models dir $MODELS_TMP, 127.0.0.1:$COMPOSE_PORT)"
COMPOSE_UP=1
compose up -d >"$ERR" 2>&1 || { cat "$ERR"; fail "compose up"; }
: > "$ERR"
wait_http "$BASE/health" 200 60
wait_http "$BASE/ready" 200 "$READY_TIMEOUT"
[ -f "$MODELS_TMP/default/v1/manifest.json" ] || fail "models-init did not seed default/v1"
ok "models-init seeded $(ls "$MODELS_TMP/default" | tr '\n' ' ')"
rank_once "$BASE"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST -H 'Content-Type: application/json' \
       -d '{"model": "default"}' "$BASE/models/reload")
[ "$code" = 401 ] || fail "POST /models/reload without a token: $code (expected 401)"
ok "POST /models/reload without the token -> 401"

if [ "${DOCKER_TEST_SKIP_TRAINER:-0}" != 1 ]; then
  log "compose --profile train run --rm trainer (a new version of default into the models dir)"
  compose --profile train run --rm trainer >"$ERR" 2>&1 || { cat "$ERR"; fail "trainer"; }
  grep -E 'model written to|ensemble|report' "$ERR" | sed 's/^/   /' || true
  : > "$ERR"
  [ -f "$MODELS_TMP/default/v2/manifest.json" ] || fail "the trainer did not write default/v2"
  ok "versions on disk: $(ls "$MODELS_TMP/default" | tr '\n' ' ')"
  reload=$(curl -fsS --max-time 120 -X POST -H "Authorization: Bearer $TOKEN" \
           -H 'Content-Type: application/json' -d '{"model": "default"}' "$BASE/models/reload") \
    || fail "POST /models/reload"
  ok "POST /models/reload -> $reload"
  [ "$(served_version "$BASE")" = v2 ] || fail "the service does not serve v2 after the reload"
  rank_once "$BASE"
fi

log "compose down"
compose --profile train down >"$ERR" 2>&1 || { cat "$ERR"; fail "compose down"; }
: > "$ERR"
COMPOSE_UP=0
left=$($ENGINE ps -a --filter "name=$PROJECT" --format '{{.Names}}')
[ -z "$left" ] || fail "containers left after down: $left"
ok "stack removed"

log "docker-test passed ($ENGINE; build ${BUILD_S} s; image $((SIZE / 1000000)) MB)"
