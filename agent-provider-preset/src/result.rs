//! The result payload of a preset turn: `{status, reason, text, session_id, turn, exit_code}`.

use agent_core::{TurnOutcome, TurnResult, TurnStatus};
use serde::{Deserialize, Serialize};

/// What a preset turn produced, in the AGENT_SESSION payload's shape. Every preset turn's
/// terminal event carries it as its result's `details` (all six fields, `null` when unknown):
///
/// ```json
/// {"status": "completed", "reason": null, "text": "Done.", "session_id": "6dc5…", "turn": 2, "exit_code": 0}
/// ```
///
/// ```
/// # fn example(outcome: agent_core::TurnOutcome) {
/// use agent_provider_preset::PresetResult;
///
/// let payload = PresetResult::from_outcome(&outcome).expect("a preset turn");
/// println!("{:?} in turn {} of {:?}", payload.status, payload.turn, payload.session_id);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PresetResult {
    /// How the turn ended.
    pub status: TurnStatus,
    /// Why it did not complete.
    pub reason: Option<String>,
    /// The result text the preset's matchers found (kept for a failed turn that had one).
    pub text: Option<String>,
    /// The CLI's session ID of the conversation, when known.
    pub session_id: Option<String>,
    /// The turn's number in its conversation key, from 1: the processes started for the key,
    /// this one included (a turn that never started one reports the next number without taking
    /// it). Counted by this provider: a conversation resumed from a store after a restart counts
    /// on from 1.
    pub turn: u64,
    /// The process's exit code (`None` when a signal ended it or it never started).
    pub exit_code: Option<i32>,
}

impl PresetResult {
    /// The payload of a preset turn's result (`None` for another provider's).
    pub fn from_result(result: &TurnResult) -> Option<PresetResult> {
        serde_json::from_value(result.details.clone()?).ok()
    }

    /// The payload of a preset turn's outcome (`await_turn`, or the outcome inside
    /// `AwaitError::Ended`).
    pub fn from_outcome(outcome: &TurnOutcome) -> Option<PresetResult> {
        PresetResult::from_result(&outcome.result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_has_six_fields_and_reads_back() {
        let payload = PresetResult {
            status: TurnStatus::Failed,
            reason: Some("x".into()),
            text: None,
            session_id: Some("s".into()),
            turn: 2,
            exit_code: Some(1),
        };
        let json = serde_json::to_value(&payload).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"status": "failed", "reason": "x", "text": null, "session_id": "s", "turn": 2, "exit_code": 1})
        );
        let mut result = TurnResult::default();
        result.details = Some(json);
        assert_eq!(PresetResult::from_result(&result), Some(payload));
        assert_eq!(PresetResult::from_result(&TurnResult::default()), None);
    }
}
