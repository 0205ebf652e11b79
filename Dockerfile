# sandboxfs as a container: the streamable-HTTP sidecar (or, with other arguments, stdio).
#
#   docker build -t sandboxfs .
#   docker run --rm --read-only -p 8080:8080 \
#     -v "$PWD:/projects/workspace" \
#     -v "$PWD/token:/run/secrets/sandboxfs-token:ro" sandboxfs
#
# Everything the agent may touch is mounted under /projects (as with the reference
# server's image); add ":ro" to a mount to make it read-only.

FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY native ./native
COPY sandboxfs ./sandboxfs
RUN python -m venv /opt/sandboxfs \
 && /opt/sandboxfs/bin/pip install --no-cache-dir . \
 && /opt/sandboxfs/bin/python -m compileall -q /opt/sandboxfs

FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin sandboxfs \
 && mkdir /projects \
 && chown 10001:10001 /projects
COPY --from=build /opt/sandboxfs /opt/sandboxfs
# The root filesystem may be read-only: no bytecode is written, nothing else either.
ENV PATH=/opt/sandboxfs/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /projects
EXPOSE 8080
ENTRYPOINT ["sandboxfs", "--http", "0.0.0.0:8080", "--token-file", "/run/secrets/sandboxfs-token"]
CMD ["/projects"]
