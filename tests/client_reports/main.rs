//! Reports of applications using `nats-delivery-metrics`, re-exported by
//! the exporter: bounds, overflow, the listener.
use nats_test_server::app as common;
mod client_report_bounds;
mod client_report_forgery;
mod client_report_listener;
mod client_report_overflow;
mod client_reports;
mod client_reports_support;
mod other_language_builds;
mod other_language_reporters;
