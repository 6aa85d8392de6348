//! Linear warmup, then cosine decay (the nanoGPT schedule).

use burn::lr_scheduler::{LrScheduler, LrSchedulerRecord};
use burn::optim::LearningRate;

/// `lr(s) = peak · s / warmup` for `s < warmup`, then a half cosine from `peak` down to
/// `min` at `total`, and `min` after it. `s` counts optimiser steps from 1.
#[derive(Debug, Clone)]
pub struct WarmupCosine {
    peak: f64,
    min: f64,
    warmup: usize,
    total: usize,
    step: usize,
}

impl WarmupCosine {
    /// A schedule over `total` steps.
    pub fn new(peak: f64, min: f64, warmup: usize, total: usize) -> Self {
        Self {
            peak,
            min,
            warmup,
            total: total.max(1),
            step: 0,
        }
    }

    /// The learning rate at step `s` (1-based).
    pub fn at(&self, s: usize) -> f64 {
        if s <= self.warmup && self.warmup > 0 {
            return self.peak * s as f64 / self.warmup as f64;
        }
        if s >= self.total {
            return self.min;
        }
        let progress = (s - self.warmup) as f64 / (self.total - self.warmup).max(1) as f64;
        self.min + 0.5 * (self.peak - self.min) * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

impl LrScheduler for WarmupCosine {
    fn step(&mut self) -> LearningRate {
        self.step += 1;
        self.at(self.step)
    }

    fn to_record(&self) -> LrSchedulerRecord {
        LrSchedulerRecord::new().with_scalar("step", self.step as u64)
    }

    fn load_record(&mut self, record: LrSchedulerRecord) {
        if let Some(step) = record.scalar::<u64>("step") {
            self.step = step as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine() {
        let mut s = WarmupCosine::new(1e-3, 1e-4, 10, 110);
        let lrs: Vec<f64> = (0..120).map(|_| s.step()).collect();
        assert!((lrs[0] - 1e-4).abs() < 1e-12); // step 1 of 10
        assert!((lrs[9] - 1e-3).abs() < 1e-12); // end of warmup
        assert!((lrs[59] - 5.5e-4).abs() < 1e-9); // half way down the cosine
        assert!((lrs[109] - 1e-4).abs() < 1e-12);
        assert!((lrs[119] - 1e-4).abs() < 1e-12);
        // The step survives a save and load.
        let mut t = WarmupCosine::new(1e-3, 1e-4, 10, 110);
        t.load_record(s.to_record());
        assert_eq!(t.step(), s.step());
    }
}
