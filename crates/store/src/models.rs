//! What the DVFS models learn and do: each workload's measurements by owner, GPU type, tag,
//! unit of work and knob, and each job's DVFS record. Measurements accumulate across runs; the model is
//! refitted from them (fitting is cheap), so the store keeps data, not coefficients.

use rusqlite::{OptionalExtension, Row, params};

use super::{Store, StoreError, running_id};
use wattson_engine::{Knob, Measurements};
use wattson_types::job::{JobDvfs, JobKey, Progress};
use wattson_types::model_owner::ModelOwner;

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

const MODEL_COLS: &str = "owner, gpu_type, tag, progress, knob, samples, settings, updated_ns";

/// The row of one workload: its key (owner, GPU type, tag, progress, knob) as stored.
const MODEL_KEY: &str = "owner = ?1 AND gpu_type = ?2 AND tag = ?3 AND progress = ?4 AND knob = ?5";

type RawModel = (String, String, String, String, String, String, String, i64);

fn raw(r: &Row<'_>) -> rusqlite::Result<RawModel> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
}

fn decode(row: RawModel) -> Result<Measurements, StoreError> {
    let (owner, gpu_type, tag, progress, knob, samples, settings, updated_ns) = row;
    let what = format!("model {tag:?} on {gpu_type:?}");
    let owner: ModelOwner = owner.parse().map_err(|e| corrupt(&what, e))?;
    let progress: Progress =
        progress.parse().map_err(|_| corrupt(&what, format!("unknown progress {progress:?}")))?;
    let knob: Knob = knob.parse().map_err(|_| corrupt(&what, format!("unknown knob {knob:?}")))?;
    Ok(Measurements {
        samples: serde_json::from_str(&samples).map_err(|e| corrupt(&what, e))?,
        settings: serde_json::from_str(&settings).map_err(|e| corrupt(&what, e))?,
        owner,
        gpu_type,
        tag,
        progress,
        knob,
        updated_ns,
    })
}

fn save(conn: &rusqlite::Connection, model: &Measurements) -> Result<(), StoreError> {
    let samples = serde_json::to_string(&model.samples).map_err(|e| corrupt("samples", e))?;
    let settings = serde_json::to_string(&model.settings).map_err(|e| corrupt("settings", e))?;
    conn.execute(
        &format!("INSERT OR REPLACE INTO models ({MODEL_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        params![
            model.owner.to_string(),
            model.gpu_type,
            model.tag,
            model.progress.as_str(),
            model.knob.as_str(),
            samples,
            settings,
            model.updated_ns
        ],
    )?;
    Ok(())
}

impl Store {
    /// `owner`'s measurements of `tag` on `gpu_type` counted in `progress` units on `knob`,
    /// if any.
    pub fn model(
        &self,
        owner: &ModelOwner,
        gpu_type: &str,
        tag: &str,
        progress: Progress,
        knob: Knob,
    ) -> Result<Option<Measurements>, StoreError> {
        let sql = format!("SELECT {MODEL_COLS} FROM models WHERE {MODEL_KEY}");
        let row = self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![owner.to_string(), gpu_type, tag, progress.as_str(), knob.as_str()], raw)
            .optional()?;
        row.map(decode).transpose()
    }

    /// Every stored workload, by owner, GPU type, tag, unit and knob.
    pub fn models(&self) -> Result<Vec<Measurements>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {MODEL_COLS} FROM models ORDER BY owner, gpu_type, tag, progress, knob"
        ))?;
        let rows = stmt.query_map([], raw)?.collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter().map(decode).collect()
    }

    /// Replaces the measurements of a workload, durably.
    pub fn save_model(&mut self, model: &Measurements) -> Result<(), StoreError> {
        save(&self.conn, model)
    }

    /// Drops `owner`'s measurements of `tag` on `gpu_type` (every unit and knob), durably: they are
    /// kept as a drop mark (no samples) dated `now_ns`, so a merge carries the drop to the
    /// other nodes instead of bringing the measurements back.
    pub fn drop_models(
        &mut self,
        owner: &ModelOwner,
        gpu_type: &str,
        tag: &str,
        now_ns: i64,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE models SET samples = '[]', updated_ns = ?4 WHERE owner = ?1 AND gpu_type = ?2 AND tag = ?3",
            params![owner.to_string(), gpu_type, tag, now_ns],
        )?;
        Ok(())
    }

    /// Takes each of `incoming` (the controller's merge of every node's measurements) where it
    /// is newer than what is stored ([`wattson_engine::newest`]), in one transaction; returns
    /// how many were taken.
    pub fn merge_models(&mut self, incoming: &[Measurements]) -> Result<usize, StoreError> {
        let tx = self.conn.transaction()?;
        let mut taken = 0;
        for m in incoming {
            let sql = format!("SELECT {MODEL_COLS} FROM models WHERE {MODEL_KEY}");
            let key = params![m.owner.to_string(), m.gpu_type, m.tag, m.progress.as_str(), m.knob.as_str()];
            let local = tx.prepare_cached(&sql)?.query_row(key, raw).optional()?.map(decode).transpose()?;
            let newer = match local {
                None => true,
                Some(local) => wattson_engine::newest([local.clone(), m.clone()]) != [local],
            };
            if newer {
                save(&tx, m)?;
                taken += 1;
            }
        }
        tx.commit()?;
        Ok(taken)
    }

    /// Records what the models did for the RUNNING job `key`, durably.
    pub fn set_dvfs(&mut self, key: &JobKey, dvfs: &JobDvfs) -> Result<(), StoreError> {
        let text = serde_json::to_string(dvfs).map_err(|e| corrupt("dvfs", e))?;
        let id = running_id(&self.conn, key)?.ok_or_else(|| StoreError::NotRunning(key.clone()))?;
        self.conn.execute("UPDATE jobs SET dvfs = ?1 WHERE id = ?2", params![text, id])?;
        Ok(())
    }
}
