//! `[mail]`: `wattson-mail`, Slurm's `MailProg` that adds a job's energy summary to the mail
//! Slurm sends when the job ends.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::duration_in;

/// `[mail]` section.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MailConfig {
    /// The mailer `wattson-mail` hands each mail to, with Slurm's arguments after these: an
    /// argv, the program an absolute path (Slurm's own default `MailProg`).
    #[serde(deserialize_with = "program")]
    pub program: Vec<String>,
    /// How long an end-of-job mail waits for the job's summary in Slurm's accounting (written
    /// by `wattson ctld`) before it is sent without it.
    #[serde(deserialize_with = "wait")]
    #[schemars(with = "String", extend("x-allowed" = "0s to 1h"))]
    pub wait: Duration,
}

impl Default for MailConfig {
    fn default() -> Self {
        MailConfig { program: vec!["/usr/bin/mail".to_string()], wait: Duration::from_secs(300) }
    }
}

fn wait<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::ZERO, Duration::from_secs(3600))
}
fn program<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(d)?;
    match argv.first() {
        None => Err(serde::de::Error::custom("the mailer cannot be empty")),
        Some(p) if !p.starts_with('/') => {
            Err(serde::de::Error::custom(format!("{p:?}: the mailer must be an absolute path")))
        }
        Some(_) => Ok(argv),
    }
}
