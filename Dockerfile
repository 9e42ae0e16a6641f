# syntax=docker/dockerfile:1
# meshfit service image: `meshfit serve` (kube-scheduler / Volcano extender, gRPC Placement, /metrics).
#
#   docker build -t ghcr.io/meshfit/meshfit:0.1.0 .
#   docker run --rm -p 8888:8888 -v $PWD/cluster.json:/cluster.json:ro ghcr.io/meshfit/meshfit:0.1.0 \
#       --host 0.0.0.0 --cluster /cluster.json          # embedded mode, outside Kubernetes
#
# In a pod it runs with in-cluster credentials (no --kubeconfig). No torch: the `runtime` extra
# (`meshfit run`, `meshfit demo`) is not installed. Runs as uid 65532 with a read-only root file
# system: bytecode is compiled at build time and nothing is written outside /tmp (mount an emptyDir
# there; manifests/meshfit.yaml does).

ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: a virtual environment with meshfit and its dependencies, compiled to bytecode --------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/meshfit
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY topology ./topology
COPY scheduler ./scheduler
COPY plugins ./plugins
COPY simulations ./simulations
RUN /opt/meshfit/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/meshfit/bin/pip install /wheels/meshfit-*.whl \
 && /opt/meshfit/bin/python -m compileall -q /opt/meshfit/lib \
 && ! /opt/meshfit/bin/python -c "import torch" 2>/dev/null \
 && /opt/meshfit/bin/meshfit serve --help >/dev/null

# ---- final: the slim base, the venv, a non-root user ------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="meshfit" \
      org.opencontainers.image.description="Topology-aware gang scheduler: kube-scheduler extender service" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
RUN groupadd --system --gid 65532 meshfit \
 && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin meshfit
COPY --from=builder /opt/meshfit /opt/meshfit
COPY LICENSE /usr/share/doc/meshfit/LICENSE
ENV PATH=/opt/meshfit/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
USER 65532:65532
WORKDIR /tmp
EXPOSE 8888 8889 9090
ENTRYPOINT ["meshfit", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8888", "--grpc-port", "9090", "--metrics-port", "8889"]
