//! `/jsz` read page by page (`offset`, `limit`), each page parsed as it
//! arrives and handed to what keeps it: a poll ([`PolledAccounts`]), or
//! a read beside the scrapes that keeps only what it learns
//! ([`config_learned`](super::config_learned)).
//!
//! When the filter names one account exactly, the server is asked for that
//! account alone (`acc=`). The server looks it up by its own name (the
//! public key in operator mode), not by a name tag: when that finds
//! nothing, everything is read and filtered here.
//!
//! Servers from 2.10 on hand out the accounts ordered by name, so pages add
//! up to the whole. nats-server 2.9 pages over its accounts in no fixed
//! order: pages overlap and miss accounts. When the pages read are not in
//! one ascending order, everything is read again in one request.

use std::collections::HashSet;
use std::io::BufRead;

use super::de::Kept;
use super::{account_assets, split, AccountDetail, Jsz, JszFilter, JszPoll, StreamDetail};
use crate::poll_error::PollError;
use crate::sources::kept::KeptBudget;
use crate::sources::parse_error::ParseError;
use crate::sources::{unix_seconds, ServerLink, Source};

/// How a page's streams are parsed, and what is kept of each.
pub(super) trait StreamForm: Kept + Send + Sized + 'static {
    /// What the parse needs besides the bytes.
    type With: Clone + Send + 'static;

    /// Parses a reply read in pieces (over HTTP).
    fn parse(input: &mut dyn BufRead, with: &Self::With) -> Result<Jsz<Self>, ParseError>;

    /// Parses a reply held whole (a NATS reply).
    fn parse_whole(body: &[u8], with: &Self::With) -> Result<Jsz<Self>, ParseError>;
}

/// Every stream as parsed.
impl StreamForm for StreamDetail {
    type With = ();

    fn parse(input: &mut dyn BufRead, (): &()) -> Result<Jsz, ParseError> {
        split::parse(input)
    }

    fn parse_whole(body: &[u8], (): &()) -> Result<Jsz, ParseError> {
        split::parse_whole(body)
    }
}

/// What takes in the accounts of the pages read.
pub(super) trait PageSink<S> {
    /// Takes in a page's accounts not seen before; returns the bytes it
    /// keeps of them, to be charged.
    fn take(&mut self, accounts: Vec<AccountDetail<S>>) -> usize;

    /// Lets go of everything taken in (it is read again); returns the bytes
    /// that frees.
    fn forget(&mut self) -> usize;
}

/// A poll's accounts, with the streams and consumers each listed before
/// the name filters, and what the filters keep.
pub(super) struct PolledAccounts<'f> {
    pub(super) out: JszPoll,
    pub(super) filter: &'f JszFilter,
}

impl PageSink<StreamDetail> for PolledAccounts<'_> {
    fn take(&mut self, mut accounts: Vec<AccountDetail>) -> usize {
        let mut assets = account_assets::record(&accounts, self.filter);
        let asset_bytes: usize = assets.iter().map(|a| a.kept_bytes()).sum();
        self.out.account_assets.append(&mut assets);
        self.filter.apply(&mut accounts);
        let keeps = asset_bytes + accounts.iter().map(Kept::kept_bytes).sum::<usize>();
        self.out.accounts.append(&mut accounts);
        keeps
    }

    fn forget(&mut self) -> usize {
        let accounts = std::mem::take(&mut self.out.accounts);
        let assets = std::mem::take(&mut self.out.account_assets);
        let accounts: usize = accounts.iter().map(Kept::kept_bytes).sum();
        accounts + assets.iter().map(|a| a.kept_bytes()).sum::<usize>()
    }
}

/// Which pages to read: of one account (`acc=`) or all, their size, and
/// whether with the configuration.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pages<'a> {
    pub(super) account: Option<&'a str>,
    pub(super) size: u32,
    pub(super) config: bool,
}

