//! Which per-consumer series are written. Every series costs Prometheus
//! memory and disk for every consumer, so by default a consumer has only
//! the series that an alert, a dashboard panel or a runbook question needs
//! (at most 12); the others are written when asked for
//! (`--consumer-opt-in-metrics`), and the status as its full state set, a
//! series per status, with `--consumer-status-series all`.

/// How `nats_delivery_consumer_status` is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StatusSeries {
    /// One series per consumer: its current status, at 1 (as
    /// kube-state-metrics v2 writes a container's waiting reason).
    #[default]
    Current,
    /// One series per consumer and status: 1 for the current one, 0 for the
    /// six others.
    All,
}

/// A per-consumer family written only when asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OptIn {
    /// `nats_delivery_consumer_deliveries_total`.
    Deliveries,
    /// `nats_delivery_consumer_ack_wait_seconds`.
    AckWait,
    /// `nats_delivery_consumer_last_delivery_age_seconds`.
    LastDeliveryAge,
    /// `nats_delivery_consumer_last_ack_age_seconds`.
    LastAckAge,
    /// `nats_delivery_consumer_pause_remaining_seconds`.
    PauseRemaining,
    /// `nats_delivery_consumer_priority_group_pinned`.
    PriorityGroupPinned,
    /// `nats_delivery_consumer_delivery_lag_exact`.
    DeliveryLagExact,
    /// `nats_delivery_consumer_oldest_unacked_age_exact`.
    OldestUnackedAgeExact,
    /// `nats_delivery_consumer_max_deliver`.
    MaxDeliver,
    /// `nats_delivery_consumer_removed_before_delivery_exact`.
    RemovedBeforeDeliveryExact,
    /// `nats_delivery_consumer_ack_floor_stream_sequence`.
    AckFloorSequence,
}

impl OptIn {
    /// Every opt-in family.
    pub(crate) const ALL: [OptIn; 11] = [
        OptIn::Deliveries,
        OptIn::AckWait,
        OptIn::LastDeliveryAge,
        OptIn::LastAckAge,
        OptIn::PauseRemaining,
        OptIn::PriorityGroupPinned,
        OptIn::DeliveryLagExact,
        OptIn::OldestUnackedAgeExact,
        OptIn::MaxDeliver,
        OptIn::RemovedBeforeDeliveryExact,
        OptIn::AckFloorSequence,
    ];

    /// The family's name as queried (a counter's with `_total`).
    pub(crate) fn metric_name(self) -> &'static str {
        match self {
            OptIn::Deliveries => "nats_delivery_consumer_deliveries_total",
            OptIn::AckWait => "nats_delivery_consumer_ack_wait_seconds",
            OptIn::LastDeliveryAge => "nats_delivery_consumer_last_delivery_age_seconds",
            OptIn::LastAckAge => "nats_delivery_consumer_last_ack_age_seconds",
            OptIn::PauseRemaining => "nats_delivery_consumer_pause_remaining_seconds",
            OptIn::PriorityGroupPinned => "nats_delivery_consumer_priority_group_pinned",
            OptIn::DeliveryLagExact => "nats_delivery_consumer_delivery_lag_exact",
            OptIn::OldestUnackedAgeExact => "nats_delivery_consumer_oldest_unacked_age_exact",
            OptIn::MaxDeliver => "nats_delivery_consumer_max_deliver",
            OptIn::RemovedBeforeDeliveryExact => {
                "nats_delivery_consumer_removed_before_delivery_exact"
            }
            OptIn::AckFloorSequence => "nats_delivery_consumer_ack_floor_stream_sequence",
        }
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// One value of `--consumer-opt-in-metrics`: a family, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OptInChoice {
    /// This family.
    One(OptIn),
    /// Every opt-in family.
    All,
}

/// Parses a value of `--consumer-opt-in-metrics`: a family's name as
/// queried, or `all`.
pub(crate) fn parse_opt_in(text: &str) -> Result<OptInChoice, String> {
    let text = text.trim();
    if text == "all" {
        return Ok(OptInChoice::All);
    }
    OptIn::ALL
        .into_iter()
        .find(|o| o.metric_name() == text)
        .map(OptInChoice::One)
        .ok_or_else(|| {
            let names: Vec<&str> = OptIn::ALL.iter().map(|o| o.metric_name()).collect();
            format!(
                "'{text}' is not an opt-in consumer metric; give all, or any of {}",
                names.join(", ")
            )
        })
}

/// The per-consumer series a scrape writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerSeries {
    /// How the status is written.
    pub(crate) status: StatusSeries,
    opt_in: u16,
}

impl ConsumerSeries {
    /// The series of these flags.
    pub(crate) fn new(status: StatusSeries, opt_in: &[OptInChoice]) -> ConsumerSeries {
        let opt_in = opt_in.iter().fold(0, |bits, choice| match choice {
            OptInChoice::One(o) => bits | o.bit(),
            OptInChoice::All => OptIn::ALL.iter().fold(bits, |b, o| b | o.bit()),
        });
        ConsumerSeries { status, opt_in }
    }

    /// Every series: the whole status state set and every opt-in family.
    #[cfg(test)]
    pub(crate) fn all() -> ConsumerSeries {
        ConsumerSeries::new(StatusSeries::All, &[OptInChoice::All])
    }

    /// Whether `family` is written (a family that is not opt-in always is).
    pub(crate) fn writes(&self, family: Option<OptIn>) -> bool {
        family.is_none_or(|o| self.opt_in & o.bit() != 0)
    }

    /// Series of `nats_delivery_consumer_status` per consumer.
    pub(crate) fn status_series(&self) -> u64 {
        match self.status {
            StatusSeries::Current => 1,
            StatusSeries::All => crate::jetstream::consumer_status::Status::ALL.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opt_in_names_and_all() {
        assert_eq!(
            parse_opt_in("nats_delivery_consumer_ack_wait_seconds"),
            Ok(OptInChoice::One(OptIn::AckWait))
        );
        assert_eq!(parse_opt_in(" all "), Ok(OptInChoice::All));
        let e = parse_opt_in("nats_delivery_consumer_pending_messages").unwrap_err();
        assert!(e.contains("nats_delivery_consumer_deliveries_total"), "{e}");
        let default = ConsumerSeries::default();
        assert!(default.writes(None));
        assert!(OptIn::ALL.iter().all(|o| !default.writes(Some(*o))));
        assert_eq!(default.status_series(), 1);
        let some = ConsumerSeries::new(
            StatusSeries::Current,
            &[OptInChoice::One(OptIn::LastAckAge)],
        );
        assert!(some.writes(Some(OptIn::LastAckAge)) && !some.writes(Some(OptIn::AckWait)));
        let all = ConsumerSeries::all();
        assert!(OptIn::ALL.iter().all(|o| all.writes(Some(*o))));
        assert_eq!(all.status_series(), 7);
    }
}
