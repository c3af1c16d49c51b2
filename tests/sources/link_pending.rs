//! Route and gateway connections' pending bytes (`/routez`, `/gatewayz`)
//! against real servers: a server alone, a 2-node cluster, two 1-server
//! clusters joined by gateways, a leaf node pair. Every series must equal
//! what the server itself reports; quiet links hold nothing, so non-zero
//! values are checked here on real replies served back, and on real links
//! in `link_pending_held.rs`.
use crate::common;
use crate::link_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::fake_endpoint::{self, Reply};
use link_support::*;
use nats_test_server::sample::{samples, value};
use nats_test_server::wait::Wait;
use nats_test_server::{free_port, NatsServer};
use serde_json::{json, Value};

#[tokio::test]
async fn a_server_without_cluster_or_gateways_is_up_with_no_links() {
    let server = NatsServer::builder().start();
    let exporter = common::exporter(&[server.monitor_url()], LINKS);
    let text = common::scrape(&exporter).await;
    for source in ["routez", "gatewayz"] {
        let up = value(
            &text,
            "nats_delivery_up",
            &[("server", &server.name), ("source", source)],
        );
        assert_eq!(up, Some(1.0), "{source}\n{text}");
    }
    assert!(!text.contains("nats_delivery_route_pending"), "{text}");
    assert!(!text.contains("nats_delivery_gateway_pending"), "{text}");
    nats_test_server::reference::assert_documented(&text);
}

#[tokio::test]
async fn each_route_of_a_two_node_cluster_is_exported_as_the_server_reports_it() {
    let nodes = nats_test_server::cluster(2, "");
    let urls: Vec<String> = nodes.iter().map(|n| n.monitor_url()).collect();
    let exporter = common::exporter(&urls, LINKS);
    let reports = fills_pending_size(&nodes[0]);
    for (me, other) in [(&nodes[0], &nodes[1]), (&nodes[1], &nodes[0])] {
        // A route's pending bytes move (a PING of 6 bytes can be waiting):
        // the exporter is read while the server's view, read before and
        // after, stays the same.
        let (server_view, text) = settled(
            &exporter,
            None,
            || routes_of(me),
            |view, text| !reports || exported_routes(text, &me.name) == *view,
        )
        .await;
        let up = [("server", me.name.as_str()), ("source", "routez")];
        assert_eq!(value(&text, "nats_delivery_up", &up), Some(1.0));
        if !reports {
            // pending_size is always 0 there: nothing is exported.
            assert_eq!(exported_routes(&text, &me.name), BTreeSet::new(), "{text}");
            continue;
        }
        assert_eq!(exported_routes(&text, &me.name), server_view, "{text}");
        assert!(server_view
            .iter()
            .all(|(remote, _, _)| remote == &other.name));
        // A quiet route holds nothing: the ratio to max_pending is 0.
        for (_, rid, _) in &server_view {
            let ratio = value(
                &text,
                "nats_delivery_route_pending_ratio",
                &[("server", &me.name), ("rid", rid)],
            );
            assert_eq!(ratio, Some(0.0), "{rid}");
        }
        nats_test_server::reference::assert_documented(&text);
    }
}

#[tokio::test]
async fn gateways_between_two_clusters_are_exported_both_ways() {
    let (pa, pb) = (free_port(), free_port());
    let gateway = |me: &str, port: u16| {
        format!(
            "gateway {{ name: {me}, listen: \"127.0.0.1:{port}\", gateways: [ {{ name: A, url: \"nats://127.0.0.1:{pa}\" }}, {{ name: B, url: \"nats://127.0.0.1:{pb}\" }} ] }}"
        )
    };
    let a = NatsServer::builder()
        .name("a0")
        .config(&gateway("A", pa))
        .start();
    let b = NatsServer::builder()
        .name("b0")
        .config(&gateway("B", pb))
        .start();
    let exporter = common::exporter(&[a.monitor_url(), b.monitor_url()], LINKS);
    for (me, remote) in [(&a, "B"), (&b, "A")] {
        // One connection out to the other cluster, one in from its server.
        let (server_view, text) = settled(
            &exporter,
            Some(2),
            || gateways_of(me),
            |view, text| exported_gateways(text, &me.name) == *view,
        )
        .await;
        assert_eq!(exported_gateways(&text, &me.name), server_view, "{text}");
        let kinds: Vec<_> = server_view
            .iter()
            .map(|(g, d, _, p)| (g.as_str(), d.as_str(), *p))
            .collect();
        assert_eq!(kinds, [(remote, "inbound", 0), (remote, "outbound", 0)]);
        assert_eq!(
            samples(
                &text,
                "nats_delivery_gateway_pending_ratio",
                &[("server", &me.name)]
            )
            .iter()
            .map(|(_, v)| *v)
            .collect::<Vec<_>>(),
            [0.0, 0.0]
        );
        nats_test_server::reference::assert_documented(&text);
    }
}

