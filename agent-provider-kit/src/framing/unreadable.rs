//! How many of a CLI's unreadable stdout lines get a warning of their own.

use agent_core::TurnId;

/// Unreadable lines of a turn (or of the time between turns) that each get a warning.
pub const UNREADABLE_REPORTED: u64 = 32;

/// Counts a CLI's unreadable stdout lines (not UTF-8, not JSON, over the line cap) and decides
/// which get a warning: the first [`UNREADABLE_REPORTED`] of each turn (and of the time between
/// turns), then the line at each doubling of the count, its warning saying how many there were.
/// A CLI that writes garbage without end thus makes a few dozen warnings, not one per line —
/// a stream of garbage is bounded in the store like any other, and never drowns the turn's
/// events.
///
/// ```
/// use agent_provider_kit::framing::{UNREADABLE_REPORTED, Unreadable};
///
/// let mut unreadable = Unreadable::default();
/// let warned = (0..1000).filter_map(|_| unreadable.warning(None, || "garbage".to_owned())).count();
/// assert_eq!(warned as u64, UNREADABLE_REPORTED + 4); // and at 64, 128, 256 and 512 lines
/// ```
#[derive(Debug, Default)]
pub struct Unreadable {
    /// The turn counted for (`None` between turns).
    turn: Option<TurnId>,
    /// Unreadable lines seen in it.
    seen: u64,
}

impl Unreadable {
    /// Counts one unreadable line of `turn` and returns its warning (`message()`; the last of
    /// the first [`UNREADABLE_REPORTED`] says that only doublings follow, and those give the
    /// count) when it gets one.
    #[must_use]
    pub fn warning(&mut self, turn: Option<&TurnId>, message: impl FnOnce() -> String) -> Option<String> {
        if self.turn.as_ref() != turn {
            self.turn = turn.cloned();
            self.seen = 0;
        }
        self.seen += 1;
        let seen = self.seen;
        if seen < UNREADABLE_REPORTED {
            return Some(message());
        }
        if seen == UNREADABLE_REPORTED {
            return Some(format!(
                "{} ({seen} unreadable stdout lines so far; from here on only each doubling of the count is reported)",
                message()
            ));
        }
        seen.is_power_of_two().then(|| {
            format!(
                "{} ({seen} unreadable stdout lines so far; past the first {UNREADABLE_REPORTED}, only each doubling of \
                 the count is reported)",
                message(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_lines_and_each_doubling_are_reported_per_turn() {
        let mut unreadable = Unreadable::default();
        let (one, two) = (TurnId::new("t1").expect("id"), TurnId::new("t2").expect("id"));
        let reported: Vec<u64> =
            (1..=300).filter(|_| unreadable.warning(Some(&one), || "x".into()).is_some()).collect();
        let expected: Vec<u64> = (1..=UNREADABLE_REPORTED).chain([64, 128, 256]).collect();
        assert_eq!(reported, expected);
        let mut fresh = Unreadable::default();
        let last_plain = (0..UNREADABLE_REPORTED).filter_map(|_| fresh.warning(None, || "w".into())).last();
        assert_eq!(
            last_plain.as_deref(),
            Some("w (32 unreadable stdout lines so far; from here on only each doubling of the count is reported)")
        );
        let counted: Vec<String> = (301..=512).filter_map(|_| unreadable.warning(Some(&one), || "x".into())).collect();
        assert_eq!(
            counted,
            ["x (512 unreadable stdout lines so far; past the first 32, only each doubling of the count is reported)"]
        );
        // A new turn starts its own count; so does the time between turns.
        assert_eq!(unreadable.warning(Some(&two), || "y".into()).as_deref(), Some("y"));
        let between: Vec<String> = (0..64).filter_map(|_| unreadable.warning(None, || "z".into())).collect();
        assert_eq!(between.len() as u64, UNREADABLE_REPORTED + 1);
        assert_eq!(
            between.last().map(String::as_str),
            Some(
                "z (64 unreadable stdout lines so far; past the first 32, only each doubling of the count is reported)"
            )
        );
    }
}
