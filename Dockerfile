# syntax=docker/dockerfile:1
# Image for the `eks` profile (profiles/eks/config.yaml, container-image). Every
# Kubernetes Job runs `python -m snakemake ...` in it; the workflow sources themselves
# come from S3 at job start, so the image holds software only:
#   - Python 3.11 on Debian 12 (as on the development machines),
#   - the pinned stack of requirements/lock.txt: Snakemake, its executor and storage
#     plugins at the host's versions, and torch -- from PyPI, torch==<pin> for Linux is
#     the CUDA build, with its CUDA runtime in nvidia-* wheels (the node's driver comes
#     from the NVIDIA device plugin / container toolkit, not from this image),
#   - the shardflow package,
#   - a wheelhouse for the storage plugin, so that the `pip install --target
#     .snakemake/pip-deployments snakemake-storage-plugin-s3` that Snakemake puts in
#     front of every job command needs no package index (pods may have no egress).
# Build and push: see profiles/README.md.

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # Nothing at run time downloads models: the embedding model ships as a wheel.
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

# A non-root user; jobs run as it (uid 1000). Its home holds what Snakemake and the
# libraries write outside the working directory (~/.cache/snakemake, the matplotlib
# config, any Hugging Face or torch cache); /workdir is its own, so the image also works
# where the executor mounts no volume there (the plugin's emptyDir is world-writable).
RUN groupadd --gid 1000 shardflow \
    && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/shardflow --shell /usr/sbin/nologin shardflow \
    && install -d -o 1000 -g 1000 -m 0755 /workdir
ENV HOME=/home/shardflow \
    HF_HOME=/home/shardflow/.cache/huggingface

# The pinned stack first: it changes rarely, so this layer stays cached.
COPY requirements/lock.txt /tmp/requirements/lock.txt
RUN python -m pip install --no-compile -r /tmp/requirements/lock.txt \
    && python -c "import snakemake, snakemake_executor_plugin_kubernetes, snakemake_storage_plugin_s3, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# The wheelhouse: the storage plugin and everything it needs, at the lock file's versions.
RUN grep -E '^snakemake-storage-plugin-s3==' /tmp/requirements/lock.txt > /tmp/requirements/storage-plugins.txt \
    && python -m pip download --dest /opt/wheelhouse --only-binary=:all: \
        -r /tmp/requirements/storage-plugins.txt -c /tmp/requirements/lock.txt

# The project itself (no dependencies: all pinned above).
COPY pyproject.toml README.md /src/
COPY shardflow /src/shardflow
RUN python -m pip install --no-compile --no-deps /src \
    && rm -rf /src /tmp/requirements

# From here on pip resolves from the wheelhouse only: the pods' auto-deployment step
# works offline (the installed copies still win: Snakemake appends the target folder
# to sys.path).
ENV PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/opt/wheelhouse

# The plugin mounts an emptyDir at /workdir and runs every job there.
WORKDIR /workdir
# Numeric, so that a pod securityContext with runAsNonRoot can verify it.
USER 1000:1000
CMD ["python", "-m", "snakemake", "--version"]
