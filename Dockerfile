# tunemix: the scoring service image, with the default model trained at build time.
#
#   docker build -t tunemix .                        # final image (target `runtime`)
#   docker run --rm -p 127.0.0.1:8000:8000 tunemix   # serves the baked-in default model
#   docker build --target builder -t tunemix-trainer .   # the training image (compose `trainer`)
#
# Stages:
#   base     python:3.11-slim, a virtualenv in /opt/venv, shared settings
#   deps     the service's dependencies only: core + [serve] (a cached layer: changes to the code
#            do not reinstall numpy/numba)
#   builder  deps + libgomp1 + [train] (scipy, tqdm, matplotlib, dask, LightGBM); trains the default model into
#            /opt/tunemix/models (tunemix demo).
#   wheel    builder + the tunemix wheel (one package, tunemix), carrying every numba kernel compiled for
#            the generic x86-64 CPU (tunemix/_compiled, `python -m tunemix.compile.ship`)
#   runtime  deps + the wheel + the model from `builder`; non-root; numba cache warmed as that user with
#            the build host's code; the wheel's generic code for any other x86-64 CPU
#
# Models: the default model is baked in at /opt/tunemix/models (TUNEMIX_MODELS_DIR of the image),
# read-only for the service user. docker-compose.yml serves ./models instead, mounted at
# /srv/tunemix/models, which it seeds from this baked copy when ./models has no default model.
ARG PYTHON_IMAGE=python:3.11-slim

# ------------------------------------------------------------------------------------ base
FROM ${PYTHON_IMAGE} AS base
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    NUMBA_CACHE_DIR=/var/cache/tunemix/numba
RUN python -m venv /opt/venv && mkdir -p /tmp/build
# The dependency lists, read from pyproject.toml (one place for them).
COPY pyproject.toml /tmp/build/pyproject.toml
RUN python -c "import tomllib; p = tomllib.load(open('/tmp/build/pyproject.toml', 'rb'))['project']; \
o = p['optional-dependencies']; \
open('/tmp/build/requirements-serve.txt', 'w').write('\n'.join(p['dependencies'] + o['serve']) + '\n'); \
open('/tmp/build/requirements-train.txt', 'w').write('\n'.join(o['train']) + '\n')"

# ------------------------------------------------------------------------------------ deps
FROM base AS deps
RUN pip install -r /tmp/build/requirements-serve.txt

