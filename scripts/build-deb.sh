#!/usr/bin/env bash
# Builds nats-delivery-exporter_<version>_<arch>.deb with dpkg-deb alone:
#   /usr/bin/nats-delivery-exporter                      the static binary
#   /lib/systemd/system/nats-delivery-exporter.service   the hardened unit
#   /etc/default/nats-delivery-exporter                  its settings (a conffile: ARGS and
#                                                        commented variables; mode 0640, since
#                                                        it may hold passwords and tokens)
#   /usr/share/nats-delivery-exporter/alerts/            Prometheus alert rules
#   /usr/share/nats-delivery-exporter/dashboards/        Grafana dashboards
#   /usr/share/man/man1/nats-delivery-exporter.1.gz      its manual page
#   /usr/share/doc/nats-delivery-exporter/               copyright, changelog.gz
#   /usr/share/lintian/overrides/nats-delivery-exporter  lintian's findings meant so
# Its maintainer scripts (deploy/debian) are what dh_installsystemd writes.
# The service is enabled on first install and started where systemd runs.
# Prints the package's path.
#
#   BINARY   a static binary to package (default: built by
#            scripts/build-static.sh with PROFILE, release by default)
#   OUT_DIR  where the .deb is written (default: target/debian)
#   DEB_MAINTAINER  the Maintainer field, `Name <address>` (default: the
#            project's address below)
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
# Read by systemd (as root) for the unit, by nobody else: it may hold
# passwords and tokens (dpkg keeps the mode; --root-owner-group makes it root's).
install -D -m 0640 deploy/systemd/nats-delivery-exporter.env \
  "$root/etc/default/nats-delivery-exporter"
share="$root/usr/share/nats-delivery-exporter"
install -d "$share/alerts" "$share/dashboards"
install -m 0644 alerts/*.rules.yml "$share/alerts/"
install -m 0644 dashboards/*.json "$share/dashboards/"
doc="$root/usr/share/doc/nats-delivery-exporter"
install -D -m 0644 deploy/debian/copyright "$doc/copyright"
# A native package's changelog, in Debian's format; the project's own is
# CHANGELOG.md. Dated by the last commit (SOURCE_DATE_EPOCH when set), so
# that two builds of one commit give the same package.
# The project has no mail address yet: `.invalid` (RFC 2606) says so
# rather than naming someone else's domain.
maintainer=${DEB_MAINTAINER:-"nats-delivery-exporter maintainers <maintainers@nats-delivery-exporter.invalid>"}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
{
  echo "nats-delivery-exporter ($version) unstable; urgency=medium"
  echo
  echo "  * Release $version; its changes are in the project's CHANGELOG.md."
  echo
  echo " -- $maintainer  $(LC_ALL=C date -u -R -d "@$epoch")"
} | gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
install -d "$root/usr/share/man/man1"
gzip -9n <deploy/debian/nats-delivery-exporter.1 >"$root/usr/share/man/man1/nats-delivery-exporter.1.gz"
chmod 0644 "$root/usr/share/man/man1/nats-delivery-exporter.1.gz"
install -D -m 0644 deploy/debian/lintian-overrides \
  "$root/usr/share/lintian/overrides/nats-delivery-exporter"

install -d "$root/DEBIAN"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$root/DEBIAN/"
echo /etc/default/nats-delivery-exporter >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/control" <<EOF
Package: nats-delivery-exporter
Version: $version
Architecture: $arch
Maintainer: $maintainer
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
