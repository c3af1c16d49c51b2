//! The test harness itself starts every server version the fixtures cover.
use nats_test_server::NatsServer;

#[test]
fn starts_each_version_on_free_ports() {
    for v in ["2.15.1", "2.12.8", "2.11.11", "2.10.26", "debian"] {
        let s = NatsServer::builder().version(v).jetstream().start();
        assert_ne!(s.client_port, 4222);
        assert_ne!(s.monitor_port, 8222);
        let varz = nats_test_server::http_get(&format!("{}/varz", s.monitor_url()));
        assert!(
            varz.contains(&format!("\"server_name\": \"{}\"", s.name)),
            "{v}: {varz}"
        );
    }
}