/// Sets every `pending_size` (routes) or `connection.pending_bytes`
/// (gateways) in a real reply, in order, to 1000, 2000, ...
fn with_pending(mut reply: Value) -> Value {
    let mut n = 0;
    let mut next = || {
        n += 1000;
        Value::from(n)
    };
    if let Some(routes) = reply["routes"].as_array_mut() {
        for r in routes {
            r["pending_size"] = next();
        }
    }
    if let Some(out) = reply["outbound_gateways"].as_object_mut() {
        for g in out.values_mut() {
            g["connection"]["pending_bytes"] = next();
        }
    }
    if let Some(inbound) = reply["inbound_gateways"].as_object_mut() {
        for list in inbound.values_mut() {
            for g in list.as_array_mut().unwrap() {
                g["connection"]["pending_bytes"] = next();
            }
        }
    }
    reply
}

/// Serves a server named `name` of `version` with `max_pending` 4000 and
/// these /routez and /gatewayz replies.
async fn serve(
    name: &str,
    version: &str,
    routez: &Value,
    gatewayz: &Value,
) -> fake_endpoint::FakeEndpoint {
    let varz = json!({"server_name": name, "version": version, "max_pending": 4000}).to_string();
    let (r, g) = (routez.to_string(), gatewayz.to_string());
    fake_endpoint::start(move |path| {
        let body = match path.split('?').next().unwrap() {
            "/varz" => varz.clone(),
            "/routez" => r.clone(),
            _ => g.clone(),
        };
        Reply::Fixed("200 OK", body)
    })
    .await
}

#[tokio::test]
async fn pending_bytes_of_real_replies_are_exported_exactly_with_their_ratio() {
    let nodes = nats_test_server::cluster(2, "");
    Wait::secs("a route to come up", 20)
        .every(Duration::from_millis(100))
        .until_blocking(|| !routes_of(&nodes[0]).is_empty());
    let routez = with_pending(json(&nodes[0], "routez"));
    let gatewayz = with_pending(json!({
        "outbound_gateways": {"B": {"configured": true, "connection": {"cid": 7, "pending_bytes": 0}}},
        "inbound_gateways": {"B": [{"configured": false, "connection": {"cid": 9, "pending_bytes": 0}}]},
    }));
    let fake = serve("fake", "2.10.26", &routez, &gatewayz).await;
    let exporter = common::exporter(std::slice::from_ref(&fake.url), LINKS);
    let text = common::scrape(&exporter).await;
    let routes = routez["routes"].as_array().unwrap();
    for (i, r) in routes.iter().enumerate() {
        let rid = r["rid"].as_u64().unwrap().to_string();
        let at = |name| value(&text, name, &[("server", "fake"), ("rid", &rid)]);
        let pending = 1000.0 * (i + 1) as f64;
        assert_eq!(at("nats_delivery_route_pending_bytes"), Some(pending));
        assert_eq!(
            at("nats_delivery_route_pending_ratio"),
            Some(pending / 4000.0)
        );
    }
    assert_eq!(
        samples(&text, "nats_delivery_route_pending_bytes", &[]).len(),
        routes.len()
    );
    let gateway = |direction, cid| {
        let labels = [
            ("server", "fake"),
            ("gateway", "B"),
            ("direction", direction),
            ("cid", cid),
        ];
        (
            value(&text, "nats_delivery_gateway_pending_bytes", &labels),
            value(&text, "nats_delivery_gateway_pending_ratio", &labels),
        )
    };
    assert_eq!(gateway("outbound", "7"), (Some(1000.0), Some(0.25)));
    assert_eq!(gateway("inbound", "9"), (Some(2000.0), Some(0.5)));
    nats_test_server::reference::assert_documented(&text);

    // The same replies from a server before 2.10.26: its pending_size means
    // nothing, so its routes are left out; gateways stay.
    let old = serve("old", "2.10.25", &routez, &gatewayz).await;
    let exporter = common::exporter(std::slice::from_ref(&old.url), LINKS);
    let text = common::scrape(&exporter).await;
    assert_eq!(exported_routes(&text, "old"), BTreeSet::new(), "{text}");
    assert_eq!(exported_gateways(&text, "old").len(), 2, "{text}");
    let up = [("server", "old"), ("source", "routez")];
    assert_eq!(value(&text, "nats_delivery_up", &up), Some(1.0));
}

