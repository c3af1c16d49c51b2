//! The forecast of what an origin removes before its mirror or source
//! copies it: the consumers' arithmetic with the copying stream's position,
//! and only where one poll shows the origin beside it.

use super::*;
use crate::sources::jsz::{select_leaders, Jsz};

/// A stream entry: `name`, its `config` and `state` JSON, and `more`
/// (a mirror or sources).
fn stream(name: &str, config: &str, state: &str, more: &str) -> String {
    format!(r#"{{"name":"{name}","config":{config},"state":{state}{more}}}"#)
}

/// A poll of account `A` holding `streams`, at server time `now`.
fn poll(streams: &[String], now: &str) -> JszPoll {
    let json = format!(
        r#"{{"now":"{now}","account_details":[{{"name":"A","stream_detail":[{}]}}]}}"#,
        streams.join(",")
    );
    let jsz: Jsz = serde_json::from_str(&json).unwrap();
    JszPoll {
        now: crate::sources::unix_seconds(now),
        accounts: jsz.account_details,
        ..Default::default()
    }
}

/// Origin `name`'s entry with `config`, holding `first..=last`.
fn origin(name: &str, config: &str, (first, last): (u64, u64), times: (&str, &str)) -> String {
    let state = format!(
        r#"{{"messages":{},"bytes":{},"first_seq":{first},"first_ts":"{}","last_seq":{last},"last_ts":"{}"}}"#,
        last - first + 1,
        100 * (last - first + 1),
        times.0,
        times.1
    );
    stream(name, config, &state, "")
}

/// A copying stream `name` at origin sequence 5 (`more` says how).
fn copying(name: &str, more: &str) -> String {
    stream(name, "{}", r#"{"first_seq":1,"last_seq":5}"#, more)
}

/// The forecasts of one poll, by copying stream.
fn forecasts(f: &mut OriginForecasts, p: &JszPoll, now: f64) -> Vec<(String, f64)> {
    let polls = [Some(p)];
    let leaders = select_leaders(&[Some((None, p))], &[]);
    let (streams, _) = leaders.rows(&polls, &Default::default());
    let rows = f.poll(&streams, &polls, (now, 2.0));
    rows.into_iter().map(|(k, v)| (k.1, v)).collect()
}

const BY_MSGS: &str = r#"{"max_msgs":100}"#;
const T: (&str, &str) = ("2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z");

#[test]
fn a_mirror_or_source_that_falls_behind_is_forecast_as_a_consumer_would_be() {
    let mut f = OriginForecasts::default();
    let copies = [
        copying("M", r#","mirror":{"name":"O"}"#),
        copying("S", r#","sources":[{"name":"O","seq":5}]"#),
        // Not forecast: another account's origin, a filter, an origin
        // this poll does not hold, a source whose server gives no `seq`.
        copying(
            "X",
            r#","sources":[{"name":"O","external":{"api":"$JS.B.API"}}]"#,
        ),
        copying(
            "F",
            r#","sources":[{"name":"O","seq":5,"filter_subject":"o.a"}]"#,
        ),
        copying("G", r#","mirror":{"name":"ELSEWHERE"}"#),
        copying("V", r#","sources":[{"name":"O"}]"#),
    ];
    let at = |last: u64| {
        let mut all = copies.to_vec();
        all.push(origin("O", BY_MSGS, (1, last), T));
        poll(&all, T.1)
    };
    // The first poll anchors the rate: nothing to forecast by count yet.
    assert_eq!(forecasts(&mut f, &at(20), 100.0), []);
    // 20 more in 2 s, still at 5: 10 a second behind; 60 of room and 6
    // messages up to the 6th.
    let got = forecasts(&mut f, &at(40), 102.0);
    assert_eq!(got, [("M".into(), 6.6), ("S".into(), 6.6)]);
}

#[test]
fn max_age_takes_the_age_of_the_next_message_to_copy_from_the_origins_times() {
    let mut f = OriginForecasts::default();
    let age = r#"{"max_age":10000000000}"#;
    // 1 to 21 stored over 2 s; the 6th at 0.5 s, 2.5 s old at 3 s.
    let times = ("2026-01-01T00:00:00Z", "2026-01-01T00:00:02Z");
    let p = poll(
        &[
            copying("M", r#","mirror":{"name":"O"}"#),
            origin("O", age, (1, 21), times),
        ],
        "2026-01-01T00:00:03Z",
    );
    assert_eq!(forecasts(&mut f, &p, 100.0), [("M".into(), 7.5)]);
}

#[test]
fn a_mirror_that_keeps_up_or_lost_already_reads_absent_or_zero() {
    let mut f = OriginForecasts::default();
    let mirror = r#","mirror":{"name":"O"}"#;
    let up = stream("M", "{}", r#"{"first_seq":1,"last_seq":20}"#, mirror);
    let p = poll(&[up, origin("O", BY_MSGS, (1, 20), T)], T.1);
    assert_eq!(forecasts(&mut f, &p, 100.0), []);
    // The origin holds 8 on: the 6th is gone.
    let p = poll(
        &[copying("M", mirror), origin("O", BY_MSGS, (8, 20), T)],
        T.1,
    );
    assert_eq!(forecasts(&mut f, &p, 102.0), [("M".into(), 0.0)]);
}
