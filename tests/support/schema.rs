//! Every incident event the tests read is checked against the shipped JSON Schemas
//! (docs/schema/): as it is on the incidents topic, and as the sinks' ECS document.

use std::sync::OnceLock;

use metapu::daemon::sinks::ecs;
use metapu::monitor::output::IncidentEvent;

fn validator(file: &str) -> jsonschema::Validator {
    let path = super::repo().join("docs/schema").join(file);
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn check(validator: &jsonschema::Validator, what: &str, value: &serde_json::Value) {
    let errors: Vec<String> =
        validator.iter_errors(value).map(|e| format!("{e} at {}", e.instance_path)).collect();
    assert!(errors.is_empty(), "{what} breaks its schema: {errors:?}\n{value}");
}

/// An incidents-topic message against incident-event.schema.json, and its ECS document
/// against incident-event.ecs.schema.json.
pub fn check_incident_event(bytes: &[u8]) {
    static METAPU: OnceLock<jsonschema::Validator> = OnceLock::new();
    static ECS: OnceLock<jsonschema::Validator> = OnceLock::new();
    let value: serde_json::Value = serde_json::from_slice(bytes).expect("incident events are JSON");
    check(METAPU.get_or_init(|| validator("incident-event.schema.json")), "an incident event", &value);
    let event: IncidentEvent = serde_json::from_value(value).expect("an incident event reads back");
    let doc = ecs::document(&event);
    check(ECS.get_or_init(|| validator("incident-event.ecs.schema.json")), "an ECS document", &doc);
    check(METAPU.get_or_init(|| validator("incident-event.schema.json")), "its metapu part", &doc["metapu"]);
}