/// Why there is no leaf node source: `/leafz` reports no pending bytes on
/// either side. From 2.11.5 `/connz` lists leaf node connections (kind
/// `Leafnode`) with theirs, and so the connz source exports them among the
/// connections closest to max_pending; before, they are nowhere.
#[tokio::test]
async fn leaf_node_pending_bytes_are_only_in_connz_from_2_11_5() {
    let port = free_port();
    let hub = NatsServer::builder()
        .name("hub")
        .config(&format!("leafnodes {{ listen: \"127.0.0.1:{port}\" }}"))
        .start();
    let leaf = NatsServer::builder()
        .name("leaf")
        .config(&format!(
            "leafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\" }} ] }}"
        ))
        .start();
    let version = json(&hub, "varz")["version"].as_str().unwrap().to_string();
    let in_connz = nats_test_server::version_numbers(&version) >= vec![2, 11, 5];
    let urls = [hub.monitor_url(), leaf.monitor_url()];
    let exporter = common::exporter(&urls, &["--sources", "varz,connz"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    for server in [&hub, &leaf] {
        let leafs = Wait::before(format!("{}: a leaf node", server.name), deadline)
            .every(Duration::from_millis(100))
            .until_blocking(|| {
                let leafs = json(server, "leafz")["leafs"].as_array().cloned();
                leafs.filter(|l| !l.is_empty())
            });
        assert_eq!(leafs.len(), 1);
        let keys: Vec<&String> = leafs[0].as_object().unwrap().keys().collect();
        assert!(keys.iter().all(|k| !k.contains("pending")), "{keys:?}");
        assert!(keys.iter().any(|k| *k == "out_bytes"), "{keys:?}");
        let connz = json(server, "connz");
        let text = common::scrape(&exporter).await;
        let exported = samples(
            &text,
            "nats_delivery_connection_pending_bytes",
            &[("server", &server.name)],
        );
        if !in_connz {
            assert_eq!(connz["connections"], json!([]), "{connz}");
            assert_eq!(exported, vec![], "{version}");
            continue;
        }
        let conns = connz["connections"].as_array().unwrap();
        assert_eq!(conns.len(), 1, "{connz}");
        assert_eq!(conns[0]["kind"], "Leafnode");
        // The hub sees the leaf's server name; the leaf's side has none.
        let name = conns[0]["name"].as_str().unwrap_or_default();
        let cid = conns[0]["cid"].as_u64().unwrap().to_string();
        let pending = conns[0]["pending_bytes"].as_f64().unwrap();
        let mut labels = vec![("server", server.name.as_str()), ("cid", cid.as_str())];
        // (The sample reader cannot match an empty label value.)
        if !name.is_empty() {
            labels.push(("client_name", name));
        }
        assert_eq!(exported.len(), 1, "{text}");
        assert_eq!(
            value(&text, "nats_delivery_connection_pending_bytes", &labels),
            Some(pending),
            "{text}"
        );
    }
}
