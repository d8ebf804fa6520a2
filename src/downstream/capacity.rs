//! A rate a struggling downstream allows (the `throttled` mode's limit, kept with GCRA); its
//! workers and their line are the pipeline's (`pipeline.rs`).

/// The Generic Cell Rate Algorithm: one timestamp, the "theoretical arrival time" of the next
/// request if they came exactly at the rate. A request is allowed when it is no earlier than
/// that time minus the burst tolerance, and each allowed request pushes the time on by one
/// emission interval. The throttled endpoint keeps one for every caller; the server's own rate
/// limits one per client.
#[derive(Debug, Default)]
pub struct Gcra {
    tat_ms: f64,
}

impl Gcra {
    /// Allows a request at `now_ms`, or says how many ms until one would be allowed.
    pub fn check(&mut self, rate_per_s: f64, burst: u32, now_ms: u64) -> Result<(), u64> {
        let interval = 1000.0 / rate_per_s;
        let tolerance = interval * f64::from(burst.saturating_sub(1));
        let now = now_ms as f64;
        let tat = self.tat_ms.max(now);
        let allowed_at = tat - tolerance;
        if now < allowed_at {
            return Err((allowed_at - now).ceil() as u64);
        }
        self.tat_ms = tat + interval;
        Ok(())
    }

    /// Allows a request that costs `cost` requests' worth (bytes, say) at `now_ms`, or says
    /// how many ms until it would be allowed: `check` is a cost of one.
    pub fn check_n(&mut self, rate_per_s: f64, burst: u32, cost: u32, now_ms: u64) -> Result<(), u64> {
        let interval = 1000.0 / rate_per_s;
        let depth = interval * f64::from(burst);
        let now = now_ms as f64;
        let next = self.tat_ms.max(now) + interval * f64::from(cost);
        if next - now > depth {
            return Err((next - now - depth).ceil().max(1.0) as u64);
        }
        self.tat_ms = next;
        Ok(())
    }

    /// Whether a whole burst would be allowed at `now_ms`: nothing is left to remember.
    pub fn is_idle(&self, now_ms: u64) -> bool {
        self.tat_ms <= now_ms as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_allows_the_burst_then_the_rate() {
        let mut gcra = Gcra::default();
        // 10 per second with a burst of 3: three at once, then one every 100 ms.
        let at_once: Vec<bool> = (0..5).map(|_| gcra.check(10.0, 3, 1_000).is_ok()).collect();
        assert_eq!(at_once, [true, true, true, false, false]);
        assert_eq!(gcra.check(10.0, 3, 1_000), Err(100), "the next slot is 100 ms away");
        assert!(gcra.check(10.0, 3, 1_100).is_ok());
        assert!(gcra.check(10.0, 3, 1_100).is_err());
        // Quiet for a while: the burst is available again, not more.
        let later: Vec<bool> = (0..4).map(|_| gcra.check(10.0, 3, 5_000).is_ok()).collect();
        assert_eq!(later, [true, true, true, false]);
    }
}
