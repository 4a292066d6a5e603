//! What the sampler is asked for, and the handle the server and the `/metrics` endpoint ask it
//! with (the sampler owns the readings and the metrics; nobody else reads them).

use tokio::sync::{mpsc, oneshot};

use wattson_protocol::Reply;

/// What the sampler is asked for.
pub(crate) enum Ask {
    Status(oneshot::Sender<Reply>),
    Metrics(oneshot::Sender<String>),
}

/// A handle for asking the sampler for the node's status or its metrics.
#[derive(Clone)]
pub struct SamplerHandle {
    pub(crate) requests: mpsc::Sender<Ask>,
}

impl SamplerHandle {
    /// The node's GPUs as read now (or by a read that started after this call), with their
    /// jobs; `None` when too many requests are waiting.
    pub async fn status(&self) -> Option<Reply> {
        let (tx, rx) = oneshot::channel();
        self.requests.try_send(Ask::Status(tx)).ok()?;
        rx.await.ok()
    }

    /// The metrics in Prometheus' text format, as of the last sample.
    pub async fn metrics(&self) -> Option<String> {
        let (tx, rx) = oneshot::channel();
        self.requests.try_send(Ask::Metrics(tx)).ok()?;
        rx.await.ok()
    }
}
