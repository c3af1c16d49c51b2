//! The ways `Fetcher` can read a `/jsz` reply, on one synthetic body served
//! from this process: gathered whole then parsed from the slice, parsed as
//! it arrives by serde_json's `from_reader` (`get_streamed`),
//! or as it arrives in pieces, one stream at a time (`get_streamed` with
//! `jsz::split::parse`, what the exporter does). All include the loopback
//! transfer, the same for each. Then a reply already held whole (as a NATS
//! reply is): cut in pieces, or parsed in one pass (`split::parse_whole`,
//! what the exporter does with it).
//!
//! `cargo bench --bench jsz_fetch`; `BENCH_CONSUMERS` (default 100,000, in
//! streams of 100, indented as nats-server writes /jsz over HTTP: about
//! 190 MB) and `BENCH_ROUNDS` (default 5); `BENCH_JSZ_FILE` reads the body
//! from a file instead (a real server's reply).

use std::time::{Duration, Instant};

use nats_delivery_exporter::{
    parse_jsz_split, parse_jsz_whole, Fetcher, Jsz, KeptBudget, ParseError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A reply shaped like nats-server's (one consumer as 2.15.1 writes it).
fn jsz_body(consumers: usize) -> String {
    let consumer = |s: usize, c: usize| {
        format!(
            r#"{{"stream_name":"S{s}","name":"C{c}","created":"2026-11-29T22:24:59.171894042Z","config":{{"durable_name":"C{c}","name":"C{c}","deliver_policy":"all","ack_policy":"explicit","ack_wait":30000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,"max_ack_pending":1000,"num_replicas":0,"metadata":{{"_nats.req.level":"0"}}}},"delivered":{{"consumer_seq":0,"stream_seq":0}},"ack_floor":{{"consumer_seq":0,"stream_seq":0}},"num_ack_pending":0,"num_redelivered":0,"num_waiting":0,"num_pending":1,"ts":"2026-11-29T22:25:00.678952242Z"}}"#
        )
    };
    let streams: Vec<String> = (0..consumers.div_ceil(100))
        .map(|s| {
            let cs: Vec<String> = (0..100).map(|c| consumer(s, c)).collect();
            format!(
                r#"{{"name":"S{s}","created":"2026-11-29T22:24:59.1Z","config":{{"name":"S{s}","subjects":["s{s}.>"],"retention":"limits","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"storage":"memory"}},"state":{{"messages":1,"bytes":37,"first_seq":1,"last_seq":1,"consumer_count":100}},"consumer_detail":[{}]}}"#,
                cs.join(",")
            )
        })
        .collect();
    format!(
        r#"{{"server_id":"N","now":"2026-11-29T22:25:00.678924Z","total":1,"account_details":[{{"name":"$G","id":"$G","stream_detail":[{}]}}]}}"#,
        streams.join(",")
    )
}

/// Serves `body` to every request, with its length, until the process ends.
async fn serve(body: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jsz", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    if s.write_all(reply.as_bytes()).await.is_err()
                        || s.write_all(body).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// The consumers a reply holds.
fn consumers_in(jsz: &[u8]) -> usize {
    let key = b"\"num_ack_pending\"";
    jsz.windows(key.len()).filter(|w| w == key).count()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The body to serve: the file `BENCH_JSZ_FILE`, or a synthetic reply of
/// `consumers` consumers indented as nats-server indents its replies over
/// HTTP (two spaces: more than half of the bytes are whitespace).
fn reply_body(consumers: usize) -> &'static [u8] {
    let body = match std::env::var("BENCH_JSZ_FILE") {
        Ok(path) => std::fs::read_to_string(path).expect("BENCH_JSZ_FILE"),
        Err(_) => {
            let compact = jsz_body(consumers);
            let value: serde_json::Value = serde_json::from_str(&compact).unwrap();
            serde_json::to_string_pretty(&value).unwrap()
        }
    };
    body.leak().as_bytes()
}

/// The consumers a parsed reply holds.
fn consumers_parsed(jsz: &Jsz) -> usize {
    jsz.account_details[0]
        .stream_detail
        .iter()
        .map(|s| s.consumer_detail.len())
        .sum()
}

/// Fetches and parses `url` one of the three ways: 0 gathered whole then
/// parsed from the slice, 1 `from_reader`, 2 `split::parse`.
async fn fetch_one_way(fetch: &Fetcher, url: &url::Url, way: usize) -> Jsz {
    let kept = KeptBudget::unlimited();
    match way {
        0 => fetch
            .get_streamed(url.clone(), &kept, |body| {
                let mut whole = Vec::new();
                body.read_to_end(&mut whole).map_err(ParseError::io)?;
                serde_json::from_slice(&whole).map_err(ParseError::json)
            })
            .await
            .unwrap(),
        1 => fetch
            .get_streamed(url.clone(), &kept, |body| {
                serde_json::from_reader(body).map_err(ParseError::json)
            })
            .await
            .unwrap(),
        _ => fetch
            .get_streamed(url.clone(), &kept, parse_jsz_split)
            .await
            .unwrap(),
    }
}

/// Each way's times over HTTP, `rounds` each, a different way first each
/// round; every reply must hold `consumers`.
async fn fetched_over_http(url: &url::Url, rounds: usize, consumers: usize) -> [Vec<f64>; 3] {
    let fetch = Fetcher::new(
        reqwest::Client::builder(),
        Duration::from_secs(120),
        1 << 30,
    )
    .unwrap();
    let mut took_by_way = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..rounds {
        for way in 0..3 {
            let which = (way + round) % 3;
            let start = Instant::now();
            let jsz = fetch_one_way(&fetch, url, which).await;
            let took = start.elapsed().as_secs_f64();
            assert_eq!(consumers_parsed(&jsz), consumers);
            took_by_way[which].push(took);
        }
    }
    took_by_way
}

/// A NATS reply (system-account polling) arrives whole: the times to parse
/// it from the slice in pieces, as over HTTP, and in one pass.
fn parsed_held_whole(body: &'static [u8], rounds: usize, consumers: usize) -> [Vec<f64>; 2] {
    let mut held = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for way in 0..2 {
            let which = (way + round) % 2;
            let start = Instant::now();
            let jsz = match which {
                0 => parse_jsz_split(&mut &body[..]),
                _ => parse_jsz_whole(body),
            };
            held[which].push(start.elapsed().as_secs_f64());
            assert_eq!(consumers_parsed(&jsz.unwrap()), consumers);
        }
    }
    held
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let consumers = env_or("BENCH_CONSUMERS", 100_000);
    let rounds = env_or("BENCH_ROUNDS", 5);
    let body = reply_body(consumers);
    let consumers = consumers_in(body);
    let url: url::Url = serve(body).await.parse().unwrap();
    let [g, s, p] = fetched_over_http(&url, rounds, consumers).await.map(median);
    println!(
        "/jsz of {consumers} consumers, {:.1} MB, median of {rounds}",
        body.len() as f64 / 1e6
    );
    println!("gathered whole, from_slice          {g:.3} s");
    println!(
        "get_streamed (from_reader)          {s:.3} s  ({:.2}x)",
        s / g
    );
    println!(
        "get_streamed (split::parse)         {p:.3} s  ({:.2}x)",
        p / g
    );
    let [pieces, whole] = parsed_held_whole(body, rounds, consumers).map(median);
    println!("held whole, split::parse            {pieces:.3} s");
    println!(
        "held whole, split::parse_whole      {whole:.3} s  ({:.2}x)",
        whole / pieces
    );
}
