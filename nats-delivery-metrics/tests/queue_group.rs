//! The documented pattern for a queue group spread over two connections: one
//! `ClientMetrics` per connection (its own `client` label), the same
//! subscription name on both; summing over `client` gives the group's
//! totals, and each member's numbers equal the server's count for its sid.

use nats_test_server::app as common;
use nats_test_server::sample::exact;
use nats_test_server::wait::Wait;

use common::exposition;
use nats_delivery_metrics::{ClientMetrics, InstrumentedClient, PendingLimits, SubscribeOptions};
use nats_test_server::NatsServer;
use prometheus_client::registry::Registry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_group_over_two_connections_adds_up() {
    const N: u64 = 5_000;
    let server = NatsServer::builder().start();
    let mut registry = Registry::default();
    let mut members: Vec<(String, InstrumentedClient)> = Vec::new();
    for name in ["orders-a", "orders-b"] {
        let metrics = ClientMetrics::new(name, &mut registry);
        let client = metrics
            .connect(
                async_nats::ConnectOptions::new().name(name),
                server.client_url(),
            )
            .await
            .unwrap();
        members.push((name.to_string(), client));
    }
    let options = SubscribeOptions::new()
        .name("jobs")
        .queue_group("workers")
        .pending_limits(PendingLimits::default().messages(100));
    let mut subs = Vec::new();
    for (_, client) in &members {
        subs.push(
            client
                .subscribe_with("jobs.*", options.clone())
                .await
                .unwrap(),
        );
        let _ = client.request("queue.sync", bytes::Bytes::new()).await;
    }
    let publisher = async_nats::connect(server.client_url()).await.unwrap();
    common::publish_n(&publisher, "jobs.new", N).await;
    // Nobody reads: each member keeps 100 and drops the rest of its share.
    let accounted = |i: usize| subs[i].dropped_messages() + subs[i].pending_messages();
    Wait::secs("every message accounted", 20)
        .every(std::time::Duration::from_millis(10))
        .until(|| accounted(0) + accounted(1) == N)
        .await;
    let text = exposition(&registry);
    let mut total = 0.0;
    for (i, (name, _)) in members.iter().enumerate() {
        let sid = subs[i].sid().unwrap();
        assert_eq!(
            accounted(i),
            common::server_subscription_msgs(&server, name, sid)
        );
        assert_eq!(subs[i].pending_messages(), 100);
        let l = [("client", name.as_str()), ("subscription", "jobs")];
        let dropped = exact(&text, "nats_delivery_client_dropped_messages_total", &l).unwrap();
        assert_eq!(dropped, subs[i].dropped_messages() as f64);
        total += dropped;
    }
    // sum without (client) of the dropped counter: the group's drops.
    assert_eq!(total, (N - 200) as f64);
}
