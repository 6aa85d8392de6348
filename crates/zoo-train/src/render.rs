//! Progress for people: burn-train's TUI on a terminal, otherwise one line per split and
//! epoch with its metrics, so logs stay readable.
//!
//! burn-train 0.22's own plain renderer ([`Progress::BurnCli`]) prints a progress record
//! per batch and no metric values, which buries a CI log; [`ReportRenderer`] is the
//! default off a terminal instead.
//!
//! Whichever renderer shows progress, a `RoundRecorder` stands in front of it and keeps
//! each round's metrics as the learner's event stream delivers them: the source of
//! `metrics.csv`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

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

/// One round's metrics: `{split}_{metric}` (see [`metric_key`]) -> the value burn-train
/// computed over the whole split at its end (a mean over the batches for the loss).
pub type RoundMetrics = BTreeMap<String, f64>;

/// The `metrics.csv` column of a metric: `train` and `Learning Rate` give
/// `train_learning_rate`.
pub fn metric_key(split: &str, name: &str) -> String {
    format!("{split}_{}", name.to_lowercase().replace(' ', "_"))
}

/// The rounds recorded so far, by round number (1-based).
pub(crate) type Recorded = Arc<Mutex<BTreeMap<usize, RoundMetrics>>>;

type RoundSink = Box<dyn FnMut(&BTreeMap<usize, RoundMetrics>) + Send + Sync>;

/// A renderer that passes every call on to another one and records, per round, the final
/// value of each numeric metric of each split: burn-train sends it once at the end of a
/// split ([`NumericEntry::Final`]), after the per-batch values.
///
/// At the end of every round (burn-train's `update_epoch`) it hands the rounds so far to a
/// callback. burn-train flushes its event processor before it writes a checkpoint, so a
/// round's callback has returned before that round's checkpoint exists.
pub(crate) struct RoundRecorder {
    inner: Box<dyn MetricsRenderer>,
    names: HashMap<MetricId, String>,
    epoch: usize,
    rounds: Recorded,
    on_round: RoundSink,
}

impl RoundRecorder {
    /// A recorder in front of `inner`, calling `on_round` after each round; the handle
    /// reads the rounds after training.
    pub(crate) fn new(
        inner: Box<dyn MetricsRenderer>,
        on_round: impl FnMut(&BTreeMap<usize, RoundMetrics>) + Send + Sync + 'static,
    ) -> (Self, Recorded) {
        let rounds = Recorded::default();
        let recorder = Self {
            inner,
            names: HashMap::new(),
            epoch: 1,
            rounds: rounds.clone(),
            on_round: Box::new(on_round),
        };
        (recorder, rounds)
    }

    fn record(&mut self, split: &str, state: &MetricState) {
        let MetricState::Numeric(entry, Some(NumericEntry::Final(value))) = state else {
            return;
        };
        let Some(name) = self.names.get(&entry.metric_id) else {
            log::warn!("a value of the unregistered metric {:?}", entry.metric_id);
            return;
        };
        let key = metric_key(split, name);
        let mut rounds = self.rounds.lock().unwrap_or_else(PoisonError::into_inner);
        rounds.entry(self.epoch).or_default().insert(key, *value);
    }
}

impl MetricsRendererTraining for RoundRecorder {
    fn update_train(&mut self, state: MetricState) {
        self.record("train", &state);
        self.inner.update_train(state);
    }

    fn update_valid(&mut self, state: MetricState) {
        self.record("valid", &state);
        self.inner.update_valid(state);
    }

    fn on_train_end(
        &mut self,
        summary: Option<burn::train::LearnerSummary>,
    ) -> Result<(), Box<dyn core::error::Error>> {
        self.inner.on_train_end(summary)
    }
}

impl MetricsRendererEvaluation for RoundRecorder {
    fn update_test(&mut self, name: EvaluationName, state: MetricState) {
        self.inner.update_test(name, state);
    }

    fn on_test_end(
        &mut self,
        summary: Option<burn::train::LearnerSummary>,
    ) -> Result<(), Box<dyn core::error::Error>> {
        self.inner.on_test_end(summary)
    }
}

impl TrainingProgressLogger for RoundRecorder {
    fn start(
        &mut self,
        total: usize,
        starting_epoch: usize,
        items: Option<usize>,
        label: Option<&str>,
    ) {
        self.epoch = starting_epoch.max(1);
        self.inner.start(total, starting_epoch, items, label);
    }

