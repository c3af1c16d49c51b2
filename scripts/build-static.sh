#!/usr/bin/env bash
# Builds the exporter as one static executable (glibc linked in, static-pie):
# the binary the container image and the .deb ship. Prints its path.
#
#   PROFILE   cargo profile (default: release; the tests use deploy-test)
#
# Only the final link is static (`-C target-feature=+crt-static` on the
# binary crate), so the dependencies already built for the profile are reused
# and no other Rust target needs installing. glibc 2.34 and later resolve
# names from /etc/hosts and DNS without loading NSS modules, which is all a
# static binary can do: other NSS sources (LDAP, mDNS, ...) are not read.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-release}
# The revision the binary reports, given rather than read by build.rs from
# git, so that the Dockerfile's builder (given the same) finds this build fresh.
NATS_DELIVERY_REVISION=${NATS_DELIVERY_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}
export NATS_DELIVERY_REVISION
cargo rustc --locked --quiet --profile "$profile" --bin nats-delivery-exporter \
  -- -C target-feature=+crt-static >&2
bin="${CARGO_TARGET_DIR:-target}/$profile/nats-delivery-exporter"
# A dynamically linked binary names its loader in a PT_INTERP header.
if readelf -lW "$bin" | grep -q INTERP; then
  echo "error: $bin is not statically linked" >&2
  exit 1
fi
echo "$bin"
