# syntax=docker/dockerfile:1
# nodegate's container image: the `nodegate` binary built exactly as CI builds
# it (`cargo build --release --locked`), on a minimal, non-root runtime with
# nothing else in it (no shell, no package manager).
#
#   docker build -t ghcr.io/nodegate/nodegate:0.1.0 .
#   docker build --build-arg RUST_VERSION=1.95 -t nodegate:dev .
#
# Build arguments:
#   RUST_VERSION   Rust toolchain of the build stage (default 1.95; the
#                  workspace needs at least its rust-version, 1.89)
#   BUILD_IMAGE    the whole build image, if a mirror or pinned digest is
#                  wanted (default docker.io/library/rust:RUST_VERSION-slim-bookworm)
#   RUNTIME_IMAGE  the runtime base (default gcr.io/distroless/cc-debian12:nonroot:
#                  glibc and libgcc, which the binary links, and user 65532).
#                  Keep it on the same Debian release as BUILD_IMAGE, so the
#                  glibc the binary was linked against is there at run time.
#   VERSION, REVISION  recorded as OCI labels; REVISION (the commit) is also
#                  what `nodegate --version` reports
#
# The cache mounts need BuildKit (docker >= 23 by default, buildah/podman).
# Without a container engine, deploy/image/build assembles the same image
# (same user, entrypoint, labels and binary path; tests/e2e_image.rs checks that
# the two agree) from Debian packages, reproducibly.

ARG RUST_VERSION=1.95
ARG BUILD_IMAGE=docker.io/library/rust:${RUST_VERSION}-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
# The commit for `nodegate --version` (build.rs): the context has no .git.
ARG REVISION=unknown
WORKDIR /src
COPY . .
# The registry and target caches only speed up rebuilds; the binary is copied
# out of the cache mount because the mount is gone after this step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    NODEGATE_REVISION="${REVISION}" cargo build --release --locked --bin nodegate \
    && install -D -m 0755 target/release/nodegate /out/nodegate

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="nodegate" \
      org.opencontainers.image.description="Keeps new Kubernetes nodes closed until their DaemonSets are Ready" \
      org.opencontainers.image.source="https://github.com/nodegate/nodegate" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/nodegate /usr/local/bin/nodegate
# distroless "nonroot" is 65532 already; stated again so that a different
# RUNTIME_IMAGE cannot silently run nodegate as root.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nodegate"]
CMD ["run"]
