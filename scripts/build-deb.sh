#!/usr/bin/env bash
# Builds nats-delivery-exporter_<version>_<arch>.deb with dpkg-deb alone:
#   /usr/bin/nats-delivery-exporter                      the static binary
#   /lib/systemd/system/nats-delivery-exporter.service   the hardened unit
#   /etc/default/nats-delivery-exporter                  its settings (a conffile, all commented)
#   /usr/share/nats-delivery-exporter/alerts/            Prometheus alert rules
#   /usr/share/nats-delivery-exporter/dashboards/        Grafana dashboards
# The service is enabled on first install and started where systemd runs.
# Prints the package's path.
#
#   BINARY   a static binary to package (default: built by
#            scripts/build-static.sh with PROFILE, release by default)
#   OUT_DIR  where the .deb is written (default: target/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BINARY:-$(./scripts/build-static.sh)}
version=$("$bin" --version | awk '{ print $2 }')
arch=$(dpkg --print-architecture)
out=${OUT_DIR:-${CARGO_TARGET_DIR:-target}/debian}
mkdir -p "$out"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

install -D -m 0755 "$bin" "$root/usr/bin/nats-delivery-exporter"
install -D -m 0644 deploy/systemd/nats-delivery-exporter.service \
  "$root/lib/systemd/system/nats-delivery-exporter.service"
install -D -m 0644 deploy/systemd/nats-delivery-exporter.env \
  "$root/etc/default/nats-delivery-exporter"
share="$root/usr/share/nats-delivery-exporter"
install -d "$share/alerts" "$share/dashboards"
install -m 0644 alerts/*.rules.yml "$share/alerts/"
install -m 0644 dashboards/*.json "$share/dashboards/"
install -D -m 0644 deploy/debian/copyright "$root/usr/share/doc/nats-delivery-exporter/copyright"

install -d "$root/DEBIAN"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$root/DEBIAN/"
echo /etc/default/nats-delivery-exporter >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/control" <<EOF
Package: nats-delivery-exporter
Version: $version
Architecture: $arch
Maintainer: The nats-delivery-exporter authors <https://github.com/nats-delivery-exporter/nats-delivery-exporter/issues>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Recommends: ca-certificates
Section: net
Priority: optional
Homepage: https://github.com/nats-delivery-exporter/nats-delivery-exporter
Description: Prometheus exporter that counts where NATS loses messages
 Polls nats-server monitoring endpoints, listens to JetStream advisories and
 system events, and serves Prometheus metrics: slow-consumer cuts by client,
 messages that exhausted max_deliver or were terminated, consumer saturation.
 Ships a hardened systemd unit, alert rules and Grafana dashboards.
EOF
deb="$out/nats-delivery-exporter_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"
