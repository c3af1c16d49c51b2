//! The name filters of `/jsz`: applied as each page is parsed, so a name
//! left out costs no series and no memory further down.

use super::patterns::NameFilter;
use super::AccountDetail;

/// Which accounts, streams and consumers of a `/jsz` reply are exported.
#[derive(Debug, Clone, Default)]
pub struct JszFilter {
    /// Accounts, by name or by id (an account's public key in operator mode).
    pub(crate) accounts: NameFilter,
    /// Streams, by name.
    pub(crate) streams: NameFilter,
    /// Consumers, by name.
    pub(crate) consumers: NameFilter,
}

impl JszFilter {
    /// The one account to ask the server for (`acc=`), when the flags name
    /// exactly one; `None` asks for all.
    pub(crate) fn server_account(&self) -> Option<&str> {
        self.accounts.only()
    }

    /// Drops from `accounts` whatever the filters leave out. An account's
    /// streams are kept (with their series) when the consumer filter leaves
    /// none of their consumers.
    pub(crate) fn apply(&self, accounts: &mut Vec<AccountDetail>) {
        if self.accounts.keeps_all() && self.streams.keeps_all() && self.consumers.keeps_all() {
            return;
        }
        accounts.retain(|a| self.accounts.keeps_any(&[&a.name, &a.id]));
        for account in accounts {
            account
                .stream_detail
                .retain(|s| self.streams.keeps(&s.name));
            for stream in &mut account.stream_detail {
                stream
                    .consumer_detail
                    .retain(|c| self.consumers.keeps(&c.name));
            }
        }
    }
}
