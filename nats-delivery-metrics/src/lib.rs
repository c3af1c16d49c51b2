//! Exact Prometheus counters for messages an async-nats client drops.
//!
//! Skeleton: the crate's API is being built (see the project README).
#![deny(missing_docs)]
