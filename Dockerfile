# Autograd Explorer, self-hosted:  docker run -p 8000:8000 IMAGE   → http://localhost:8000
#
# Build arguments:
#   BASE_IMAGE       a Debian-based Python 3.11 image (default python:3.11-slim-bookworm)
#   TORCH_INDEX_URL  where the CPU-only torch wheel comes from (default: PyTorch's CPU index, which
#                    avoids the multi-GB CUDA build); empty = plain pip with the base image's settings
#   TORCH_VERSION    keep equal to the torch pin in pyproject.toml (a test checks it)
# Stages: frontend (npm ci, the page's bundle) and python (a venv with torch, then the app's
# dependencies), each in layers ordered from rarely to often changed; the final stage copies only
# their results.

ARG BASE_IMAGE=python:3.11-slim-bookworm

# --- front-end packages, pinned by package-lock.json, from the npm registry -----------------------
FROM ${BASE_IMAGE} AS frontend
# Node.js from Debian, so no Node base image is needed; its own layer, cached across lockfile changes.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null \
 && rm -rf /var/lib/apt/lists/*
# npm trusts the same certificates as the rest of the system (a proxy's CA, say).
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
# The page's script bundled with CodeMirror (the pinned esbuild, as scripts/setup does); then only
# what the app serves stays: the bundler, CodeMirror's sources and the test tools leave node_modules.
COPY static/src static/src
RUN npm run --silent build && npm prune --omit=dev --no-audit --no-fund --loglevel=error && mkdir -p node_modules

# --- Python: a venv with CPU-only torch, then the app's other dependencies ---------------------------
FROM ${BASE_IMAGE} AS python
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv
# torch alone first: this ~550 MB layer stays cached while the other dependencies change.
# Its C++ headers, test binaries and test data are dropped: nothing here compiles extensions (the
# sandbox forbids torch.utils.cpp_extension anyway), and they are a quarter of the install.
RUN pip install --quiet ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION}" \
 && site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && rm -rf "$site/torch/include" "$site/torch/test" \
 && find "$site/torch/bin" -type f ! -name torch_shm_manager -delete \
 && python -c 'import torch; assert not torch.cuda.is_available(); print("torch", torch.__version__)'
# dumb-init (a static binary on PyPI) is PID 1: it forwards signals and reaps orphans, e.g. the
# pre-forked children of a fork server that died.
RUN pip install --quiet dumb-init==1.2.5.post1
COPY pyproject.toml /tmp/pyproject.toml
# The dependencies listed in pyproject.toml (the library's and the server extra's), without installing
# the project itself: the app runs from /app as a source tree (templates/, static/ and node_modules/
# sit beside the app package).
RUN python -c 'import tomllib; p = tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["server"]))' \
      > /tmp/requirements.txt \
 && pip install --quiet -r /tmp/requirements.txt \
 && python -c 'import torch, fastapi, uvicorn, psycopg, psycopg_pool'

# --- the image that runs -----------------------------------------------------------------------------
FROM ${BASE_IMAGE}
# libseccomp2 is what the sandbox's seccomp filter is built with (Debian's base images carry it
# because apt needs it; install it only if a base image lacks it). The server's user is written
# straight into /etc/passwd: minimal bases have no useradd.
# fonts-noto-cjk: CJK glyphs for whatever draws the Chinese pages or /render.svg pictures on this host
# (a headless browser taking screenshots, an SVG-to-PNG step); the page's font stack names them.
RUN (dpkg -s libseccomp2 >/dev/null 2>&1 && dpkg -s fonts-noto-cjk >/dev/null 2>&1) \
 || (apt-get update -qq && apt-get install -y -qq --no-install-recommends libseccomp2 fonts-noto-cjk >/dev/null \
     && rm -rf /var/lib/apt/lists/*) \
 && echo 'explorer:x:10001:10001:Autograd Explorer:/nonexistent:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'explorer:x:10001:' >>/etc/group \
 && mkdir -p /data && chown 10001:10001 /data
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    EXPLORER_DATA_DIR=/data
COPY --from=python /opt/venv /opt/venv
WORKDIR /app
COPY --from=frontend /src/node_modules ./node_modules
# The source tree as .dockerignore filters it: app/, templates/, static/ and whatever else they grow.
COPY . .
COPY --from=frontend /src/static/build ./static/build
# Byte-compiled once here: the code is root-owned and read-only to the server user.
RUN python -m compileall -q app
# The graph layout's Graphviz module compiled once here too (seconds), into a root-owned cache.
ENV XDG_CACHE_HOME=/opt/cache
RUN python -c 'from app.render.layout import DOT; DOT.render("digraph { a -> b }")'
USER 10001:10001
# Short links live in SQLite under /data unless DATABASE_URL names a PostgreSQL server.
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
ENTRYPOINT ["dumb-init", "--"]
CMD ["python", "-m", "app", "serve", "--host", "0.0.0.0", "--port", "8000"]
