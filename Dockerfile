# The exporter alone on an empty base: one static executable, and the CA
# certificates that TLS to NATS servers and to https monitoring URLs is
# checked against (the binary reads /etc/ssl/certs/ca-certificates.crt, as on
# Debian; SSL_CERT_FILE names another bundle). No shell, no package manager.
#
# From the repository root (deploy/README.md, "Building the image"):
#   docker build --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t nats-delivery-exporter .
# (podman build alike). scripts/build-image.sh builds the same image from a
# static binary built beforehand, in place of the first stage.

# The builder: a Rust toolchain at the crate's minimum version or newer, on
# Debian 12 (glibc 2.36: its static libc resolves names without NSS modules).
ARG RUST_IMAGE=docker.io/library/rust:1.89-bookworm

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# PROFILE: release (the shipped binary) or deploy-test (a quicker build).
ARG PROFILE=release
ARG REVISION=
# The static build of scripts/build-static.sh; the image's files under /out.
RUN NATS_DELIVERY_REVISION="${REVISION}" PROFILE="${PROFILE}" ./scripts/build-static.sh >/dev/null \
 && install -D -m 0755 "target/${PROFILE}/nats-delivery-exporter" /out/usr/bin/nats-delivery-exporter \
 && install -D -m 0644 /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ca-certificates.crt

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=
ARG CREATED=
LABEL org.opencontainers.image.title="nats-delivery-exporter" \
      org.opencontainers.image.description="Prometheus exporter that counts where NATS loses messages" \
      org.opencontainers.image.source="https://github.com/nats-delivery-exporter/nats-delivery-exporter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/ /
# Plain log lines: container logs are files, not terminals.
ENV NO_COLOR=1
USER 65534:65534
EXPOSE 7778
ENTRYPOINT ["/usr/bin/nats-delivery-exporter"]
