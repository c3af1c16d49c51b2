#!/usr/bin/env bash
# Builds the container image `nats-delivery-exporter:<version>` from the
# Dockerfile, with podman or docker and without pulling anything: the static
# binary and this machine's CA bundle are staged as the build context.
# Prints the image name.
#
#   BINARY          a static binary to package (default: built by
#                   scripts/build-static.sh with PROFILE, release by default)
#   CA_BUNDLE       PEM bundle copied to /etc/ssl/certs/ca-certificates.crt
#                   (default: this machine's, from Debian's ca-certificates)
#   IMAGE           name and tag (default: nats-delivery-exporter:<version>)
#   CONTAINER_TOOL  the build command's first words (default: podman;
#                   e.g. docker, or podman with global flags)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BINARY:-$(./scripts/build-static.sh)}
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
# The image's version label is the one the binary reports.
version=$("$bin" --version | awk '{ print $2 }')
image=${IMAGE:-nats-delivery-exporter:$version}
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$bin" "$context/nats-delivery-exporter"
cp "$ca_bundle" "$context/ca-certificates.crt"
chmod 0755 "$context/nats-delivery-exporter"
chmod 0644 "$context/ca-certificates.crt"
# shellcheck disable=SC2086 # the tool may carry its own flags
${CONTAINER_TOOL:-podman} build --quiet -f Dockerfile --build-arg "VERSION=$version" \
  -t "$image" "$context" >&2
echo "$image"
