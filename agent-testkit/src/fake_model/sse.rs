//! Server-sent-event frames and the task that writes them to a response body.

use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::plan::StreamEnd;

/// Frames buffered between the writer task and the HTTP connection. When full, the writer
/// waits for the client to read (a slow client slows the script down, nothing is dropped).
const FRAME_CHANNEL_BOUND: usize = 16;

/// Interval of the `: keepalive` comments of a stalled stream; a failed write of one of them is
/// how a hang-up is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_millis(500);

/// How long a scripted disconnect waits after the last frame reached the connection, so the
/// connection writes it before being dropped.
const DISCONNECT_GRACE: Duration = Duration::from_millis(50);

/// One SSE frame, sent after `delay`.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub(crate) delay: Duration,
    pub(crate) bytes: Bytes,
}

/// Collects the frames of one answer.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    frames: Vec<Frame>,
}

impl Frames {
    /// `event: <name>\ndata: <json>\n\n`.
    pub(crate) fn event(&mut self, name: &str, data: &Value) {
        self.push(Duration::ZERO, format!("event: {name}\ndata: {data}\n\n"));
    }

    /// `event: <name>\ndata: <json>\n\n` sent after `delay`.
    pub(crate) fn event_after(&mut self, delay: Duration, name: &str, data: &Value) {
        self.push(delay, format!("event: {name}\ndata: {data}\n\n"));
    }

    /// `data: <text>\n\n` sent after `delay`.
    pub(crate) fn data_after(&mut self, delay: Duration, data: &str) {
        self.push(delay, format!("data: {data}\n\n"));
    }

    fn push(&mut self, delay: Duration, text: String) {
        self.frames.push(Frame { delay, bytes: Bytes::from(text) });
    }

    pub(crate) fn into_vec(self) -> Vec<Frame> {
        self.frames
    }
}

/// Starts a task that writes `frames` with their delays, then ends as `end` says; returns the
/// response body. `on_hangup` runs when the client hangs up before the script is done.
pub(crate) fn spawn_writer(frames: Vec<Frame>, end: StreamEnd, on_hangup: impl FnOnce() + Send + 'static) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(FRAME_CHANNEL_BOUND);
    tokio::spawn(async move {
        for frame in frames {
            if !frame.delay.is_zero() {
                tokio::time::sleep(frame.delay).await;
            }
            if tx.send(Ok(frame.bytes)).await.is_err() {
                return on_hangup();
            }
        }
        match end {
            StreamEnd::Complete => {}
            StreamEnd::Disconnect => {
                // All permits back means the connection has taken every frame.
                if tx.reserve_many(FRAME_CHANNEL_BOUND).await.is_err() {
                    return on_hangup();
                }
                tokio::time::sleep(DISCONNECT_GRACE).await;
                let abort = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "scripted disconnect");
                let _ = tx.send(Err(abort)).await;
            }
            StreamEnd::Stall => loop {
                tokio::time::sleep(KEEPALIVE_INTERVAL).await;
                if tx.send(Ok(Bytes::from_static(b": keepalive\n\n"))).await.is_err() {
                    return on_hangup();
                }
            },
        }
    });
    Body::from_stream(ReceiverStream::new(rx))
}
