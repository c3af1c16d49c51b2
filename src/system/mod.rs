//! The system account: surveys of every server, requests to one server's
//! monitoring subjects, and the server events it publishes.

pub(crate) mod api_limit;
pub(crate) mod events;
pub(crate) mod poll;
pub(crate) mod survey;
