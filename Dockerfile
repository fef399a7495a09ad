# syntax=docker/dockerfile:1
#
# duckgate container image.
#
#   docker build -t duckgate .
#   docker run --rm -p 8080:8080 \
#     -e DUCKGATE_QUERY_TOKENS=change-me -e DUCKGATE_ADMIN_TOKEN=change-me-too-16+ \
#     -e DUCKGATE_S3_ROLE_ARN=arn:aws:iam::123456789012:role/lake-reader \
#     -v "$HOME/.aws/credentials:/run/secrets/aws-credentials:ro" \
#     -e DUCKGATE_S3_BASE_CREDENTIALS_FILE=/run/secrets/aws-credentials \
#     duckgate
#
# (The base keys that sign AssumeRole come from a mounted file rather than
# AWS_* variables, which child processes inherit and /proc shows.)
#
# Configuration is the gateway's own DUCKGATE_* environment variables (see
# README.md); nothing in the image is specific to one deployment. The image
# listens on 0.0.0.0, where anonymous queries are refused: set
# DUCKGATE_QUERY_TOKENS (or DUCKGATE_QUERY_TOKENS_FILE).
#
# linux/amd64 only: the httpfs extension comes from the PyPI wheel
# duckdb-extension-httpfs, which is built for manylinux x86_64, and the gateway
# looks for it under <DUCKGATE_EXTENSION_DIR>/v1.5.5/linux_amd64/.
# The build links the official prebuilt DuckDB library (build.rs checks the
# npm package's pinned integrity), which the image carries beside the binary.
#
# This file needs a registry for its base images (override them with
# --build-arg PYTHON_IMAGE=... RUST_IMAGE=... RUNTIME_IMAGE=...) and the
# network for crates and wheels. Without either, build the runtime-only image
# instead: scripts/image (Dockerfile.runtime, the binary built on the host).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm
ARG DUCKDB_VERSION=v1.5.5
ARG HTTPFS_WHEEL_VERSION=1.5.5
ARG PYTHON_IMAGE=python:3.12-slim-${DEBIAN_RELEASE}
ARG RUST_IMAGE=rust:${RUST_VERSION}-${DEBIAN_RELEASE}
ARG RUNTIME_IMAGE=debian:${DEBIAN_RELEASE}-slim

# ---- httpfs extension, from the PyPI wheel (never downloaded at run time) ----
FROM ${PYTHON_IMAGE} AS httpfs
ARG DUCKDB_VERSION
ARG HTTPFS_WHEEL_VERSION
ARG TARGETARCH
# sha256 of extensions/v1.5.5/httpfs.duckdb_extension inside the 1.5.5 wheel
# (its RECORD entry); update together with HTTPFS_WHEEL_VERSION.
ARG HTTPFS_SHA256=887c392b1e49128d11667c81e3698d8b00dfdeb456771acf66d05a0f74f7b7d8
# The same for icu (time zones), from duckdb-extension-icu of the same version.
ARG ICU_SHA256=fe6196ede9037cc01d43cad5e55a3d2503118de9169d2a25f1b787779b5d02e6
RUN set -eux; \
    if [ "${TARGETARCH:-amd64}" != amd64 ]; then \
        echo "duckgate images are linux/amd64 only (the httpfs wheel is x86_64)" >&2; exit 1; \
    fi; \
    pip download --no-cache-dir --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --python-version 3.12 \
        --dest /tmp/wheels "duckdb-extension-httpfs==${HTTPFS_WHEEL_VERSION}"; \
    python -m zipfile -e /tmp/wheels/duckdb_extension_httpfs-*.whl /tmp/wheel; \
    install -D -m 0644 \
        "/tmp/wheel/duckdb_extension_httpfs/extensions/${DUCKDB_VERSION}/httpfs.duckdb_extension" \
        "/opt/duckgate/extensions/${DUCKDB_VERSION}/linux_amd64/httpfs.duckdb_extension"; \
    echo "${HTTPFS_SHA256}  /opt/duckgate/extensions/${DUCKDB_VERSION}/linux_amd64/httpfs.duckdb_extension" \
        | sha256sum -c -; \
    pip download --no-cache-dir --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --python-version 3.12 \
        --dest /tmp/wheels "duckdb-extension-icu==${HTTPFS_WHEEL_VERSION}"; \
    python -m zipfile -e /tmp/wheels/duckdb_extension_icu-*.whl /tmp/wheel; \
    install -D -m 0644 \
        "/tmp/wheel/duckdb_extension_icu/extensions/${DUCKDB_VERSION}/icu.duckdb_extension" \
        "/opt/duckgate/extensions/${DUCKDB_VERSION}/linux_amd64/icu.duckdb_extension"; \
    echo "${ICU_SHA256}  /opt/duckgate/extensions/${DUCKDB_VERSION}/linux_amd64/icu.duckdb_extension" \
        | sha256sum -c -