    fn update_epoch(&mut self, epoch: usize) {
        // Called with the number of the round just finished; what follows is the next.
        self.inner.update_epoch(epoch);
        let rounds = self
            .rounds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (self.on_round)(&rounds);
        self.epoch = epoch + 1;
    }

    fn start_split(&mut self, split: &str, total_items: usize) {
        self.inner.start_split(split, total_items);
    }

    fn update_split(&mut self, items_processed: usize) {
        self.inner.update_split(items_processed);
    }

    fn end_split(&mut self) {
        self.inner.end_split();
    }

    fn end(&mut self) {
        self.inner.end();
    }

    fn log_event_training(&mut self, event: String) {
        self.inner.log_event_training(event);
    }
}

impl EvaluationProgressLogger for RoundRecorder {
    fn start_global_progress(&mut self, total_tests: usize) {
        self.inner.start_global_progress(total_tests);
    }

    fn start_test(&mut self, name: &str, total_items: usize) {
        self.inner.start_test(name, total_items);
    }

    fn update_test_progress(&mut self, items_processed: usize) {
        self.inner.update_test_progress(items_processed);
    }

    fn end_test(&mut self) {
        self.inner.end_test();
    }

    fn end_global_progress(&mut self) {
        self.inner.end_global_progress();
    }

    fn log_event_evaluation(&mut self, event: String) {
        self.inner.log_event_evaluation(event);
    }
}

impl MetricsRenderer for RoundRecorder {
    fn manual_close(&mut self) {
        self.inner.manual_close();
    }

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names
            .insert(definition.metric_id.clone(), definition.name.to_string());
        self.inner.register_metric(definition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::train::metric::{LossMetric, MetricEntry, SerializedEntry};

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

    fn numeric(id: &MetricId, entry: NumericEntry) -> MetricState {
        let text = SerializedEntry::new(String::new(), String::new());
        MetricState::Numeric(MetricEntry::new(id.clone(), text), Some(entry))
    }

    #[test]
    fn the_recorder_keeps_each_rounds_final_values_and_passes_everything_on() {
        let reports = Arc::new(Mutex::new(Vec::new()));
        let shown = reports.clone();
        let inner =
            ReportRenderer::new(move |r: &SplitReport| shown.lock().unwrap().push(r.clone()));
        let ends = Arc::new(Mutex::new(Vec::new()));
        let seen = ends.clone();
        let (mut recorder, rounds) = RoundRecorder::new(Box::new(inner), move |r| {
            seen.lock()
                .unwrap()
                .push(r.keys().copied().collect::<Vec<_>>());
        });
        let loss = MetricId::new(Arc::new("Loss".into()));
        recorder.register_metric(MetricDefinition::new(loss.clone(), &LossMetric::new()));
        // A resumed run: rounds 3 and 4.
        recorder.start(4, 3, None, None);
        for (epoch, train, valid) in [(3, 0.5, 0.75), (4, 0.25, 0.625)] {
            recorder.start_split("train", 2);
            let batch = NumericEntry::Aggregated {
                aggregated_value: 9.0,
                count: 1,
            };
            recorder.update_train(numeric(&loss, batch));
            recorder.update_train(numeric(&loss, NumericEntry::Final(train)));
            recorder.end_split();
            recorder.start_split("valid", 2);
            recorder.update_valid(numeric(&loss, NumericEntry::Final(valid)));
            recorder.end_split();
            recorder.update_epoch(epoch);
        }
        let rounds = rounds.lock().unwrap().clone();
        let row = |train: f64, valid: f64| {
            RoundMetrics::from([("train_loss".into(), train), ("valid_loss".into(), valid)])
        };
        assert_eq!(
            rounds,
            BTreeMap::from([(3, row(0.5, 0.75)), (4, row(0.25, 0.625))])
        );
        // The callback saw each round as it ended.
        assert_eq!(*ends.lock().unwrap(), [vec![3], vec![3, 4]]);
        // The renderer behind it got every split's values.
        let reports = reports.lock().unwrap();
        let got: Vec<(usize, &str, f64)> = reports
            .iter()
            .map(|r| (r.epoch, r.split.as_str(), r.values["Loss"]))
            .collect();
        assert_eq!(
            got,
            [
                (3, "train", 0.5),
                (3, "valid", 0.75),
                (4, "train", 0.25),
                (4, "valid", 0.625)
            ]
        );
    }

    #[test]
    fn metric_keys_are_lower_case_with_underscores() {
        assert_eq!(metric_key("train", "Learning Rate"), "train_learning_rate");
        assert_eq!(metric_key("valid", "Loss"), "valid_loss");
    }
}
