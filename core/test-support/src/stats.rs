//! The statistics every benchmark reports: nearest-rank percentiles of its
//! samples, in milliseconds. One definition, so the figures of different
//! benches (and of different runs) are comparable.

use std::time::Duration;

/// The `p` percentile (`0.0..=1.0`) of `samples`, nearest rank: the
/// sample at index `round((n - 1) * p)` of the sorted samples. Panics on
/// no samples (a bench that measured nothing is a broken bench).
pub fn pct<T: PartialOrd + Copy>(samples: &[T], p: f64) -> T {
    assert!(!samples.is_empty(), "a percentile of no samples");
    assert!((0.0..=1.0).contains(&p), "percentile {p} out of 0..=1");
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `p` percentile of `samples`, in milliseconds.
pub fn pct_ms(samples: &[Duration], p: f64) -> f64 {
    ms(pct(samples, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<Duration> = [5, 1, 4, 2, 3].map(Duration::from_millis).to_vec();
        assert_eq!(pct(&v, 0.5), Duration::from_millis(3));
        assert_eq!(pct(&v, 0.0), Duration::from_millis(1));
        assert_eq!(pct(&v, 1.0), Duration::from_millis(5));
        // round((4) * 0.9) = 4: the largest of five.
        assert_eq!(pct_ms(&v, 0.9), 5.0);
        assert_eq!(pct(&[2.5_f64, 0.5], 0.5), 2.5);
    }
}
