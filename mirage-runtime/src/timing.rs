//! Timing GPU work with CUDA events: [`time_median`], [`TimingStats`] and the [`L2Flush`]
//! helper that evicts the L2 cache between timed calls.

use cudarc::driver::{CudaSlice, sys};

use crate::driver::guard;
use crate::error::RuntimeError;
use crate::stream::{Stream, TimingEvent};

/// The smallest L2 flush buffer, in bytes (256 MiB).
pub const MIN_L2_FLUSH_BYTES: usize = 256 << 20;

/// Summary of a timing run, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct TimingStats {
    /// Median of the samples.
    pub median_us: f64,
    /// Fastest sample.
    pub min_us: f64,
    /// Slowest sample.
    pub max_us: f64,
    /// Number of samples.
    pub samples: usize,
}

impl TimingStats {
    /// Summarizes samples (pure). Fails on an empty set or a sample that is negative or not
    /// finite.
    pub fn from_samples(samples_us: &[f64]) -> Result<TimingStats, RuntimeError> {
        if samples_us.is_empty() {
            return Err(RuntimeError::Timing("expected at least one sample, found none".to_owned()));
        }
        if let Some(bad) = samples_us.iter().find(|s| !s.is_finite() || **s < 0.0) {
            return Err(RuntimeError::Timing(format!("expected finite non-negative samples, found {bad}")));
        }
        let mut sorted = samples_us.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median_us = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        Ok(TimingStats { median_us, min_us: sorted[0], max_us: sorted[n - 1], samples: n })
    }
}

/// How large an L2 flush buffer to use for an L2 cache of `l2_bytes` (pure): twice the L2, and
/// at least [`MIN_L2_FLUSH_BYTES`].
pub fn l2_flush_bytes(l2_bytes: usize) -> usize {
    l2_bytes.saturating_mul(2).max(MIN_L2_FLUSH_BYTES)
}

/// A device buffer larger than the L2 cache; writing it evicts whatever the L2 held, so the next
/// timed call reads its inputs from device memory.
#[derive(Debug)]
pub struct L2Flush {
    buffer: CudaSlice<u8>,
}

impl L2Flush {
    /// Allocates a flush buffer sized from the device's L2 cache (see [`l2_flush_bytes`]).
    pub fn new(stream: &Stream) -> Result<L2Flush, RuntimeError> {
        let ctx = stream.raw().context();
        let l2 = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_err(RuntimeError::driver("reading the L2 cache size"))?;
        let bytes = l2_flush_bytes(usize::try_from(l2).unwrap_or(0));
        let buffer = guard("allocating the L2 flush buffer", || {
            stream
                .raw()
                .alloc_zeros::<u8>(bytes)
                .map_err(RuntimeError::driver(format!("allocating a {bytes}-byte L2 flush buffer")))
        })?;
        Ok(L2Flush { buffer })
    }

    /// The buffer's size in bytes.
    pub fn bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Queues a write of the whole buffer on `stream`.
    pub fn flush(&mut self, stream: &Stream) -> Result<(), RuntimeError> {
        stream.raw().memset_zeros(&mut self.buffer).map_err(RuntimeError::driver("writing the L2 flush buffer"))
    }
}

/// Times `f` with CUDA events on `stream`: `warmup` untimed calls, then `iters` calls each
/// between its own pair of events (created with timing enabled), with the L2 cache flushed
/// before each timed call when `flush_l2` is set (the flush is not timed). `f` must queue its
/// work on `stream`. Returns the median, min and max in microseconds.
pub fn time_median<F>(
    stream: &Stream,
    warmup: usize,
    iters: usize,
    flush_l2: bool,
    f: F,
) -> Result<TimingStats, RuntimeError>
where
    F: FnMut() -> Result<(), RuntimeError>,
{
    let mut flush = if flush_l2 { Some(L2Flush::new(stream)?) } else { None };
    time_median_with(stream, warmup, iters, flush.as_mut(), f)
}

/// [`time_median`] with a caller-owned [`L2Flush`] (or none), so repeated measurements reuse
/// one flush buffer.
pub fn time_median_with<F>(
    stream: &Stream,
    warmup: usize,
    iters: usize,
    mut flush: Option<&mut L2Flush>,
    mut f: F,
) -> Result<TimingStats, RuntimeError>
where
    F: FnMut() -> Result<(), RuntimeError>,
{
    if iters == 0 {
        return Err(RuntimeError::Timing("expected at least one timed iteration, found 0".to_owned()));
    }
    for _ in 0..warmup {
        f()?;
    }
    let mut events = Vec::with_capacity(iters);
    for _ in 0..iters {
        events.push((TimingEvent::new(stream)?, TimingEvent::new(stream)?));
    }
    for (start, end) in &events {
        if let Some(flush) = flush.as_deref_mut() {
            flush.flush(stream)?;
        }
        start.record(stream)?;
        f()?;
        end.record(stream)?;
    }
    stream.synchronize()?;
    let samples =
        events.iter().map(|(start, end)| start.elapsed_us(end)).collect::<Result<Vec<f64>, RuntimeError>>()?;
    TimingStats::from_samples(&samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = TimingStats::from_samples(&[5.0, 1.0, 3.0]).expect("valid");
        assert_eq!((s.median_us, s.min_us, s.max_us, s.samples), (3.0, 1.0, 5.0, 3));
        let s = TimingStats::from_samples(&[4.0, 1.0, 3.0, 2.0]).expect("valid");
        assert_eq!(s.median_us, 2.5);
    }

    #[test]
    fn bad_samples_rejected() {
        assert!(TimingStats::from_samples(&[]).is_err());
        assert!(TimingStats::from_samples(&[1.0, f64::NAN]).is_err());
        assert!(TimingStats::from_samples(&[-1.0]).is_err());
    }

    #[test]
    fn flush_size_covers_l2() {
        assert_eq!(l2_flush_bytes(60 << 20), 256 << 20);
        assert_eq!(l2_flush_bytes(200 << 20), 400 << 20);
        assert_eq!(l2_flush_bytes(0), MIN_L2_FLUSH_BYTES);
    }
}
