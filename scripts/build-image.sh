#!/usr/bin/env bash
# Builds the container image `nats-delivery-exporter:<version>` from the
# Dockerfile without compiling in a container and without pulling anything:
# a static binary built beforehand and this machine's CA bundle stand in for
# the Dockerfile's first stage (`--build-context build=...`, podman 4.2 or
# newer, docker buildx), so the image holds what `docker build .` gives.
# Prints the image name.
#
#   BINARY          a static binary to package (default: built by
#                   scripts/build-static.sh with PROFILE, release by default)
#   CA_BUNDLE       PEM bundle copied to /etc/ssl/certs/ca-certificates.crt
#                   (default: this machine's, from Debian's ca-certificates)
#   IMAGE           name and tag (default: nats-delivery-exporter:<version>)
#   CREATED         the image's `created` label (default: now, or
#                   SOURCE_DATE_EPOCH when set), RFC 3339
#   CONTAINER_TOOL  the build command's first words (default: podman;
#                   e.g. docker buildx, or podman with global flags)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BINARY:-$(./scripts/build-static.sh)}
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
# The image's version and revision labels are the ones the binary reports:
# `nats-delivery-exporter 0.1.0 (revision 0123456789ab, rustc 1.89.0)`.
version=$("$bin" --version | awk '{ print $2 }')
revision=$("$bin" --version | sed -n 's/.*(revision \([^,)]*\).*/\1/p')
created=${CREATED:-$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%dT%H:%M:%SZ)}
image=${IMAGE:-nats-delivery-exporter:$version}
umask 022
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# What the first stage leaves under /out; the build context is empty.
install -D -m 0755 "$bin" "$stage/out/usr/bin/nats-delivery-exporter"
install -D -m 0644 "$ca_bundle" "$stage/out/etc/ssl/certs/ca-certificates.crt"
mkdir "$stage/context"
# shellcheck disable=SC2086 # the tool may carry its own flags
${CONTAINER_TOOL:-podman} build --quiet -f "$PWD/Dockerfile" --build-context "build=$stage" \
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created" \
  -t "$image" "$stage/context" >&2
echo "$image"
