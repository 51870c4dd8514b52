# syntax=docker/dockerfile:1
# cronstable in a container: docs/container.md says how to run it and why it is built so.
#
#   docker build -t cronstable .
#   docker run --rm -p 8080:8080 -v "$PWD/my-repo:/etc/cronstable.d:ro" cronstable
#   docker run --rm cronstable run --source 'git+https://git.example/ops/cron.git?ref=main'
#
# Two stages: the wheels (cronstable's carries the exec shim, compiled from C, so the
# builder has a compiler the image does not need), then a slim image with them alone.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY cronstable ./cronstable
# every wheel the image installs, the speedups extra's uvloop and the mcp extra's SDK too
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[speedups,mcp]'

FROM ${PYTHON_IMAGE}
# tini is PID 1: it forwards SIGTERM to the daemon (which drains its runs) and reaps
# what is re-parented to PID 1, the orphans of jobs that daemonized (setsid helper &),
# which the daemon does not wait for (it reaps only the runs it started).
# openssh-client: the git source's ssh:// transport runs ssh (a deploy key).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini openssh-client \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels 'cronstable[speedups,mcp]'

# A user of its own (a number, so Kubernetes' runAsNonRoot can check it).  The XDG
# directories point the daemon's non-root defaults at the same paths it uses as root:
# state in /var/lib/cronstable, the sources' cache in /var/cache/cronstable, the API's
# local socket in /run/cronstable (where `cronstable status` in the container looks).
ARG UID=10001
RUN groupadd --system --gid ${UID} cronstable \
 && useradd --system --uid ${UID} --gid cronstable --home-dir /var/lib/cronstable \
      --shell /usr/sbin/nologin cronstable \
 && install -d -o cronstable -g cronstable -m 0700 \
      /var/lib/cronstable /var/cache/cronstable /run/cronstable
ENV XDG_STATE_HOME=/var/lib \
    XDG_CACHE_HOME=/var/cache \
    XDG_RUNTIME_DIR=/run/cronstable \
    PYTHONUNBUFFERED=1

# The bundled example repository is the default configuration: mount yours over it
# (a directory, or a ConfigMap in Kubernetes), or give a --source.  Its web listener
# is on loopback, enough for the healthcheck; listen on 0.0.0.0:8080 to be reached.
COPY --chown=root:root examples/gitops-repo /etc/cronstable.d
VOLUME ["/var/lib/cronstable", "/var/cache/cronstable"]
EXPOSE 8080

USER ${UID}:${UID}
# 503 from /readyz (no revision applied yet, or a store it cannot reach) fails the check
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=4)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "cronstable"]
CMD ["run", "/etc/cronstable.d"]