/// Reads every page of accounts with streams, consumers and, if
/// `pages.config`, their configuration (`pages.account` is ignored: the
/// filter's one account is asked for alone); returns the server's clock.
pub(super) async fn read_all<S: StreamForm>(
    link: &ServerLink<'_>,
    pages: Pages<'_>,
    filter: &JszFilter,
    with: &S::With,
    sink: &mut (dyn PageSink<S> + Send),
) -> Result<Option<f64>, PollError> {
    if let Some(account) = filter.server_account() {
        let one = Pages {
            account: Some(account),
            ..pages
        };
        let read = read_pages(link, one, with, sink).await?;
        if read.accounts > 0 {
            return Ok(read.now);
        }
    }
    let every = Pages {
        account: None,
        ..pages
    };
    let read = read_pages(link, every, with, sink).await?;
    if read.in_order {
        return Ok(read.now);
    }
    // Read again: what the pages out of order keep is let go.
    link.kept().release(sink.forget());
    let whole = Pages {
        size: u32::MAX >> 1,
        ..every
    };
    Ok(read_pages(link, whole, with, sink).await?.now)
}

/// Reads the account the server names `pages.account`; returns the
/// server's clock.
pub(super) async fn read_account<S: StreamForm>(
    link: &ServerLink<'_>,
    pages: Pages<'_>,
    with: &S::With,
    sink: &mut (dyn PageSink<S> + Send),
) -> Result<Option<f64>, PollError> {
    Ok(read_pages(link, pages, with, sink).await?.now)
}

/// What [`read_pages`] read.
struct PagesRead {
    /// The server's clock at the first page.
    now: Option<f64>,
    /// Every account read (repeats included) came after the one before
    /// it, as in one ordered list (always so for one page).
    in_order: bool,
    /// Distinct accounts read.
    accounts: usize,
}

/// Reads pages of `pages.size` accounts until the last, handing the
/// distinct accounts to `sink`.
async fn read_pages<S: StreamForm>(
    link: &ServerLink<'_>,
    pages: Pages<'_>,
    with: &S::With,
    sink: &mut (dyn PageSink<S> + Send),
) -> Result<PagesRead, PollError> {
    let mut read = PagesRead {
        now: None,
        in_order: true,
        accounts: 0,
    };
    let mut seen = HashSet::new();
    let mut offset = 0usize;
    let mut count = 0;
    let mut last_id: Option<String> = None;
    loop {
        // Pages of large accounts are large: parsed as they arrive over
        // HTTP; a NATS reply arrives whole. A page charges a share of
        // the poll's budget as it is parsed; once it is taken in, the
        // poll's budget is charged with what is kept instead.
        let share = KeptBudget::share(link.kept());
        let (parse_with, whole_with) = (with.clone(), with.clone());
        let page = link
            .with_kept(&share)
            .get_streamed(
                Source::Jsz,
                &query(pages, offset),
                move |input| S::parse(input, &parse_with),
                move |body| S::parse_whole(body, &whole_with),
            )
            .await?;
        count += 1;
        if read.now.is_none() {
            read.now = unix_seconds(&page.now);
        }
        let len = page.account_details.len();
        let mut fresh = Vec::new();
        for a in page.account_details {
            let id = if a.id.is_empty() { &a.name } else { &a.id };
            if last_id.as_ref().is_some_and(|last| last >= id) {
                read.in_order = false;
            }
            last_id = Some(id.clone());
            if seen.insert(a.name.clone()) {
                fresh.push(a);
            }
        }
        let any_fresh = !fresh.is_empty();
        read.accounts += fresh.len();
        let keeps = sink.take(fresh);
        drop(share);
        if !link.kept().charge(keeps) {
            return Err(PollError::TooMuchKept(link.kept().limit()));
        }
        offset += len;
        // Stop at a short page, at the announced total, or when a server that
        // ignores paging hands back accounts already read.
        if page.disabled
            || len < pages.size as usize
            || !any_fresh
            || page.total.is_some_and(|t| offset >= t)
        {
            read.in_order |= count == 1;
            return Ok(read);
        }
    }
}

/// The request for the page at `offset`.
fn query(pages: Pages<'_>, offset: usize) -> Vec<(&'static str, String)> {
    let mut query = vec![
        ("accounts", "true".into()),
        ("streams", "true".into()),
        ("consumers", "true".into()),
        ("config", pages.config.to_string()),
        ("offset", offset.to_string()),
        ("limit", pages.size.to_string()),
    ];
    if let Some(account) = pages.account {
        query.push(("acc", account.to_string()));
    }
    query
}
