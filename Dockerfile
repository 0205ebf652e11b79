# sandboxfs as a container: MCP over stdio by default, like the reference server's
# image; streamable HTTP (the sidecar) with the sidecar's arguments.
#
#   docker build -t sandboxfs .
#
# stdio (a client starts it; -i keeps stdin open; name what is mounted under /projects):
#
#   docker run -i --rm -v "$PWD:/projects/work" sandboxfs /projects/work
#
# The image's user (10001) may read what is world-readable; to change files, run as the
# user who owns them: --user "$(id -u):$(id -g)". Add ":ro" to a mount to make it
# read-only. As the pod spec runs it: --read-only --cap-drop ALL
# --security-opt no-new-privileges.
#
# HTTP, the sidecar (README, "Container sidecar"): the token in a file outside what is
# served, the port published on loopback:
#
#   mkdir -p workspace && openssl rand -hex 32 > token && chmod 600 token
#   docker run --rm --read-only --cap-drop ALL --user "$(id -u):$(id -g)" \
#     -p 127.0.0.1:8080:8080 -v "$PWD/workspace:/projects/workspace" \
#     -v "$PWD/token:/run/secrets/sandboxfs-token:ro" sandboxfs \
#     --http 0.0.0.0:8080 --token-file /run/secrets/sandboxfs-token /projects/workspace
#
# Clients must name the server as they reach it: with -p 127.0.0.1:9090:8080 add
# "--allowed-host localhost:9090" (the 421 answer names the Host it got and the
# --allowed-host to add). The HEALTHCHECK asks the server's /healthz over HTTP (or
# its unix socket); over stdio there is nothing to ask and it reports healthy while
# the server runs.
#
# Tenants (README, "Tenants"): the root filesystem stays read-only, and the workers'
# sockets go on a tmpfs (--run-dir):
#
#   docker run --rm --read-only --tmpfs /run/sandboxfs --user "$(id -u):$(id -g)" \
#     -p 127.0.0.1:8080:8080 -v "$PWD/tenants.toml:/etc/sandboxfs/tenants.toml:ro" \
#     -v "$PWD/alice:/srv/alice" sandboxfs \
#     --tenants /etc/sandboxfs/tenants.toml --http 0.0.0.0:8080 --run-dir /run/sandboxfs
#
# The base is pinned by digest (debian:bookworm-slim, its multi-platform index: amd64
# and arm64); Python is Debian's python3 (3.11), kept current by Debian's security
# updates. To move the pin: docker buildx imagetools inspect debian:bookworm-slim.
# BASE may name another Debian bookworm image (CI builds one with debootstrap).
ARG BASE=debian:bookworm-slim@sha256:4b50eb66f977b4062683ff434ef18ac191da862dbe966961bc11990cf5791a8d

FROM ${BASE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev python3 python3-dev python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md LICENSE ./
COPY native ./native
COPY sandboxfs ./sandboxfs
# The wheel is built and installed as pipx would; pip and setuptools then leave the
# environment (nothing in the image installs anything).
RUN python3 -m venv /opt/sandboxfs \
 && /opt/sandboxfs/bin/pip install --no-cache-dir --disable-pip-version-check . \
 && /opt/sandboxfs/bin/pip uninstall -y --disable-pip-version-check pip setuptools \
 && /opt/sandboxfs/bin/python -m compileall -q /opt/sandboxfs

FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin sandboxfs \
 && mkdir /projects \
 && chown 10001:10001 /projects
COPY --from=build /opt/sandboxfs /opt/sandboxfs
COPY LICENSE /usr/share/doc/sandboxfs/LICENSE
# The root filesystem may be read-only: no bytecode is written, nothing else either.
ENV PATH=/opt/sandboxfs/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /projects
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/opt/sandboxfs/bin/python", "-P", "-m", "sandboxfs.cli.healthcheck"]
ENTRYPOINT ["sandboxfs"]
CMD ["/projects"]
