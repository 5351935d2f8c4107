//! The feedback topic's messages as commands: what an analyst said of an incident (a
//! verdict) or an operator of a device (an onboarding, its kind, a request to forget it).
//! Each message names its type, `{"type": "verdict" | "onboard" | "kind" | "forget",
//! …}`, and is decoded in one place: fields unknown to its type are refused, never
//! guessed at.
//! Each kind is one file holding its message and what applying it does: it calls the
//! devices (`devices::owner`) and publishes what they give back. A new kind is its file,
//! a line in [`FeedbackMessage`], and its CLI.

mod forget;
mod kind;
mod onboard;
mod verdict;

use serde::{Deserialize, Serialize};

use super::incidents::Feedback;
pub use forget::Forget;
pub use kind::Kind;
pub use onboard::Onboard;

use super::clock::Now;
use super::devices::owner::Devices;
use super::output::Emitted;
use super::telemetry::Telemetry;

/// A message of the feedback topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FeedbackMessage {
    Verdict(Feedback),
    Onboard(Onboard),
    Kind(Kind),
    Forget(Forget),
}

impl FeedbackMessage {
    /// The largest message the daemon reads (a note is free text, not a document).
    pub const MAX_BYTES: usize = 64 * 1024;

    /// The message in `payload`, or why it is refused (for its dead letter).
    pub fn decode(payload: &[u8]) -> Result<Self, String> {
        if payload.len() > Self::MAX_BYTES {
            return Err(format!(
                "feedback is {} bytes, over the {}-byte limit",
                payload.len(),
                Self::MAX_BYTES
            ));
        }
        serde_json::from_slice(payload).map_err(|e| format!("malformed feedback: {e}"))
    }

    /// The message as the topic carries it.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a feedback message serialises")
    }

    /// The device it is about (the message's key on the topic).
    pub fn device(&self) -> &str {
        match self {
            Self::Verdict(f) => &f.device,
            Self::Onboard(o) => &o.device,
            Self::Kind(k) => &k.device,
            Self::Forget(f) => &f.device,
        }
    }

    /// Carry the message out on the devices at `now`: what it published, or why it is
    /// refused (for its dead letter).
    pub(in crate::monitor) fn apply(
        self,
        devices: &mut Devices,
        now: Now,
        telemetry: &dyn Telemetry,
    ) -> Result<Vec<Emitted>, String> {
        match self {
            Self::Verdict(f) => f.apply(devices, now, telemetry),
            Self::Onboard(o) => o.apply(devices, now),
            Self::Kind(k) => k.apply(devices, now),
            Self::Forget(f) => f.apply(devices, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::incidents::Verdict;

    #[test]
    fn each_message_names_its_type_and_decodes_to_it() {
        let verdict = FeedbackMessage::Verdict(Feedback {
            device: "cam".into(),
            incident_id: "i1".into(),
            verdict: Verdict::FalsePositive,
            by: "ana".into(),
            note: String::new(),
            id: String::new(),
            at: 0.0,
            from: String::new(),
        });
        let text = String::from_utf8(verdict.encode()).unwrap();
        assert!(text.starts_with(r#"{"type":"verdict","device":"cam""#), "{text}");
        assert_eq!(FeedbackMessage::decode(text.as_bytes()), Ok(verdict));
        let onboard = br#"{"type": "onboard", "device": "cam", "onboard_for_s": 60, "kind": "edimax"}"#;
        match FeedbackMessage::decode(onboard) {
            Ok(FeedbackMessage::Onboard(o)) => {
                assert_eq!((o.onboard_for_s, o.kind.as_deref()), (60.0, Some("edimax")))
            }
            other => panic!("{other:?}"),
        }
        let forget = FeedbackMessage::decode(br#"{"type": "forget", "device": "cam", "by": "ops"}"#).unwrap();
        assert_eq!(forget.device(), "cam");
    }

    #[test]
    fn a_message_without_its_type_or_with_another_types_fields_is_refused() {
        let refused = |payload: &[u8]| FeedbackMessage::decode(payload).unwrap_err();
        // No guessing from the keys: an onboarding without its type is refused.
        assert!(refused(br#"{"device": "cam", "onboard_for_s": 60}"#).contains("missing field `type`"));
        assert!(refused(br#"{"type": "reboot", "device": "cam"}"#).contains("unknown variant `reboot`"));
        let mixed = refused(br#"{"type": "forget", "device": "cam", "onboard_for_s": 60}"#);
        assert!(mixed.contains("unknown field `onboard_for_s`"), "{mixed}");
        assert!(refused(&vec![b' '; FeedbackMessage::MAX_BYTES + 1]).contains("over the 65536-byte limit"));
    }
}
