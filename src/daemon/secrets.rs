//! librdkafka secrets kept out of configuration files.
//!
//! `METAPU__KAFKA__OPTIONS__…` cannot name a dotted librdkafka key (environment names
//! hold no dots), and a password in `/etc/metapu/metapu.toml` is a password in a file.
//! Each secret-bearing librdkafka property can instead come from
//! - a systemd credential of the same name (`LoadCredential=sasl.password:/root/kafka-password`:
//!   systemd hands the service a private copy under `$CREDENTIALS_DIRECTORY`), or
//! - the environment, `METAPU_KAFKA_` + the key in capitals with `_` for `.`
//!   (`METAPU_KAFKA_SASL_PASSWORD`; `Environment=` or an `EnvironmentFile=` readable by root only).
//!
//! Either overrides `[kafka.options]`; both at once, an unknown name or an empty value is an
//! error, so a typo never leaves the daemon silently without its password.

use std::collections::BTreeMap;
use std::path::Path;

/// The librdkafka properties that hold secrets.
pub const SECRET_OPTIONS: &[&str] = &[
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
];

const ENV_PREFIX: &str = "METAPU_KAFKA_";

/// `sasl.password` → `METAPU_KAFKA_SASL_PASSWORD`.
pub fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.replace('.', "_").to_ascii_uppercase())
}

/// Where a secret came from, for the start-up log (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Credential(String),
    Environment(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Credential(name) => write!(f, "systemd credential {name}"),
            Origin::Environment(name) => write!(f, "environment variable {name}"),
        }
    }
}

/// A secret that cannot be read or is given wrong: the reason, for `kafka.options`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecretError(pub String);

/// Fill `options` from the credentials folder and the environment (`vars`: every
/// variable of the process). Returns which option came from where.
pub fn apply(
    options: &mut BTreeMap<String, String>,
    credentials: Option<&Path>,
    vars: &[(String, String)],
) -> Result<Vec<(String, Origin)>, SecretError> {
    let invalid = SecretError;
    let known_env: Vec<String> = SECRET_OPTIONS.iter().map(|k| env_name(k)).collect();
    if let Some((name, _)) = vars.iter().find(|(n, _)| n.starts_with(ENV_PREFIX) && !known_env.contains(n)) {
        return Err(invalid(format!(
            "{name} is not a secret metapu reads (it reads {}); other librdkafka properties go in [kafka.options]",
            known_env.join(", ")
        )));
    }
    let mut credential_names = Vec::new();
    if let Some(dir) = credentials {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| invalid(format!("cannot read the credentials folder {}: {e}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| invalid(format!("cannot read {}: {e}", dir.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == super::sinks::WEBHOOK_TOKEN_CREDENTIAL {
                continue; // the webhook sink's, read there
            }
            if !SECRET_OPTIONS.contains(&name.as_str()) {
                return Err(invalid(format!(
                    "credential {name} is not a secret metapu reads (credentials are named after the \
                     librdkafka property: {})",
                    SECRET_OPTIONS.join(", ")
                )));
            }
            credential_names.push(name);
        }
    }
    let mut applied = Vec::new();
    for key in SECRET_OPTIONS {
        let env = env_name(key);
        let from_env = vars.iter().find(|(n, _)| *n == env).map(|(_, v)| v.clone());
        let from_credential = match credential_names.iter().any(|n| n == key) {
            true => {
                let path = credentials.expect("names come from the folder").join(key);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| invalid(format!("cannot read credential {}: {e}", path.display())))?;
                // A file written by `echo` ends in a newline that is not part of the secret.
                Some(text.strip_suffix('\n').unwrap_or(&text).to_string())
            }
            false => None,
        };
        let (value, origin) = match (from_credential, from_env) {
            (Some(_), Some(_)) => {
                return Err(invalid(format!("{key} is given twice: by a systemd credential and by {env}")));
            }
            (Some(v), None) => (v, Origin::Credential(key.to_string())),
            (None, Some(v)) => (v, Origin::Environment(env)),
            (None, None) => continue,
        };
        if value.is_empty() {
            return Err(invalid(format!("{key} from {origin} is empty")));
        }
        options.insert(key.to_string(), value);
        applied.push((key.to_string(), origin));
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    #[test]
    fn env_names_replace_dots() {
        assert_eq!(env_name("sasl.password"), "METAPU_KAFKA_SASL_PASSWORD");
        assert_eq!(env_name("sasl.oauthbearer.client.secret"), "METAPU_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET");
    }

    #[test]
    fn environment_sets_the_dotted_option_over_the_file() {
        let mut options = BTreeMap::from([("sasl.password".to_string(), "from-file".to_string())]);
        let applied =
            apply(&mut options, None, &vars(&[("METAPU_KAFKA_SASL_PASSWORD", "s3cret"), ("HOME", "/")]))
                .unwrap();
        assert_eq!(options["sasl.password"], "s3cret");
        assert_eq!(
            applied,
            vec![("sasl.password".into(), Origin::Environment("METAPU_KAFKA_SASL_PASSWORD".into()))]
        );
    }

    #[test]
    fn credential_files_lose_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ssl.key.password"), "pw with space\n").unwrap();
        // The webhook sink's credential sits beside them and is not a Kafka option.
        std::fs::write(dir.path().join("webhook.token"), "t\n").unwrap();
        let mut options = BTreeMap::new();
        let applied = apply(&mut options, Some(dir.path()), &[]).unwrap();
        assert_eq!(options["ssl.key.password"], "pw with space");
        assert_eq!(applied.len(), 1);
        assert_eq!(applied[0].1, Origin::Credential("ssl.key.password".into()));
    }

    #[test]
    fn mistakes_are_errors_not_silence() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sasl.password"), "a").unwrap();
        let twice =
            apply(&mut BTreeMap::new(), Some(dir.path()), &vars(&[("METAPU_KAFKA_SASL_PASSWORD", "b")]));
        assert!(twice.unwrap_err().to_string().contains("given twice"));

        let typo = apply(&mut BTreeMap::new(), None, &vars(&[("METAPU_KAFKA_SASL_PASWORD", "b")]));
        assert!(typo.unwrap_err().to_string().contains("METAPU_KAFKA_SASL_PASWORD is not a secret"));

        let empty = apply(&mut BTreeMap::new(), None, &vars(&[("METAPU_KAFKA_SSL_KEY_PASSWORD", "")]));
        assert!(empty.unwrap_err().to_string().contains("empty"));

        std::fs::write(dir.path().join("kafka-password"), "a").unwrap();
        let unknown = apply(&mut BTreeMap::new(), Some(dir.path()), &[]);
        assert!(unknown.unwrap_err().to_string().contains("credential kafka-password"));
    }
}
