# The image the manifests in deploy/kubernetes/ name (neural-arch:latest): Python 3.11, PyTorch
# 2.13.0 (CPU build), this package installed as a wheel would be (not editable), and the example
# the Indexed Job and PyTorchJob run (examples/train_mlp.py, from /app).
#
# Build: docker build -t neural-arch:latest .      (or podman/buildah; then push to your registry)
# Try:   docker run --rm neural-arch:latest neural-arch train --config tiny
#
# GPUs (NCCL): build with the CUDA wheels of the same torch release, e.g.
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu130 -t neural-arch:cuda .
# and request nvidia.com/gpu in the manifests (TrainJob: trainer.resourcesPerNode.limits).
# The CUDA runtime comes inside those wheels; the node needs only the NVIDIA driver.
FROM python:3.11-slim

# The torch build to install: the CPU wheels by default (about 200 MB, not PyPI's multi-GB CUDA one).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch first and pinned, as the Makefile does, so installing the package never pulls another build.
RUN pip install --index-url "${TORCH_INDEX}" torch==2.13.0

# Only what building the package needs (see .dockerignore): a change elsewhere keeps this layer.
# Built from a folder that is removed afterwards, so `import neural_arch` finds the installed copy.
COPY pyproject.toml README.md /tmp/src/
COPY neural_arch/ /tmp/src/neural_arch/
RUN pip install /tmp/src && rm -rf /tmp/src

WORKDIR /app
COPY examples/ examples/

# Run as a user, not root; the run directory is a mounted volume (/runs) or the working directory.
RUN useradd --create-home --uid 1000 trainer && mkdir -p /runs && chown trainer /app /runs
USER 1000

CMD ["neural-arch", "--help"]
