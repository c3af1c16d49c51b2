//! The system account: surveys of every server, requests to one server's
//! monitoring subjects, and the server events it publishes.

pub mod events;
pub mod poll;
pub mod survey;
