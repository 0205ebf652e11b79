# sandboxfs as a container: the streamable-HTTP sidecar (or, with other arguments, stdio).
#
#   docker build -t sandboxfs .
#   mkdir -p workspace && openssl rand -hex 32 > token && chmod 600 token
#   docker run --rm --read-only --user "$(id -u):$(id -g)" -p 127.0.0.1:8080:8080 \
#     -v "$PWD/workspace:/projects/workspace" \
#     -v "$PWD/token:/run/secrets/sandboxfs-token:ro" sandboxfs
#
# Everything the agent may touch is mounted under /projects (as with the reference
# server's image); add ":ro" to a mount to make it read-only. Keep the token outside
# what is served (the agent could read it there), and run as a user who may write the
# mounted directories (--user; the image's own user is 10001). Clients must name the
# server as they reach it: with -p 127.0.0.1:9090:8080 end the command with
# "sandboxfs --allowed-host localhost:9090 /projects" (arguments after the image replace
# its CMD; the 421 answer names the Host it got and the --allowed-host to add).
#
# Tenants (README, "Tenants"): start the front instead of the entrypoint; the root
# filesystem stays read-only, and the workers' sockets go on a tmpfs (--run-dir):
#
#   docker run --rm --read-only --tmpfs /run/sandboxfs --user "$(id -u):$(id -g)" \
#     -p 127.0.0.1:8080:8080 -v "$PWD/tenants.toml:/etc/sandboxfs/tenants.toml:ro" \
#     -v "$PWD/alice:/srv/alice" --entrypoint sandboxfs sandboxfs \
#     --tenants /etc/sandboxfs/tenants.toml --http 0.0.0.0:8080 --run-dir /run/sandboxfs

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
