//! Per-token request rate limits (`auth.requests_per_minute`), per
//! replica: a token bucket per token, holding a sixth of a minute's
//! requests, refilled evenly. A request with no token left is answered
//! `rate_limited` (429) with `Retry-After`, and not served.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The buckets of one replica.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// `per_minute` requests a minute per token (at least 1).
    pub fn new(per_minute: u32) -> RateLimiter {
        let per_minute = f64::from(per_minute.max(1));
        RateLimiter {
            per_second: per_minute / 60.0,
            burst: (per_minute / 6.0).max(1.0),
            buckets: Mutex::default(),
        }
    }

    /// Takes one request of `key`'s, or says how long until one is there.
    pub fn take(&self, key: &str) -> Result<(), Duration> {
        self.take_at(key, Instant::now())
    }

    fn take_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.per_second).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - b.tokens) / self.per_second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        // 60 a minute: 10 at once, then one a second.
        let l = RateLimiter::new(60);
        let t0 = Instant::now();
        for _ in 0..10 {
            l.take_at("a", t0).unwrap();
        }
        let wait = l.take_at("a", t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        // Another token has its own bucket.
        l.take_at("b", t0).unwrap();
        l.take_at("a", t0 + Duration::from_secs(1)).unwrap();
        assert!(l.take_at("a", t0 + Duration::from_secs(1)).is_err());
        // Refilled up to the burst, not beyond.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..10 {
            l.take_at("a", later).unwrap();
        }
        assert!(l.take_at("a", later).is_err());
    }
}
