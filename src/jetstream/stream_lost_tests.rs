//! Unit tests of the lost-data reader: the reply parse and the counting of lost sequences.
use super::*;

#[test]
fn lost_data_is_read_from_the_full_state() {
    let reply = br#"{"created":"2026-01-01T00:00:00Z","state":{"messages":5,"first_seq":2,"deleted":[2,3],"lost":{"msgs":[9,7,8,7],"bytes":300}}}"#;
    assert_eq!(
        parse_info(reply),
        Ok(LostRecord {
            sequences: vec![7, 8, 9],
            bytes: 300,
            first_seq: 2,
            created: "2026-01-01T00:00:00Z".into(),
        })
    );
    assert_eq!(
        parse_info(br#"{"state":{"messages":5}}"#),
        Ok(LostRecord::default())
    );
    assert!(parse_info(br#"{"error":{"code":404,"description":"stream not found"}}"#).is_err());
    assert!(parse_info(b"{}").is_err());
    assert!(parse_info(b"garbage").is_err());
}

fn record(sequences: &[u64], bytes: u64, first_seq: u64, created: &str) -> LostRecord {
    LostRecord {
        sequences: sequences.to_vec(),
        bytes,
        first_seq,
        created: created.into(),
    }
}

#[test]
fn each_lost_sequence_is_counted_once() {
    let mut f = Found::default();
    f.absorb(&record(&[5, 6, 7], 300, 1, "a"));
    assert_eq!(f.counted(), (3, 300));
    // Read again: nothing new.
    f.absorb(&record(&[5, 6, 7], 300, 1, "a"));
    assert_eq!(f.counted(), (3, 300));
    // The record grew: the new bytes are the difference.
    f.absorb(&record(&[5, 6, 7, 20, 21], 520, 1, "a"));
    assert_eq!(f.counted(), (5, 520));
    // The server restarted (its record is empty), then the same
    // sequences are reported again: not counted again.
    f.absorb(&record(&[], 0, 1, "a"));
    assert_eq!(f.counted(), (5, 520));
    f.absorb(&record(&[5, 6, 7], 300, 1, "a"));
    assert_eq!(f.counted(), (5, 520));
    // Only new ones: all their bytes.
    f.absorb(&record(&[40, 41], 90, 1, "a"));
    assert_eq!(f.counted(), (7, 610));
    // Old ones left and a new one came since the last read: its bytes
    // are the record's shared out over its sequences.
    f.absorb(&record(&[41, 50], 100, 1, "a"));
    assert_eq!(f.counted(), (8, 660));
    // Sequences below the stream's first are forgotten, then a stream
    // made again under the name counts its own sequences from the start.
    f.absorb(&record(&[], 0, 45, "a"));
    assert!(!f.seen.contains(41) && f.seen.contains(50));
    f.absorb(&record(&[5, 6], 70, 1, "b"));
    assert_eq!(f.counted(), (10, 730));
}

#[test]
fn past_the_range_limit_nothing_is_counted_twice() {
    let mut f = Found::default();
    // Every other sequence: one range each, more than are kept.
    let lost: Vec<u64> = (0..FOUND_RANGES as u64 + 10).map(|i| 2 * i + 1).collect();
    let r = record(&lost, lost.len() as u64, 1, "a");
    f.absorb(&r);
    assert_eq!(f.counted().0, lost.len() as u64);
    f.absorb(&r);
    assert_eq!(f.counted().0, lost.len() as u64);
    assert!(f.seen.ranges() <= FOUND_RANGES);
}

/// Totals past `u64::MAX` (a hostile reply's bytes, sequences at the top
/// of the range) are held there, never wrapped.
#[test]
fn extreme_records_are_held_at_the_maximum() {
    let max = u64::MAX;
    let mut f = Found::default();
    f.absorb(&record(&[max - 1], max, max, "a"));
    f.absorb(&record(&[max - 1, max], max, max, "a"));
    f.absorb(&record(&[7], max, 1, "a"));
    assert_eq!(f.counted(), (3, max));
}

#[tokio::test]
async fn a_connection_that_is_down_is_not_asked_and_holds_no_scrape() {
    let reader = StreamLostReader::new(crate::nats::never_connected().await, 10);
    // A request queued for a later connection would wait out the hour.
    let asked = reader.read(&["S1", "S2"], std::time::Duration::from_secs(3600));
    let answered = tokio::time::timeout(std::time::Duration::from_secs(120), asked).await;
    assert!(answered.expect("returned at once").is_empty());
    assert_eq!(
        reader.state.lock_or_recover().results,
        [0, 0, 0],
        "nothing asked"
    );
}
