//! The one harness that drives a [`Monitor`] without the daemon's shell, as Kafka
//! Streams' `TopologyTestDriver` drives a topology: the lab, the tests and the benches
//! pipe messages in, advance time, and read what came out, and no caller writes that
//! loop again. What the shell would carry out is carried out here, inline: an
//! adaptation the monitor asks for is solved at once on the driver's copy of the model
//! and handed back (without one, the caller gets the command, as a bench that runs the
//! daemon's adapter thread does); state records are dropped (no state topic).

use std::collections::VecDeque;

use super::api::{Command, Input, Monitor, Output};
use super::clock::Now;
use super::decode::Received;
use super::devices::adapt_jobs::run_adaptation;
use super::output::Emitted;
use super::record::Source;
use super::settings::CoreSettings;
use super::telemetry::Tally;
use crate::model::Model;

/// Windows solved per batch when the driver adapts inline (as `adaptation.batch` does).
const ADAPT_BATCH: usize = 64;

/// A monitor, its clocks and what it was told, driven in process.
pub struct TestDriver {
    monitor: Monitor,
    /// The adapter's copy of the model: `None` where the monitor never asks for one
    /// (the event clock adapts on its own solver).
    adapting: Option<Model>,
    telemetry: Tally,
    /// The service clock (ms) each input is given.
    service_ms: u64,
    /// The wall clock each input is given (Unix seconds); `None`: the real one.
    wall_unix: Option<f64>,
}

impl TestDriver {
    /// A monitor of these settings scoring with `model` of `version`; `adapting`, the
    /// adapter's copy, solves what the service clock schedules. The service clock
    /// starts at 0; the wall clock is `wall_unix` (moved by [`Self::advance_time`]), or
    /// with `None` the real one (the lab, whose events are stamped as the daemon's).
    pub fn new(
        settings: &CoreSettings,
        model: Model,
        adapting: Option<Model>,
        version: &str,
        wall_unix: Option<f64>,
    ) -> Self {
        Self {
            monitor: Monitor::new(settings, model, version),
            adapting,
            telemetry: Tally::default(),
            service_ms: 0,
            wall_unix,
        }
    }

    /// One input at the driver's time. The adaptations it asks for are solved and
    /// handed back before this returns (their outputs follow the input's), unless the
    /// driver has no adapting model: then `commands` holds them for the caller.
    pub fn tell(&mut self, input: Input) -> Output {
        let mut out = self.handle(input);
        let mut pending: VecDeque<Command> = out.commands.drain(..).collect();
        while let Some(command) = pending.pop_front() {
            match (command, &self.adapting) {
                (Command::Adapt { generation, jobs }, Some(model)) => {
                    let states = run_adaptation(model, &jobs, ADAPT_BATCH);
                    let mut done = self.handle(Input::Adapted { generation, states, seconds_per_batch: 0.0 });
                    out.emitted.append(&mut done.emitted);
                    pending.extend(done.commands);
                }
                (Command::AdapterModel { model, .. }, Some(_)) => self.adapting = Some(*model),
                (Command::WriteState { .. }, _) => {}
                (command, None) => out.commands.push(command),
            }
        }
        out
    }

    fn handle(&mut self, input: Input) -> Output {
        self.monitor.handle(input, self.now(), &self.telemetry)
    }

    /// A message arrives now: gathered into the next micro-batch.
    pub fn pipe(&mut self, message: Received) {
        let at_ms = self.service_ms;
        self.tell(Input::Arrived { message, at_ms });
    }

    /// A message of `payload` on `topic`, partition 0, at `offset`, keyed by nothing.
    pub fn pipe_payload(&mut self, topic: &str, offset: i64, payload: Vec<u8>) {
        self.pipe(Received { source: Source::new(topic, 0, offset), key: None, payload });
    }

    /// Run what was gathered, and what it deferred, until nothing waits: every output.
    pub fn run(&mut self) -> Vec<Emitted> {
        let mut emitted = Vec::new();
        while self.monitor.has_work() {
            emitted.extend(self.tell(Input::Run).emitted);
        }
        emitted
    }

    /// Time passes by `ms` on the service clock (and on a wall clock of the driver's
    /// own): one tick, with the adaptation it schedules solved inline.
    pub fn advance_time(&mut self, ms: u64) -> Output {
        self.service_ms += ms;
        if let Some(wall) = &mut self.wall_unix {
            *wall += ms as f64 / 1000.0;
        }
        self.tell(Input::Tick)
    }

    /// The time an input is given now.
    pub fn now(&self) -> Now {
        Now::at(self.service_ms, self.wall_unix.unwrap_or_else(crate::wall_clock::unix_now))
    }

    pub fn monitor(&self) -> &Monitor {
        &self.monitor
    }

    /// What the monitor reported, summed.
    pub fn telemetry(&self) -> &Tally {
        &self.telemetry
    }
}
