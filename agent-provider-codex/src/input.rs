//! Turn input → codex `UserInput` items.

use agent_core::{Error, InputItem, Result, Skill, TurnInput};
use serde_json::{Value, json};

use agent_provider_kit::skills::skill_file;

/// The `input` of `turn/start` or `turn/steer`.
///
/// With `session_skills`, every configured skill is sent as a `skill` item ahead of the input
/// (codex loads skills per turn); an [`InputItem::Skill`] must name a configured skill.
pub(crate) fn items(input: &TurnInput, skills: &[Skill], session_skills: bool) -> Result<Vec<Value>> {
    let explicit: Vec<Value> = match input {
        TurnInput::Text(text) => vec![json!({ "type": "text", "text": text })],
        TurnInput::Items(items) => items.iter().map(|item| item_json(item, skills)).collect::<Result<_>>()?,
    };
    if !session_skills {
        return Ok(explicit);
    }
    let mentioned = |skill: &Skill| matches!(input, TurnInput::Items(items) if items.iter().any(|i| matches!(i, InputItem::Skill { name } if *name == skill.name)));
    let mut all: Vec<Value> = skills.iter().filter(|s| !mentioned(s)).map(skill_json).collect();
    all.extend(explicit);
    Ok(all)
}

fn skill_json(skill: &Skill) -> Value {
    json!({ "type": "skill", "name": skill.name, "path": skill_file(&skill.path) })
}

fn item_json(item: &InputItem, skills: &[Skill]) -> Result<Value> {
    Ok(match item {
        InputItem::Text { text } => json!({ "type": "text", "text": text }),
        InputItem::LocalImage { path } => {
            // Codex reads it where it runs, relative to nothing the caller chose: a relative
            // path would be dropped with a note to the model, not an error.
            let refused = |why: &str| Error::InvalidOption {
                option: "input",
                reason: format!("a local image needs an absolute UTF-8 path; `{}` {why}", path.display()),
            };
            let Some(text) = path.to_str() else { return Err(refused("is not UTF-8")) };
            if !path.is_absolute() {
                return Err(refused("is relative"));
            }
            json!({ "type": "localImage", "path": text })
        }
        InputItem::ImageUrl { url } => json!({ "type": "image", "url": url }),
        InputItem::Skill { name } => match skills.iter().find(|s| &s.name == name) {
            Some(skill) => skill_json(skill),
            None => {
                return Err(Error::InvalidOption {
                    option: "input",
                    reason: format!("skill `{name}` is not configured for this session (SessionOptions::skill)"),
                });
            }
        },
        _ => {
            return Err(Error::InvalidOption {
                option: "input",
                reason: "codex cannot take this kind of input item".into(),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skills() -> Vec<Skill> {
        vec![Skill::new("release", "/s/release/SKILL.md"), Skill::new("lint", "/s/lint")]
    }

    #[test]
    fn text_turns_carry_the_session_skills_first() {
        assert_eq!(
            items(&TurnInput::from("hi"), &skills(), true).unwrap(),
            vec![
                json!({"type": "skill", "name": "release", "path": "/s/release/SKILL.md"}),
                json!({"type": "skill", "name": "lint", "path": "/s/lint/SKILL.md"}),
                json!({"type": "text", "text": "hi"}),
            ]
        );
        assert_eq!(items(&TurnInput::from("hi"), &[], true).unwrap(), vec![json!({"type": "text", "text": "hi"})]);
    }

    #[test]
    fn structured_input_maps_each_item() {
        let input = TurnInput::Items(vec![
            InputItem::Skill { name: "lint".into() },
            InputItem::Text { text: "look".into() },
            InputItem::LocalImage { path: "/tmp/a.png".into() },
            InputItem::ImageUrl { url: "data:image/png;base64,AA".into() },
        ]);
        assert_eq!(
            items(&input, &skills(), true).unwrap(),
            vec![
                json!({"type": "skill", "name": "release", "path": "/s/release/SKILL.md"}),
                json!({"type": "skill", "name": "lint", "path": "/s/lint/SKILL.md"}),
                json!({"type": "text", "text": "look"}),
                json!({"type": "localImage", "path": "/tmp/a.png"}),
                json!({"type": "image", "url": "data:image/png;base64,AA"}),
            ]
        );
    }

    /// Codex would drop an image it cannot find with a note to the model; a relative path (or
    /// one JSON cannot carry) is refused before anything is sent.
    #[test]
    fn a_local_image_needs_an_absolute_utf8_path() {
        use std::os::unix::ffi::OsStrExt;
        let non_utf8 = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/\xff.png"));
        for (path, why) in [(std::path::PathBuf::from("shot.png"), "is relative"), (non_utf8, "is not UTF-8")] {
            let input = TurnInput::Items(vec![InputItem::LocalImage { path }]);
            match items(&input, &[], false) {
                Err(Error::InvalidOption { option: "input", reason }) => assert!(reason.ends_with(why), "{reason}"),
                other => panic!("expected InvalidOption, got {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_skills_are_refused_before_sending() {
        let input = TurnInput::Items(vec![InputItem::Skill { name: "nope".into() }]);
        assert!(matches!(items(&input, &skills(), false), Err(Error::InvalidOption { option: "input", .. })));
    }
}
