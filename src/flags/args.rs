//! Parsing a group of flags on its own: a leaf module, so that the modules
//! defining flag groups need not import the configuration that gathers them.

/// Parses one group of flags (such as the NATS connection flags)
/// from flag-style arguments without the program name; for tests and
/// embedding. Environment variables apply.
pub(crate) fn parse_args<A, I, T>(flags: I) -> Result<A, clap::Error>
where
    A: clap::Args + clap::FromArgMatches,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let command = A::augment_args(clap::Command::new("nats-delivery-exporter"));
    let args = std::iter::once(std::ffi::OsString::from("nats-delivery-exporter"))
        .chain(flags.into_iter().map(Into::into));
    A::from_arg_matches(&command.try_get_matches_from(args)?)
}
