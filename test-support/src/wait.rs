//! The one way tests wait: poll a check until it is done or a deadline passes.
//!
//! ```ignore
//! use nats_test_server::wait::Wait;
//! let count = Wait::new("3 advisories", Duration::from_secs(20))
//!     .until(|| match read_count() {
//!         n if n == 3 => Ok(n),
//!         n => Err(n), // shown in the panic if the deadline passes
//!     })
//!     .await;
//! ```
//!
//! A check returns an [`Outcome`]: `true`, `Some(v)` or `Ok(v)` when done;
//! `false`, `None` or `Err(seen)` when not yet, where `seen` is what the check
//! read (it is in the message when the wait times out). The wait gives up
//! only after a check that began at or past the deadline: a check still
//! running when the deadline passes (one slow pull, one slow scrape) is
//! followed by one more, so a condition met just in time is not a failure.

use std::fmt::Debug;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The poll interval unless [`Wait::every`] sets another.
pub const DEFAULT_EVERY: Duration = Duration::from_millis(50);

/// What a check returns: done (with a value) or not yet (with what it saw,
/// formatted only if the wait times out).
pub trait Outcome {
    /// The value a finished wait returns.
    type Done;
    /// What a check that is not done saw.
    type Seen: Debug;
    /// `Ok` when done; `Err` with what was seen otherwise.
    fn outcome(self) -> Result<Self::Done, Self::Seen>;
}

impl Outcome for bool {
    type Done = ();
    type Seen = bool;
    fn outcome(self) -> Result<(), bool> {
        if self {
            Ok(())
        } else {
            Err(false)
        }
    }
}

impl<T> Outcome for Option<T> {
    type Done = T;
    type Seen = Text;
    fn outcome(self) -> Result<T, Text> {
        self.ok_or_else(|| Text("None".to_string()))
    }
}

impl<T, E: Debug> Outcome for Result<T, E> {
    type Done = T;
    type Seen = E;
    fn outcome(self) -> Result<T, E> {
        self
    }
}

/// Text shown as written (not escaped) when a wait times out: a log, an
/// exposition. `Err(Text(log))` from a check.
pub struct Text(pub String);

impl Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a check saw, described only if the wait times out: for a
/// description that costs a request (`Err(Later(|| format!(...)))`).
pub struct Later<F>(pub F);

impl<F: Fn() -> String> Debug for Later<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.0)())
    }
}

/// A wait: what is awaited, for how long at most, how often it is checked.
#[derive(Debug, Clone)]
pub struct Wait {
    what: String,
    within: Duration,
    every: Duration,
}

impl Wait {
    /// Waits for `what` (said in the timeout message) at most `within`,
    /// checking every [`DEFAULT_EVERY`].
    pub fn new(what: impl Into<String>, within: Duration) -> Wait {
        Wait {
            what: what.into(),
            within,
            every: DEFAULT_EVERY,
        }
    }

    /// Waits for `what` at most `secs` seconds, checking every [`DEFAULT_EVERY`].
    pub fn secs(what: impl Into<String>, secs: u64) -> Wait {
        Wait::new(what, Duration::from_secs(secs))
    }

    /// Waits for `what` until `deadline` at most: for waits one after another
    /// that share one bound.
    pub fn before(what: impl Into<String>, deadline: Instant) -> Wait {
        Wait::new(what, deadline.saturating_duration_since(Instant::now()))
    }

    /// Checks every `every` instead: longer for a costly check (a scrape).
    pub fn every(mut self, every: Duration) -> Wait {
        self.every = every;
        self
    }

    /// Polls `check` until it is done, sleeping with tokio between checks;
    /// panics with what was awaited and the last value seen at the deadline.
    pub async fn until<O: Outcome>(&self, mut check: impl FnMut() -> O) -> O::Done {
        let polled = self
            .between_tokio_sleeps(|| std::future::ready(check()))
            .await;
        polled.unwrap_or_else(|seen| self.give_up(&seen))
    }

    /// [`Wait::until`] for a check that is itself async (a scrape, a request,
    /// a round of work such as one pull): an async closure may change what
    /// it captures.
    pub async fn until_async<O: Outcome>(&self, check: impl AsyncFnMut() -> O) -> O::Done {
        let polled = self.try_until_async(check).await;
        polled.unwrap_or_else(|seen| self.give_up(&seen))
    }

    /// [`Wait::until_async`] that returns what was last seen at the deadline
    /// instead of panicking: for a caller that has something else to do then.
    pub async fn try_until_async<O: Outcome>(
        &self,
        check: impl AsyncFnMut() -> O,
    ) -> Result<O::Done, O::Seen> {
        // Each check's future borrows the closure: behind a lock, the
        // closure is lent to one check at a time.
        let check = tokio::sync::Mutex::new(check);
        let round = || async { (*check.lock().await)().await };
        self.between_tokio_sleeps(round).await
    }

    /// [`Wait::until_async`] inside a spawned task, whose future must be
    /// `Send` (the compiler cannot yet prove that through an async
    /// closure): a closure that returns a future, changing nothing it
    /// captures (count in an atomic instead).
    pub async fn until_spawned<O, Fut>(&self, check: impl FnMut() -> Fut) -> O::Done
    where
        O: Outcome,
        Fut: Future<Output = O>,
    {
        let polled = self.between_tokio_sleeps(check).await;
        polled.unwrap_or_else(|seen| self.give_up(&seen))
    }

    /// [`Wait::until`] outside an async runtime: sleeps the thread.
    pub fn until_blocking<O: Outcome>(&self, check: impl FnMut() -> O) -> O::Done {
        self.try_until_blocking(check)
            .unwrap_or_else(|seen| self.give_up(&seen))
    }