# The lake extensions ([[attach]] catalogs), each from its 1.5.5 wheel the same
# way: extension name, wheel name, sha256 of the file inside the wheel.
RUN set -eux; \
    for spec in \
        ducklake:ducklake:e51bf9e8d933d0e83780ae096455501b542cf962569a2ce5613532d702c08302 \
        postgres_scanner:postgres-scanner:b1ced4cfc6311313e117c2afb3eac76508718778dde0716421503c7dbfb5605c \
        iceberg:iceberg:ebc4993903de0d71d42fe3027b6691b8d5e5936ed366e98bdb9eab5aeedeb422 \
        avro:avro:f9c59d9735863896fb10c78f2d6e23132cc9ede4a4fb8c10a6f523b6d0793c77 \
        delta:delta:24b10f221b799a82f2aec588102702540fb79b34ba4be7f47328333a02fd4e1e; do \
        ext="${spec%%:*}"; rest="${spec#*:}"; wheel="${rest%%:*}"; sum="${rest#*:}"; \
        rm -rf /tmp/wheels /tmp/wheel; \
        pip download --no-cache-dir --no-deps --only-binary=:all: \
            --platform manylinux2014_x86_64 --python-version 3.12 \
            --dest /tmp/wheels "duckdb-extension-${wheel}==${HTTPFS_WHEEL_VERSION}"; \
        python -m zipfile -e /tmp/wheels/duckdb_extension_*.whl /tmp/wheel; \
        install -D -m 0644 \
            "/tmp/wheel/duckdb_extension_${ext}/extensions/${DUCKDB_VERSION}/${ext}.duckdb_extension" \
            "/opt/duckgate/extensions/${DUCKDB_VERSION}/linux_amd64/${ext}.duckdb_extension"; \
        echo "${sum}  /opt/duckgate/extensions/${DUCKDB_VERSION}/linux_amd64/${ext}.duckdb_extension" \
            | sha256sum -c -; \
    done

# ---- build -------------------------------------------------------------------
FROM ${RUST_IMAGE} AS build
# The official DuckDB library, as build.rs fetches it (npm's tarball of
# @duckdb/node-bindings-linux-x64@1.5.5-r.5; build.rs checks its integrity).
ARG LIBDUCKDB_TGZ_URL=https://registry.npmjs.org/@duckdb/node-bindings-linux-x64/-/node-bindings-linux-x64-1.5.5-r.5.tgz
ENV DUCKDB_LIB_DIR=/opt/libduckdb \
    DUCKGATE_LIBDUCKDB_TGZ=/opt/libduckdb.tgz
WORKDIR /src
# Only what `cargo build --release` needs (see .dockerignore).
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    set -eux; \
    curl -fsSL --retry 3 -o "$DUCKGATE_LIBDUCKDB_TGZ" "$LIBDUCKDB_TGZ_URL"; \
    cargo build --release --locked --bin duckgate; \
    install -D -m 0755 target/release/duckgate /out/duckgate; \
    install -D -m 0644 "$DUCKDB_LIB_DIR/libduckdb.so" /out/libduckdb.so; \
    /out/duckgate --version

# ---- runtime -----------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
# ca-certificates: TLS to S3 and STS. curl: the HEALTHCHECK below. Then
# scripts/image-slim takes out the package manager, perl, bash and every
# program that can change who runs it (the shell left is dash).
COPY scripts/image-slim /usr/local/sbin/image-slim
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates curl; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --system --gid 10001 duckgate; \
    useradd --system --uid 10001 --gid duckgate --home-dir /var/lib/duckgate \
        --no-create-home --shell /usr/sbin/nologin duckgate; \
    install -d -o duckgate -g duckgate -m 0700 /var/lib/duckgate; \
    sh /usr/local/sbin/image-slim; \
    rm -f /usr/local/sbin/image-slim

# The extension directory is root-owned and read-only for the gateway's user.
COPY --from=httpfs /opt/duckgate/extensions /opt/duckgate/extensions
# The binary finds libduckdb.so beside it (rpath `$ORIGIN`).
COPY --from=build /out/duckgate /out/libduckdb.so /opt/duckgate/bin/
RUN ln -s /opt/duckgate/bin/duckgate /usr/local/bin/duckgate

ENV DUCKGATE_LISTEN=0.0.0.0:8080 \
    DUCKGATE_DATA_DIR=/var/lib/duckgate/data \
    DUCKGATE_EXTENSION_DIR=/opt/duckgate/extensions \
    DUCKGATE_LOG_FORMAT=json \
    HOME=/var/lib/duckgate

# Writable state (DuckDB's secret directory, wiped at start, and spill files).
VOLUME ["/var/lib/duckgate"]
WORKDIR /var/lib/duckgate
USER 10001:10001
EXPOSE 8080

# Liveness from the snapshot only (no pool, no DuckDB). The port follows
# DUCKGATE_LISTEN, so overriding the listen address keeps the check right.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:${DUCKGATE_LISTEN##*:}/healthz" || exit 1

# SIGTERM starts a graceful drain of DUCKGATE_SHUTDOWN_GRACE_MS (default 10 s,
# plus up to 5 s to close connections): give `docker stop` a longer --time.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/duckgate/bin/duckgate"]
CMD ["serve"]
