//! Unit tests of what is kept between configuration reads.
use super::*;
use crate::sources::jsz::config_learned::{learned, LearnedAccounts};
use crate::sources::jsz::{Jsz, JszFilter};

/// A poll of stream S with consumers `names` (`max_ack_pending` 5 each
/// when `config`), each at delivered stream sequence `delivered`.
fn poll(names: &[&str], config: bool, delivered: u64) -> JszPoll {
    let consumers: Vec<String> = names
        .iter()
        .map(|n| {
            let config = if config {
                r#","config":{"durable_name":"d","max_ack_pending":5}"#
            } else {
                ""
            };
            format!(
                r#"{{"name":"{n}","created":"t"{config},"delivered":{{"stream_seq":{delivered}}}}}"#
            )
        })
        .collect();
    let stream_config = if config {
        r#""config":{"name":"S"},"#
    } else {
        ""
    };
    let json = format!(
        r#"{{"account_details":[{{"name":"A","stream_detail":[{{"name":"S","created":"t",
        {stream_config}"state":{{"last_seq":9}},"consumer_detail":[{}]}}]}}]}}"#,
        consumers.join(",")
    );
    let jsz: Jsz = serde_json::from_str(&json).unwrap();
    JszPoll {
        accounts: jsz.account_details,
        ..JszPoll::default()
    }
}

fn consumers(polled: &JszPoll) -> Vec<(Option<i64>, bool)> {
    let s = &polled.accounts[0].stream_detail[0];
    let of = |c: &ConsumerInfo| {
        (
            c.config.as_ref().and_then(|k| k.max_ack_pending),
            c.reconfigured,
        )
    };
    s.consumer_detail.iter().map(of).collect()
}

/// Any change of the delivered sequence could count a removal.
fn moved(before: (StreamAt, ConsumerAt), now: (StreamAt, ConsumerAt), _: CountingKind) -> bool {
    before.1.delivered != now.1.delivered
}

#[test]
fn a_poll_without_configuration_is_filled_and_what_is_kept_stays() {
    let mut memory = Memory::default();
    memory.remember(&mut poll(&["a", "b"], true, 1), true);
    let kept = memory.kept_bytes();
    // "a" known, "c" new: the new one has no configuration and starts
    // its count again.
    let mut later = poll(&["a", "c"], false, 1);
    memory.fill(&mut later, Some(moved));
    assert_eq!(consumers(&later), [(Some(5), false), (None, true)]);
    // "a" moved since the read: its count could grow, so it starts
    // again; the figures kept stay those of the read.
    let mut moved_on = poll(&["a"], false, 2);
    memory.fill(&mut moved_on, Some(moved));
    assert_eq!(consumers(&moved_on), [(Some(5), true)]);
    let mut again = poll(&["a"], false, 2);
    memory.fill(&mut again, Some(moved));
    assert_eq!(consumers(&again), [(Some(5), true)]);
    assert_eq!(memory.kept_bytes(), kept);
    assert!(memory.read_before());
    assert!(!Memory::default().read_before());
}

#[test]
fn what_a_read_beside_the_polls_learned_is_taken_in() {
    let mut memory = Memory::default();
    memory.remember(&mut poll(&["a"], true, 1), true);
    // "c" is new: unknown, kept without configuration, its count
    // starts again, and its account is stale until read.
    let mut plain = poll(&["a", "c"], false, 1);
    memory.remember(&mut plain, false);
    assert_eq!(consumers(&plain), [(Some(5), false), (None, true)]);
    let stale = memory.stale_accounts(&poll(&["a", "c"], false, 1), Some(moved));
    assert_eq!(stale.unknown, BTreeSet::from(["A".to_string()]));
    assert!(stale.counting.is_empty());
    // Read beside the polls, then taken in: "c" has its configuration,
    // and the figures kept stay the last poll's.
    // "d" was made after the poll that started the read: left unknown.
    memory.absorb(learn(&["a", "c", "d"]), None, Unseen::Skipped);
    let mut later = poll(&["a", "c"], false, 1);
    memory.remember(&mut later, false);
    assert_eq!(consumers(&later), [(Some(5), false), (Some(5), false)]);
    let stale = memory.stale_accounts(&poll(&["a", "c"], false, 1), Some(moved));
    assert!(stale.unknown.is_empty() && stale.counting.is_empty());
    assert_eq!(memory.configs.len(), 1, "one configuration, shared");
    let stale = memory.stale_accounts(&poll(&["a", "c", "d"], false, 1), Some(moved));
    assert_eq!(stale.unknown, BTreeSet::from(["A".to_string()]));
    // On the scrape path the poll about to be kept has it: kept.
    memory.absorb(learn(&["d"]), None, Unseen::Kept);
    let mut with_d = poll(&["a", "c", "d"], false, 1);
    memory.remember(&mut with_d, false);
    assert_eq!(consumers(&with_d)[2], (Some(5), false));
}

/// What a read learns of stream S with consumers `names`, with their
/// configuration.
fn learn(names: &[&str]) -> LearnedAccounts {
    let accounts = poll(names, true, 7).accounts.into_iter();
    let learned = accounts.map(|a| AccountDetail {
        name: a.name,
        stream_detail: (a.stream_detail.into_iter())
            .map(|s| learned(&JszFilter::default(), s))
            .collect(),
        ..AccountDetail::default()
    });
    learned.collect()
}
