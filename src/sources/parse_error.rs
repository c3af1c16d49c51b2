//! Why the parse of a reply failed, told by type: a charge that the
//! reply's memory budget (`--max-kept-size`, see `kept`) refused, or a reply
//! that is not what the endpoint sends.

use std::cell::Cell;

use crate::poll_error::PollError;

/// Said by the error of every reply stopped by a refused charge.
pub(crate) const REFUSED: &str = "the server's replies keep more than --max-kept-size";

/// A charge a `kept::KeptBudget` refused: the reply that asked stops with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{REFUSED} ({limit} bytes)")]
pub struct Refused {
    /// The budget's limit in bytes.
    pub(crate) limit: usize,
}

/// Why the parse of a reply failed: a refused charge, told by its type
/// wherever it happened (a reader, a deserializer, the `/jsz` cut), or a
/// reply that is not what the endpoint sends (the text of a reply is never
/// part of an error).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// A charge was refused: the poll fails as `PollError::TooMuchKept`.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// Anything else: the poll fails as `PollError::Parse`.
    #[error("{0}")]
    Invalid(String),
}

impl ParseError {
    /// A serde_json error: a refusal when the reader under it (a
    /// `kept::ChargedReader`), or a deserializer on this thread
    /// (`refused_in_deserializer`), refused.
    pub fn json(e: serde_json::Error) -> ParseError {
        let noted = NOTED_REFUSAL.with(Cell::take);
        if e.is_io() {
            return ParseError::io(e.into());
        }
        match noted {
            Some(refused) => ParseError::Refused(refused),
            None => ParseError::Invalid(e.to_string()),
        }
    }

    /// An I/O error of a reader: a refusal when a `kept::ChargedReader`
    /// refused.
    pub fn io(e: std::io::Error) -> ParseError {
        match e.get_ref().and_then(|e| e.downcast_ref::<Refused>()) {
            Some(refused) => ParseError::Refused(*refused),
            None => ParseError::Invalid(e.to_string()),
        }
    }

    /// The same error, its text (not a refusal) after `context: `.
    pub(crate) fn within(self, context: &str) -> ParseError {
        match self {
            ParseError::Invalid(e) => ParseError::Invalid(format!("{context}: {e}")),
            refused => refused,
        }
    }
}

impl From<String> for ParseError {
    fn from(e: String) -> ParseError {
        ParseError::Invalid(e)
    }
}

impl From<&str> for ParseError {
    fn from(e: &str) -> ParseError {
        ParseError::Invalid(e.to_string())
    }
}

impl From<ParseError> for PollError {
    fn from(e: ParseError) -> PollError {
        match e {
            ParseError::Refused(refused) => PollError::TooMuchKept(refused.limit),
            ParseError::Invalid(e) => PollError::Parse(e),
        }
    }
}

/// The result of a parse run off the async runtime, as a poll's: the one
/// place a refused charge becomes `PollError::TooMuchKept`.
pub(crate) fn parsed<T>(
    joined: Result<Result<T, ParseError>, tokio::task::JoinError>,
) -> Result<T, PollError> {
    match joined {
        Ok(parsed) => parsed.map_err(PollError::from),
        Err(e) => Err(PollError::Parse(format!("parser stopped: {e}"))),
    }
}

/// The error a deserializer returns for a refused charge. serde keeps only
/// an error's text, so the refusal is also noted for [`ParseError::json`]
/// on this thread, which the failed parse reaches next.
pub(crate) fn refused_in_deserializer<E: serde::de::Error>(refused: Refused) -> E {
    NOTED_REFUSAL.with(|noted| noted.set(Some(refused)));
    E::custom(refused)
}

thread_local! {
    /// A refusal a deserializer met on this thread (see
    /// [`refused_in_deserializer`]), until [`ParseError::json`] takes it.
    static NOTED_REFUSAL: Cell<Option<Refused>> = const { Cell::new(None) };
}

/// Forgets a refusal noted on this thread and never taken: each reply's
/// parse starts without one.
pub(crate) fn forget_noted_refusal() {
    NOTED_REFUSAL.with(|noted| noted.set(None));
}
