//! The mirrors and sources across polls: what each skipped because its
//! origin removed it first (`jetstream/origin_gaps.rs`), and when its
//! origin's limits will remove what it has not copied
//! (`jetstream/origin_forecast.rs`).

use std::sync::Mutex;
use std::time::Duration;

use crate::jetstream::consumer_health::window::SLICES;
use crate::jetstream::origin_forecast::OriginForecasts;
use crate::jetstream::origin_gaps::OriginGaps;
use crate::lock::LockOrRecover;
use crate::scrape::snapshot::Snapshot;

/// What is kept of the mirrors and sources between polls.
#[derive(Debug, Default)]
pub(super) struct OriginWatch {
    gaps: Mutex<OriginGaps>,
    forecasts: Mutex<OriginForecasts>,
}

impl OriginWatch {
    /// Takes one poll into `snapshot` at `now` (the exporter's clock). The
    /// forecast comes with consumer health only (a status `window` above
    /// 0): its rates are measured over the same spans as the consumers'.
    pub(super) fn watch(&self, snapshot: &mut Snapshot, window: Duration, now: f64) {
        let (gaps, forecasts) = {
            let (streams, _) = snapshot.rows();
            let (led, _) = snapshot.led();
            let led = &streams[..led];
            let gaps = self.gaps.lock_or_recover().poll(led, now);
            let polls: Vec<_> = snapshot.targets.iter().map(|t| t.jsz.as_ref()).collect();
            let window = window.as_secs_f64();
            let forecasts = (window > 0.0).then(|| {
                let mut f = self.forecasts.lock_or_recover();
                f.poll(led, &polls, (now, window / SLICES))
            });
            (gaps, forecasts.unwrap_or_default())
        };
        snapshot.origin_gaps = gaps;
        snapshot.origin_forecasts = forecasts;
    }
}
