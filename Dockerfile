# The exporter alone on an empty base: one static executable, and the CA
# certificates that TLS to NATS servers and to https monitoring URLs is
# checked against (the binary reads /etc/ssl/certs/ca-certificates.crt, as on
# Debian; SSL_CERT_FILE names another bundle). No shell, no package manager.
#
# Build it with scripts/build-image.sh, which builds the static binary and
# stages it with the CA bundle as the build context; nothing is pulled.
FROM scratch
ARG VERSION
LABEL org.opencontainers.image.title="nats-delivery-exporter" \
      org.opencontainers.image.description="Prometheus exporter that counts where NATS loses messages" \
      org.opencontainers.image.source="https://github.com/nats-delivery-exporter/nats-delivery-exporter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY nats-delivery-exporter /usr/bin/nats-delivery-exporter
# Plain log lines: container logs are files, not terminals.
ENV NO_COLOR=1
USER 65534:65534
EXPOSE 7778
ENTRYPOINT ["/usr/bin/nats-delivery-exporter"]