    /// [`Wait::until_blocking`] that returns what was last seen at the
    /// deadline instead of panicking.
    pub fn try_until_blocking<O: Outcome>(
        &self,
        mut check: impl FnMut() -> O,
    ) -> Result<O::Done, O::Seen> {
        let sleep = |every| {
            std::thread::sleep(every);
            std::future::ready(())
        };
        ready(self.poll(|| std::future::ready(check()), sleep))
    }

    /// [`Wait::poll`] sleeping with tokio between checks.
    async fn between_tokio_sleeps<O: Outcome, C: Future<Output = O>>(
        &self,
        check: impl FnMut() -> C,
    ) -> Result<O::Done, O::Seen> {
        self.poll(check, tokio::time::sleep).await
    }

    /// The one loop of every form: checks, and between checks awaits
    /// `pause(every)` (a tokio sleep, or a thread's sleep in a future that
    /// is ready at once); gives up with what the last check saw only after
    /// a check that began at or past the deadline.
    async fn poll<O: Outcome, C: Future<Output = O>, P: Future<Output = ()>>(
        &self,
        mut check: impl FnMut() -> C,
        mut pause: impl FnMut(Duration) -> P,
    ) -> Result<O::Done, O::Seen> {
        let deadline = Instant::now() + self.within;
        loop {
            let started = Instant::now();
            match check().await.outcome() {
                Ok(done) => return Ok(done),
                Err(seen) if started >= deadline => return Err(seen),
                Err(_) => pause(self.every).await,
            }
        }
    }

    fn give_up(&self, seen: &dyn Debug) -> ! {
        panic!(
            "timed out after {:?} waiting for {}; last seen: {seen:?}",
            self.within, self.what
        );
    }
}

/// The output of a future that is ready when first polled: a blocking
/// wait's, whose checks and pauses never yield.
fn ready<F: Future>(future: F) -> F::Output {
    let mut context = Context::from_waker(Waker::noop());
    match std::pin::pin!(future).poll(&mut context) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("a blocking wait's check and pause never yield"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_what_the_check_found_once_done() {
        let mut n = 0;
        let wait = Wait::new("n to reach 3", Duration::from_secs(5)).every(Duration::ZERO);
        let got = wait.until_blocking(|| {
            n += 1;
            if n == 3 {
                Ok(n)
            } else {
                Err(n)
            }
        });
        assert_eq!(got, 3);
    }

    #[test]
    fn a_timeout_says_what_was_awaited_and_the_last_value_seen() {
        let panic = std::panic::catch_unwind(|| {
            Wait::new("the answer", Duration::from_millis(30))
                .every(Duration::from_millis(10))
                .until_blocking(|| Err::<(), _>(41))
        })
        .expect_err("the wait times out");
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(
            message.contains("waiting for the answer; last seen: 41"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn the_check_runs_once_more_at_the_deadline() {
        let start = Instant::now();
        let within = Duration::from_millis(20);
        Wait::new("the deadline", within)
            .every(Duration::from_millis(50))
            .until(|| start.elapsed() >= within)
            .await;
    }

    #[test]
    fn a_check_running_across_the_deadline_is_followed_by_one_more() {
        let mut calls = 0;
        let within = Duration::from_millis(20);
        let done = Wait::new("the second call", within)
            .every(Duration::ZERO)
            .until_blocking(|| {
                calls += 1;
                if calls == 1 {
                    std::thread::sleep(within * 3);
                }
                (calls == 2).then_some(calls)
            });
        assert_eq!(done, 2);
    }

    #[tokio::test]
    async fn the_try_forms_return_what_the_last_check_saw() {
        let within = Duration::from_millis(30);
        let wait = Wait::new("never", within).every(Duration::from_millis(10));
        let mut calls = 0;
        let seen = wait.try_until_blocking(|| {
            calls += 1;
            Err::<(), _>(calls)
        });
        assert_eq!(seen, Err(calls));
        let mut calls = 0;
        let seen = wait
            .try_until_async(async || {
                calls += 1;
                tokio::task::yield_now().await;
                Err::<(), _>(calls)
            })
            .await;
        assert_eq!(seen, Err(calls));
        assert!(calls >= 2, "checked again until the deadline: {calls}");
    }

    #[tokio::test]
    async fn a_spawned_wait_times_out_with_its_message() {
        let task = tokio::spawn(async {
            Wait::new("the spawned answer", Duration::from_millis(30))
                .every(Duration::from_millis(10))
                .until_spawned(|| async { Err::<(), _>("forty-one") })
                .await
        });
        let panic = task.await.expect_err("the wait times out").into_panic();
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(
            message.contains("waiting for the spawned answer; last seen: \"forty-one\""),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_spawned_wait_is_send() {
        let task = tokio::spawn(async {
            let calls = std::sync::atomic::AtomicU64::new(0);
            Wait::new("the third call", Duration::from_secs(5))
                .every(Duration::ZERO)
                .until_spawned(|| {
                    let seen = calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    async move { (seen == 3).then_some(seen) }
                })
                .await
        });
        assert_eq!(task.await.unwrap(), 3);
    }

    #[tokio::test]
    async fn async_checks_and_options_work_alike() {
        let mut calls = 0;
        let got = Wait::new("the second call", Duration::from_secs(5))
            .every(Duration::ZERO)
            .until_async(async || {
                calls += 1;
                (calls == 2).then_some(calls)
            })
            .await;
        assert_eq!(got, 2);
    }
}
