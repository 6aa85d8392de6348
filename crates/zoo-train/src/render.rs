//! Progress for people: burn-train's TUI on a terminal, otherwise one report per split
//! and epoch through a callback, so logs stay readable.

use std::collections::{BTreeMap, HashMap};

use burn::train::logger::{EvaluationProgressLogger, TrainingProgressLogger};
use burn::train::metric::{MetricDefinition, MetricId, NumericEntry};
use burn::train::renderer::{
    EvaluationName, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining,
};

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
