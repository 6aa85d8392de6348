//! Progress for people: burn-train's TUI on a terminal, otherwise one line per split and
//! epoch with its metrics, so logs stay readable.
//!
//! burn-train 0.22's own plain renderer ([`Progress::BurnCli`]) prints a progress record
//! per batch and no metric values, which buries a CI log; [`ReportRenderer`] is the
//! default off a terminal instead.

use std::collections::{BTreeMap, HashMap};

use burn::train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn::train::metric::{MetricDefinition, MetricId, NumericEntry};
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};

/// How [`fit`](crate::fit()) shows progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Progress {
    /// burn-train's TUI when stdout is a terminal, otherwise [`Progress::Lines`].
    #[default]
    Auto,
    /// One [`SplitReport`] per split and epoch: handed to the `report` callback of
    /// `FitOptions` (programs print it: it displays as one line), or logged at info
    /// level when there is none.
    Lines,
    /// burn-train's plain CLI renderer (a progress record per batch).
    BurnCli,
}

/// The metrics of one split of one epoch, as burn-train last reported them.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitReport {
    /// Epoch, 1-based.
    pub epoch: usize,
    /// `train` or `valid`.
    pub split: String,
    /// Metric name -> value.
    pub values: BTreeMap<String, f64>,
}

impl core::fmt::Display for SplitReport {
    /// `epoch   3 valid  Accuracy 99.2500  Loss 0.0107`: metrics in name order.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "epoch {:>3} {:<5}", self.epoch, self.split)?;
        for (name, v) in &self.values {
            if v.abs() >= 1e-3 || *v == 0.0 {
                write!(f, "  {name} {v:.4}")?;
            } else {
                write!(f, "  {name} {v:.3e}")?;
            }
        }
        Ok(())
    }
}

type Sink = Box<dyn FnMut(&SplitReport) + Send + Sync>;

/// A renderer that says nothing per batch and hands a [`SplitReport`] to a callback at
/// the end of every split.
pub struct ReportRenderer {
    names: HashMap<MetricId, String>,
    current: BTreeMap<String, f64>,
    split: String,
    epoch: usize,
    sink: Sink,
}

impl ReportRenderer {
    /// A renderer that calls `sink` once per split and epoch.
    pub fn new(sink: impl FnMut(&SplitReport) + Send + Sync + 'static) -> Self {
        Self {
            names: HashMap::new(),
            current: BTreeMap::new(),
            split: String::new(),
            epoch: 1,
            sink: Box::new(sink),
        }
    }

    fn record(&mut self, state: MetricState) {
        if let MetricState::Numeric(entry, Some(n)) = state {
            let v = match n {
                NumericEntry::Value(v) | NumericEntry::Final(v) => v,
                NumericEntry::Aggregated {
                    aggregated_value, ..
                } => aggregated_value,
            };
            let name = self
                .names
                .get(&entry.metric_id)
                .cloned()
                .unwrap_or_else(|| format!("{:?}", entry.metric_id));
            self.current.insert(name, v);
        }
    }
}

impl MetricsRendererTraining for ReportRenderer {
    fn update_train(&mut self, state: MetricState) {
        self.record(state);
    }

    fn update_valid(&mut self, state: MetricState) {
        self.record(state);
    }

    fn on_train_end(
        &mut self,
        _summary: Option<burn::train::LearnerSummary>,
    ) -> Result<(), Box<dyn core::error::Error>> {
        Ok(())
    }
}

impl MetricsRendererEvaluation for ReportRenderer {
    fn update_test(&mut self, _name: EvaluationName, state: MetricState) {
        self.record(state);
    }
}

impl TrainingProgressLogger for ReportRenderer {
    fn start(
        &mut self,
        _total: usize,
        starting_epoch: usize,
        _items: Option<usize>,
        _label: Option<&str>,
    ) {
        self.epoch = starting_epoch.max(1);
    }

    fn update_epoch(&mut self, epoch: usize) {
        // Called with the number of the epoch just finished; what follows is the next.
        self.epoch = epoch + 1;
    }

    fn start_split(&mut self, split: &str, _total_items: usize) {
        self.split = split.to_string();
        self.current.clear();
    }

    fn update_split(&mut self, _items_processed: usize) {}

    fn end_split(&mut self) {
        let report = SplitReport {
            epoch: self.epoch,
            split: self.split.clone(),
            values: std::mem::take(&mut self.current),
        };
        (self.sink)(&report);
    }

    fn end(&mut self) {}

    fn log_event_training(&mut self, event: String) {
        log::info!("{event}");
    }
}

impl EvaluationProgressLogger for ReportRenderer {
    fn start_global_progress(&mut self, _total_tests: usize) {}
    fn start_test(&mut self, _name: &str, _total_items: usize) {}
    fn update_test_progress(&mut self, _items_processed: usize) {}
    fn end_test(&mut self) {}
    fn end_global_progress(&mut self) {}
    fn log_event_evaluation(&mut self, event: String) {
        log::info!("{event}");
    }
}

impl MetricsRenderer for ReportRenderer {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names
            .insert(definition.metric_id.clone(), definition.name.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_prints_as_one_line() {
        let mut values = BTreeMap::new();
        values.insert("Loss".to_string(), 0.010_727);
        values.insert("Accuracy".to_string(), 99.25);
        values.insert("Learning Rate".to_string(), 1.2e-4);
        let r = SplitReport {
            epoch: 3,
            split: "valid".into(),
            values,
        };
        assert_eq!(
            r.to_string(),
            "epoch   3 valid  Accuracy 99.2500  Learning Rate 1.200e-4  Loss 0.0107"
        );
    }
}