# ------------------------------------------------------------------------------------ builder
FROM deps AS builder
# LightGBM (the McRank and LambdaMART members and every model's relevance head) loads GNU OpenMP,
# which the slim base image lacks; the serving image never imports LightGBM and does without it
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/*
RUN pip install -r /tmp/build/requirements-train.txt
WORKDIR /srv/tunemix
COPY pyproject.toml README.md /tmp/build/src/
COPY tunemix /tmp/build/src/tunemix
RUN pip install "/tmp/build/src[train]" && rm -rf /tmp/build/src
COPY configs ./configs
# The default model's configuration (also packaged in the wheel) at a fixed path, for the compose
# `trainer`, which runs `tunemix train --config /opt/tunemix/default.toml` (./configs is mounted
# over /srv/tunemix/configs there).
COPY tunemix/train/default.toml /opt/tunemix/default.toml
# The default model, on data the project generates itself. Versions are written 0700 by the
# trainer (mkdtemp): open them up for the unprivileged service user.
RUN tunemix demo --models-dir /opt/tunemix/models --data-dir /tmp/synthetic --no-progress \
    && rm -rf /tmp/synthetic \
    && chmod -R a+rX /opt/tunemix/models \
    && test -f /opt/tunemix/models/default/v1/manifest.json

# ------------------------------------------------------------------------------------ wheel
# On `builder` (the warm-up fits every member type: the training extras): the compiled code shipped
# in the wheel, built from the copy the wheel is made of (tunemix.core.shipped_cache places it in an
# empty numba cache, so that a first fit or a worker on a new CPU loads its kernels instead of
# compiling them).
FROM builder AS wheel
COPY pyproject.toml README.md /tmp/build/src/
COPY tunemix /tmp/build/src/tunemix
RUN cd /tmp/build/src && PYTHONPATH=/tmp/build/src NUMBA_CACHE_DIR=/tmp/ship-cache python -m tunemix.compile.ship \
    && test -f /tmp/build/src/tunemix/_compiled/manifest.json && rm -rf /tmp/ship-cache
RUN pip wheel --no-deps --wheel-dir /tmp/wheels /tmp/build/src

# ------------------------------------------------------------------------------------ runtime
FROM deps AS runtime
ARG TUNEMIX_UID=10001
RUN useradd --system --uid "${TUNEMIX_UID}" --user-group --no-create-home \
        --home-dir /srv/tunemix --shell /usr/sbin/nologin tunemix \
    && mkdir -p /srv/tunemix/models "${NUMBA_CACHE_DIR}" \
    && chown tunemix:tunemix "${NUMBA_CACHE_DIR}"
COPY --from=wheel /tmp/wheels /tmp/wheels
# [serve] only: no scipy, tqdm, matplotlib or dask here (everything is already installed by
# `deps`; this resolves against it without downloading).
RUN pip install "$(ls /tmp/wheels/tunemix-*.whl)[serve]" && rm -rf /tmp/wheels /tmp/build
COPY --from=builder /opt/tunemix/models /opt/tunemix/models
ENV TUNEMIX_MODELS_DIR=/opt/tunemix/models \
    TUNEMIX_DEFAULT_MODEL=default \
    TUNEMIX_HOST=0.0.0.0 \
    TUNEMIX_PORT=8000
WORKDIR /srv/tunemix
USER tunemix
# Build the numba cache (NUMBA_CACHE_DIR, owned by this user and still writable at run time): `python
# -m tunemix.compile.serving` compiles every kernel a request can reach (tunemix.compile.serving.warm_all:
# the default model's scoring and explanations, evaluation under every convention, fusion), the
# function the service runs before /ready says 200, for the build host's CPU (TUNEMIX_SHIPPED_CACHE=0:
# the host's code, faster than the wheel's generic code). On a host of another CPU the first
# kernel a worker loads places the wheel's generic code in the cache under that host's key, and the
# worker loads it instead of compiling. Then the service starts in-process once, /ready turns 200
# (every kernel loaded from that cache) and one /rank goes through. A container then starts
# without JIT compilation, and a broken image fails here, not in production.
RUN python -c "from tunemix.core.shipped_cache import SHIPPED, read_manifest; m = read_manifest(SHIPPED); \
assert m and m['complete'], 'the wheel carries no shipped numba cache'; print('shipped cache:', m['entries'], 'entries')"
RUN TUNEMIX_SHIPPED_CACHE=0 python -m tunemix.compile.serving --models-dir /opt/tunemix/models --model default
RUN python -c "import time; from fastapi.testclient import TestClient; from tunemix.service.main import app; \
c = TestClient(app).__enter__(); \
ok = any(c.get('/ready').status_code == 200 or time.sleep(0.5) for _ in range(1200)); \
assert ok, c.get('/ready').text; \
m = c.get('/models').json()['models'][0]; n = m['n_features']; \
docs = [{'id': 'd%d' % i, 'features': [((i * 7 + j) % 10) / 10 for j in range(n)]} for i in range(12)]; \
r = c.post('/rank', json={'queries': [{'qid': 'warm', 'documents': docs}]}); \
assert r.status_code == 200 and len(r.json()['results'][0]['ranking']) == 12, r.text; \
c.__exit__(None, None, None); \
print('numba cache warmed:', m['name'], m['version'], n, 'features')"
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('TUNEMIX_PORT', '8000'), timeout=4).close()"]
CMD ["python", "-m", "tunemix.service"]
