//! The feedback topic's one message type: what an analyst said of an incident (a
//! verdict) or an operator of a device (an onboarding, a request to forget it). Each
//! message names its type, `{"type": "verdict" | "onboard" | "forget", …}`, and is
//! decoded in one place: fields unknown to its type are refused, never guessed at.

use serde::{Deserialize, Serialize};

/// A message of the feedback topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FeedbackMessage {
    Verdict(Feedback),
    Onboard(Onboard),
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
            Self::Forget(f) => &f.device,
        }
    }
}

/// An analyst's verdict on an incident (`metapu feedback`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Feedback {
    pub device: String,
    pub incident_id: String,
    pub verdict: Verdict,
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub note: String,
}

/// An operator's request to forget a device (`metapu forget`, on the feedback topic):
/// its known-normal records, windows, classifier and snapshot go. The one way a device
/// onboarded is forgotten besides `devices.max_tracked`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Forget {
    pub device: String,
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub note: String,
}

/// An operator's onboarding (`metapu onboard`, on the feedback topic): the device's
/// traffic for the next `onboard_for_s` seconds is its known-normal traffic
/// (`onboarding.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Onboard {
    pub device: String,
    pub onboard_for_s: f64,
    /// The device's kind (`kinds.rs`): its siblings are offered what it is onboarded on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Normal behaviour: the incident closes and its behaviour is remembered, so that its
    /// returns are suppressed; the device's known-normal records stay as they were.
    FalsePositive,
    /// A real attack: recorded on the incident; what the daemon remembered of its
    /// behaviour (learned, or dismissed before) is forgotten.
    Confirmed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_names_its_type_and_decodes_to_it() {
        let verdict = FeedbackMessage::Verdict(Feedback {
            device: "cam".into(),
            incident_id: "i1".into(),
            verdict: Verdict::FalsePositive,
            by: "ana".into(),
            note: String::new(),
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
