//! The settings that shape what the core decides, derived once from the daemon's
//! configuration, and the engine and pipeline built from them. The daemon, the lab and
//! the tests' core harness all start here, so a record meets the same windows,
//! threshold, per-device cap, clock, adaptation schedule and incident rules whichever
//! drives it, and the event clock is one setting rather than three flags that must agree
//! (the pipeline's clock, the engine's cadence, the device table's clock).

use super::clock::Clock;
use super::config::DaemonConfig;
use super::engine::{Engine, EventCadence, WindowSizes};
use super::incidents::IncidentRules;
use super::pipeline::{Pipeline, RecordOutputs};
use crate::model::Model;

#[derive(Debug, Clone)]
pub struct CoreSettings {
    pub sizes: WindowSizes,
    /// Devices tracked at most (`devices.max_tracked`).
    pub max_tracked: usize,
    pub threshold: f32,
    /// Records of one device scored per micro-batch; the rest are deferred.
    pub max_per_device: usize,
    /// Records per micro-batch, deferred ones included.
    pub max_batch: usize,
    /// Devices adapted in one batched solve.
    pub adaptation_batch: usize,
    /// How far ahead of the host's clock a record's time is believed.
    pub max_ahead_s: f64,
    pub clock: Clock,
    /// When a device is re-adapted on its own time (used on the event clock).
    pub cadence: EventCadence,
    pub incidents: IncidentRules,
    pub outputs: RecordOutputs,
    pub feedback_max_age_s: u64,
    pub trust_input_labels: bool,
}

impl CoreSettings {
    pub fn from_config(cfg: &DaemonConfig) -> Self {
        Self {
            sizes: WindowSizes {
                positive: cfg.windows.positive,
                unlabeled: cfg.windows.unlabeled,
                bootstrap_positives: cfg.windows.bootstrap_positives,
            },
            max_tracked: cfg.devices.max_tracked,
            threshold: cfg.model.threshold,
            max_per_device: cfg.scoring.max_per_device,
            max_batch: cfg.scoring.max_batch,
            adaptation_batch: cfg.adaptation.batch_size,
            max_ahead_s: cfg.time.max_ahead_s as f64,
            clock: cfg.time.clock,
            cadence: EventCadence::from_config(&cfg.adaptation),
            incidents: cfg.incident_rules(),
            outputs: RecordOutputs { scores: cfg.kafka.publish_scores, alerts: cfg.kafka.publish_alerts },
            feedback_max_age_s: cfg.incidents.feedback_after_close_s,
            trust_input_labels: cfg.windows.trust_input_labels,
        }
    }

    /// The engine these settings give, scoring with `model`.
    pub fn engine(&self, model: Model) -> Engine {
        let mut engine = Engine::new(model, self.sizes, self.max_tracked, self.threshold);
        engine.max_per_device = self.max_per_device;
        engine.adaptation_batch = self.adaptation_batch;
        engine.max_clock_ahead_s = self.max_ahead_s;
        if self.clock == Clock::Event {
            engine.cadence = Some(self.cadence);
            engine.devices.event_clock = true;
        }
        engine
    }

    /// The pipeline these settings give.
    pub fn pipeline(&self) -> Pipeline {
        let mut pipeline = Pipeline::new(self.incidents, self.outputs, self.clock, self.max_batch);
        pipeline.feedback_max_age_s = self.feedback_max_age_s;
        pipeline.trust_input_labels = self.trust_input_labels;
        pipeline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_are_the_configurations_and_the_pipeline_runs_on_its_clock() {
        let mut cfg = DaemonConfig::defaults();
        cfg.scoring.max_per_device = 7;
        cfg.windows.trust_input_labels = true;
        cfg.incidents.feedback_after_close_s = 99;
        for clock in [Clock::Event, Clock::Service] {
            cfg.time.clock = clock;
            let s = CoreSettings::from_config(&cfg);
            assert_eq!((s.max_per_device, s.feedback_max_age_s), (7, 99));
            let p = s.pipeline();
            assert_eq!((p.clock, p.feedback_max_age_s, p.trust_input_labels), (clock, 99, true));
        }
    }
}
