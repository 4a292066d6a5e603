//! What the DVFS models learn and do: each workload's measurements by owner, GPU type, tag
//! and unit of work, and each job's DVFS record. Measurements accumulate across runs; the model is
//! refitted from them (fitting is cheap), so the store keeps data, not coefficients.

use rusqlite::{OptionalExtension, Row, params};

use super::{Store, StoreError, running_id};
use wattson_engine::Sample;
use wattson_types::job::{JobDvfs, JobKey, Progress};
use wattson_types::owner::ModelOwner;

/// One workload's measurements on one GPU type.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredModel {
    /// Whose runs measured it; only that owner's jobs use it.
    pub owner: ModelOwner,
    /// GPU model name.
    pub gpu_type: String,
    /// Workload tag.
    pub tag: String,
    /// How work was counted (samples of different units never mix).
    pub progress: Progress,
    /// Measurements, one per (run, setting) window.
    pub samples: Vec<Sample>,
    /// Candidate settings on this GPU type (W).
    pub settings: Vec<f64>,
    /// Last update, ns since the epoch.
    pub updated_ns: i64,
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

const MODEL_COLS: &str = "owner, gpu_type, tag, progress, samples, settings, updated_ns";

type RawModel = (String, String, String, String, String, String, i64);

fn raw(r: &Row<'_>) -> rusqlite::Result<RawModel> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
}

fn decode(row: RawModel) -> Result<StoredModel, StoreError> {
    let (owner, gpu_type, tag, progress, samples, settings, updated_ns) = row;
    let what = format!("model {tag:?} on {gpu_type:?}");
    let owner: ModelOwner = owner.parse().map_err(|e| corrupt(&what, e))?;
    let progress: Progress =
        progress.parse().map_err(|_| corrupt(&what, format!("unknown progress {progress:?}")))?;
    Ok(StoredModel {
        samples: serde_json::from_str(&samples).map_err(|e| corrupt(&what, e))?,
        settings: serde_json::from_str(&settings).map_err(|e| corrupt(&what, e))?,
        owner,
        gpu_type,
        tag,
        progress,
        updated_ns,
    })
}

impl Store {
    /// `owner`'s measurements of `tag` on `gpu_type` counted in `progress` units, if any.
    pub fn model(
        &self,
        owner: &ModelOwner,
        gpu_type: &str,
        tag: &str,
        progress: Progress,
    ) -> Result<Option<StoredModel>, StoreError> {
        let sql = format!(
            "SELECT {MODEL_COLS} FROM models WHERE owner = ?1 AND gpu_type = ?2 AND tag = ?3 AND progress = ?4"
        );
        let row = self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![owner.to_string(), gpu_type, tag, progress.as_str()], raw)
            .optional()?;
        row.map(decode).transpose()
    }

    /// Every stored workload, by owner, GPU type, tag and unit.
    pub fn models(&self) -> Result<Vec<StoredModel>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {MODEL_COLS} FROM models ORDER BY owner, gpu_type, tag, progress"))?;
        let rows = stmt.query_map([], raw)?.collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter().map(decode).collect()
    }

    /// Replaces the measurements of a workload, durably.
    pub fn save_model(&mut self, model: &StoredModel) -> Result<(), StoreError> {
        let samples = serde_json::to_string(&model.samples).map_err(|e| corrupt("samples", e))?;
        let settings = serde_json::to_string(&model.settings).map_err(|e| corrupt("settings", e))?;
        self.conn.execute(
            "INSERT OR REPLACE INTO models (owner, gpu_type, tag, progress, samples, settings, updated_ns) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                model.owner.to_string(),
                model.gpu_type,
                model.tag,
                model.progress.as_str(),
                samples,
                settings,
                model.updated_ns
            ],
        )?;
        Ok(())
    }

    /// Drops `owner`'s measurements of `tag` on `gpu_type` (every unit), durably.
    pub fn delete_models(&mut self, owner: &ModelOwner, gpu_type: &str, tag: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM models WHERE owner = ?1 AND gpu_type = ?2 AND tag = ?3",
            params![owner.to_string(), gpu_type, tag],
        )?;
        Ok(())
    }

    /// Records what the models did for the RUNNING job `key`, durably.
    pub fn set_dvfs(&mut self, key: &JobKey, dvfs: &JobDvfs) -> Result<(), StoreError> {
        let text = serde_json::to_string(dvfs).map_err(|e| corrupt("dvfs", e))?;
        let id = running_id(&self.conn, key)?.ok_or_else(|| StoreError::NotRunning(key.clone()))?;
        self.conn.execute("UPDATE jobs SET dvfs = ?1 WHERE id = ?2", params![text, id])?;
        Ok(())
    }
}
