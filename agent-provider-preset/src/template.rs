//! The argv template of a preset: literal arguments with placeholders, groups added only when a
//! condition holds, and the place of the session's extra arguments.
//!
//! Every element of the template becomes exactly one argv element: a placeholder is replaced by
//! its value as it is (spaces, quotes, newlines included), never split and never seen by a
//! shell. `{{` and `}}` stand for literal braces.
//!
//! ```json
//! "args": [
//!     "exec", "--json",
//!     {"if": "model", "then": ["--model", "{model}"]},
//!     {"if": "resume", "then": ["resume", "{session_id}"]},
//!     {"insert": "extra_args"},
//!     "--", "{prompt}"
//! ]
//! ```

use serde_json::Value;

use crate::error::Problem;

/// A value the template can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placeholder {
    /// The turn's prompt text.
    Prompt,
    /// The model (`SessionOptions::model`, or the turn's).
    Model,
    /// `PresetOptions::max_turns`.
    MaxTurns,
    /// `SessionOptions::system_prompt`.
    SystemPrompt,
    /// The path of a file holding `SessionOptions::system_prompt`.
    SystemPromptFile,
    /// The CLI's session ID of the conversation being continued.
    SessionId,
    /// The session's working directory.
    Cwd,
}

impl Placeholder {
    /// Every placeholder, by the name written between braces.
    pub(crate) const ALL: [(&'static str, Placeholder); 7] = [
        ("prompt", Placeholder::Prompt),
        ("model", Placeholder::Model),
        ("max_turns", Placeholder::MaxTurns),
        ("system_prompt", Placeholder::SystemPrompt),
        ("system_prompt_file", Placeholder::SystemPromptFile),
        ("session_id", Placeholder::SessionId),
        ("cwd", Placeholder::Cwd),
    ];

    pub(crate) fn name(self) -> &'static str {
        Placeholder::ALL.iter().find(|(_, p)| *p == self).map_or("", |(name, _)| name)
    }

    /// The condition that must hold for the value to exist (`None`: it always does).
    fn needs(self) -> Option<Condition> {
        match self {
            Placeholder::Model => Some(Condition::Model),
            Placeholder::MaxTurns => Some(Condition::MaxTurns),
            Placeholder::SystemPrompt | Placeholder::SystemPromptFile => Some(Condition::SystemPrompt),
            Placeholder::SessionId => Some(Condition::Resume),
            Placeholder::Prompt | Placeholder::Cwd => None,
        }
    }
}

/// What a group's `if` tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Condition {
    /// A model is set.
    Model,
    /// `max_turns` is set.
    MaxTurns,
    /// A system prompt is set.
    SystemPrompt,
    /// The turn continues an earlier conversation (its CLI session ID is known).
    Resume,
    /// Approvals are asked through the preset's approval conversation.
    Approvals,
}

impl Condition {
    const ALL: [(&'static str, Condition); 5] = [
        ("model", Condition::Model),
        ("max_turns", Condition::MaxTurns),
        ("system_prompt", Condition::SystemPrompt),
        ("resume", Condition::Resume),
        ("approvals", Condition::Approvals),
    ];
}

/// A group's `if`: a condition, or its negation (`"!approvals"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Test {
    pub(crate) condition: Condition,
    pub(crate) negated: bool,
}

/// One piece of an argument.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Value(Placeholder),
}

/// One argument: literal text and placeholders, rendered as one argv element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Arg(Vec<Piece>);

impl Arg {
    fn placeholders(&self) -> impl Iterator<Item = Placeholder> + '_ {
        self.0.iter().filter_map(|p| match p {
            Piece::Value(v) => Some(*v),
            Piece::Text(_) => None,
        })
    }

    fn render(&self, values: &Values<'_>) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Value(placeholder) => out.push_str(values.get(*placeholder).unwrap_or_default()),
            }
        }
        out
    }
}

/// One element of the template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Element {
    Arg(Arg),
    Group { test: Test, args: Vec<Arg> },
    ExtraArgs,
}

/// A parsed, checked argv template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Template {
    elements: Vec<Element>,
}

/// What a template is rendered with.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Values<'a> {
    pub(crate) prompt: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) max_turns: Option<&'a str>,
    pub(crate) system_prompt: Option<&'a str>,
    pub(crate) system_prompt_file: Option<&'a str>,
    pub(crate) session_id: Option<&'a str>,
    pub(crate) cwd: &'a str,
    pub(crate) approvals: bool,
    pub(crate) extra_args: &'a [String],
}

impl Values<'_> {
    fn get(&self, placeholder: Placeholder) -> Option<&str> {
        match placeholder {
            Placeholder::Prompt => Some(self.prompt),
            Placeholder::Model => self.model,
            Placeholder::MaxTurns => self.max_turns,
            Placeholder::SystemPrompt => self.system_prompt,
            Placeholder::SystemPromptFile => self.system_prompt_file,
            Placeholder::SessionId => self.session_id,
            Placeholder::Cwd => Some(self.cwd),
        }
    }

    fn holds(&self, test: Test) -> bool {
        let holds = match test.condition {
            Condition::Model => self.model.is_some(),
            Condition::MaxTurns => self.max_turns.is_some(),
            Condition::SystemPrompt => self.system_prompt.is_some(),
            Condition::Resume => self.session_id.is_some(),
            Condition::Approvals => self.approvals,
        };
        holds != test.negated
    }
}

/// Parses one argument's text into pieces; `path` names it in errors.
fn parse_arg(text: &str, path: &str) -> Result<Arg, Problem> {
    if text.contains('\0') {
        // No argv element can carry one: every turn would fail to start.
        return Err(Problem::new(path, "holds a NUL character, which no command-line argument can carry"));
    }
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => {
                            return Err(Problem::new(path, "a `{` is not closed (write `{{` for a brace)"));
                        }
                    }
                }
                let Some((_, placeholder)) = Placeholder::ALL.iter().find(|(n, _)| *n == name) else {
                    let known: Vec<String> = Placeholder::ALL.iter().map(|(n, _)| format!("{{{n}}}")).collect();
                    return Err(Problem::new(path, format!("unknown placeholder (known: {})", known.join(", "))));
                };
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Value(*placeholder));
            }
            '}' => return Err(Problem::new(path, "a lone `}` (write `}}` for a brace)")),
            c => literal.push(c),
        }
    }
    if !literal.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(Arg(pieces))
}

fn parse_test(text: &str, path: &str) -> Result<Test, Problem> {
    let (negated, name) = match text.strip_prefix('!') {
        Some(name) => (true, name),
        None => (false, text),
    };
    let Some((_, condition)) = Condition::ALL.iter().find(|(n, _)| *n == name) else {
        let known: Vec<&str> = Condition::ALL.iter().map(|(n, _)| *n).collect();
        return Err(Problem::new(
            path,
            format!("unknown condition (known: {}, each optionally negated with `!`)", known.join(", ")),
        ));
    };
    Ok(Test { condition: *condition, negated })
}

impl Template {
    /// Parses the `args` array (`path` is its field path, e.g. `args`).
    pub(crate) fn parse(args: &Value, path: &str) -> Result<Template, Problem> {
        let Value::Array(items) = args else {
            return Err(Problem::new(path, "expected an array of arguments"));
        };
        let mut elements = Vec::new();
        let mut extra_args = false;
        for (index, item) in items.iter().enumerate() {
            let at = format!("{path}[{index}]");
            match item {
                Value::String(text) => elements.push(Element::Arg(parse_arg(text, &at)?)),
                Value::Object(map) if map.contains_key("insert") => {
                    if map.len() != 1 || map["insert"] != "extra_args" {
                        return Err(Problem::new(at, "an insertion is exactly `{\"insert\": \"extra_args\"}`"));
                    }
                    if extra_args {
                        return Err(Problem::new(at, "`extra_args` is inserted once"));
                    }
                    extra_args = true;
                    elements.push(Element::ExtraArgs);
                }
                Value::Object(map) => {
                    if let Some(unknown) = map.keys().find(|k| *k != "if" && *k != "then") {
                        return Err(Problem::new(
                            format!("{at}.{unknown}"),
                            "unknown field (a group has `if` and `then`)",
                        ));
                    }
                    let test = match map.get("if") {
                        Some(Value::String(text)) => parse_test(text, &format!("{at}.if"))?,
                        Some(_) => return Err(Problem::new(format!("{at}.if"), "expected a condition name")),
                        None => return Err(Problem::new(format!("{at}.if"), "missing field (the group's condition)")),
                    };
                    let then = match map.get("then") {
                        Some(Value::Array(then)) => then,
                        Some(_) => return Err(Problem::new(format!("{at}.then"), "expected an array of strings")),
                        None => {
                            return Err(Problem::new(format!("{at}.then"), "missing field (the group's arguments)"));
                        }
                    };
                    let mut args = Vec::new();
                    for (n, arg) in then.iter().enumerate() {
                        let arg_path = format!("{at}.then[{n}]");
                        let Value::String(text) = arg else {
                            return Err(Problem::new(arg_path, "expected a string (groups do not nest)"));
                        };
                        let arg = parse_arg(text, &arg_path)?;
                        for placeholder in arg.placeholders() {
                            if let Some(needed) = placeholder.needs()
                                && (test.condition != needed || test.negated)
                            {
                                return Err(Problem::new(
                                    arg_path,
                                    format!(
                                        "`{{{}}}` may be unset here: use it inside {{\"if\": \"{}\", …}}",
                                        placeholder.name(),
                                        condition_name(needed)
                                    ),
                                ));
                            }
                        }
                        args.push(arg);
                    }
                    elements.push(Element::Group { test, args });
                }
                _ => return Err(Problem::new(at, "expected a string, a group {\"if\", \"then\"} or an insertion")),
            }
        }
        for (index, element) in elements.iter().enumerate() {
            if let Element::Arg(arg) = element
                && let Some(needed) = arg.placeholders().find_map(Placeholder::needs)
            {
                let name = Placeholder::ALL.iter().find(|(_, p)| p.needs() == Some(needed)).map_or("", |(n, _)| *n);
                return Err(Problem::new(
                    format!("{path}[{index}]"),
                    format!(
                        "`{{{name}}}` may be unset here: use it inside {{\"if\": \"{}\", …}}",
                        condition_name(needed)
                    ),
                ));
            }
        }
        let template = Template { elements };
        if !template.uses(Placeholder::SessionId)
            && let Some(index) = template.elements.iter().position(
                |e| matches!(e, Element::Group { test, .. } if test.condition == Condition::Resume && !test.negated),
            )
        {
            // The turn would continue whatever conversation the CLI picks, not the key's.
            return Err(Problem::new(
                format!("{path}[{index}].if"),
                "a `resume` group continues the conversation it names: pass `{session_id}` in one",
            ));
        }
        Ok(template)
    }

    /// The argv (after the program) for `values`.
    pub(crate) fn render(&self, values: &Values<'_>) -> Vec<String> {
        let mut argv = Vec::new();
        for element in &self.elements {
            match element {
                Element::Arg(arg) => argv.push(arg.render(values)),
                Element::Group { test, args } if values.holds(*test) => {
                    argv.extend(args.iter().map(|a| a.render(values)));
                }
                Element::Group { .. } => {}
                Element::ExtraArgs => argv.extend(values.extra_args.iter().cloned()),
            }
        }
        argv
    }

    /// What keeps `values` from reaching the CLI as the template means them, if anything, with
    /// the option the value came from (`input` for the prompt, `model`, `system_prompt`):
    /// - a caller's value (the prompt, the model, the system prompt) passed as an argument of
    ///   its own, before any `--`, that starts with `-` — the CLI would read it as an option
    ///   (`--dangerously-skip-permissions` for a prompt); or
    /// - an argument longer than Linux passes to a program ([`MAX_ARGUMENT`]), which would fail
    ///   every spawn of the turn.
    ///
    /// [`MAX_ARGUMENT`]: agent_provider_kit::process::MAX_ARGUMENT
    pub(crate) fn argument_problem(&self, values: &Values<'_>) -> Option<(&'static str, String)> {
        use agent_provider_kit::process::MAX_ARGUMENT;
        let option = |placeholder: Placeholder| match placeholder {
            Placeholder::Prompt => Some("input"),
            Placeholder::Model => Some("model"),
            Placeholder::SystemPrompt => Some("system_prompt"),
            _ => None,
        };
        let mut after_options = false;
        let args = self.elements.iter().flat_map(|element| match element {
            Element::Arg(arg) => std::slice::from_ref(arg),
            Element::Group { test, args } if values.holds(*test) => args.as_slice(),
            Element::Group { .. } | Element::ExtraArgs => &[],
        });
        for arg in args {
            match arg.0.as_slice() {
                [Piece::Text(text)] if text == "--" => after_options = true,
                [Piece::Value(placeholder)] if !after_options => {
                    if let Some(option) = option(*placeholder)
                        && values.get(*placeholder).is_some_and(|value| value.starts_with('-'))
                    {
                        return Some((
                            option,
                            format!(
                                "starts with `-`, and the preset passes `{{{}}}` as an argument of its own, where \
                                 the CLI would read it as an option; start it otherwise, or use a preset that \
                                 passes it after `--`, as `--flag={{{}}}` or on stdin",
                                placeholder.name(),
                                placeholder.name()
                            ),
                        ));
                    }
                }
                _ => {}
            }
            let len: usize = arg
                .0
                .iter()
                .map(|piece| match piece {
                    Piece::Text(text) => text.len(),
                    Piece::Value(placeholder) => values.get(*placeholder).map_or(0, str::len),
                })
                .sum();
            if len > MAX_ARGUMENT
                && let Some((placeholder, option)) = arg.placeholders().find_map(|p| Some((p, option(p)?)))
            {
                let instead = match placeholder {
                    Placeholder::Prompt => {
                        "a prompt this long needs a preset that sends it on stdin (`\"prompt\": \"stdin\"`)"
                    }
                    Placeholder::SystemPrompt => {
                        "a system prompt this long needs a preset that passes `{system_prompt_file}`"
                    }
                    _ => "the CLI cannot be given it",
                };
                return Some((
                    option,
                    format!(
                        "makes a command-line argument of {len} bytes, where Linux allows at most {MAX_ARGUMENT}; \
                         {instead}"
                    ),
                ));
            }
        }
        None
    }

    /// True when some argument uses `placeholder`.
    pub(crate) fn uses(&self, placeholder: Placeholder) -> bool {
        self.elements.iter().any(|element| match element {
            Element::Arg(arg) => arg.placeholders().any(|p| p == placeholder),
            Element::Group { args, .. } => args.iter().any(|a| a.placeholders().any(|p| p == placeholder)),
            Element::ExtraArgs => false,
        })
    }

    /// True when some group adds its arguments because `condition` holds (`"if": "resume"`):
    /// the template does something with it. A group that is added when it does not hold
    /// (`"if": "!resume"`) does not count: `"!resume"` alone passes no conversation to continue.
    pub(crate) fn tests(&self, condition: Condition) -> bool {
        self.elements
            .iter()
            .any(|e| matches!(e, Element::Group { test, .. } if test.condition == condition && !test.negated))
    }

    /// True when some group tests `condition`, either way (`"if": "approvals"` or
    /// `"if": "!approvals"`).
    pub(crate) fn mentions(&self, condition: Condition) -> bool {
        self.elements.iter().any(|e| matches!(e, Element::Group { test, .. } if test.condition == condition))
    }

    /// The flags the template passes a value with (`"--model", "{model}"` or
    /// `"--model={model}"`), each with the placeholder it passes: the same flag among a
    /// caller's extra arguments would give the CLI that value twice, and it takes one of them.
    pub(crate) fn value_flags(&self) -> Vec<(String, Placeholder)> {
        /// The flag `arg` passes its value with, after `before` (the argument just before it).
        fn flag(before: Option<&Arg>, arg: &Arg) -> Option<(String, Placeholder)> {
            match (before.map(|b| b.0.as_slice()), arg.0.as_slice()) {
                (_, [Piece::Text(text), Piece::Value(value), ..]) if text.starts_with('-') && text.ends_with('=') => {
                    Some((text.trim_end_matches('=').to_owned(), *value))
                }
                // `--` ends the options; it names no value.
                (Some([Piece::Text(flag)]), [Piece::Value(value), ..]) if flag.starts_with('-') && flag != "--" => {
                    Some((flag.clone(), *value))
                }
                _ => None,
            }
        }
        let mut flags = Vec::new();
        let mut before = None;
        for element in &self.elements {
            match element {
                Element::Arg(arg) => {
                    flags.extend(flag(before, arg));
                    before = Some(arg);
                }
                Element::Group { args, .. } => {
                    let mut inside = None;
                    for arg in args {
                        flags.extend(flag(inside, arg));
                        inside = Some(arg);
                    }
                    before = None;
                }
                Element::ExtraArgs => before = None,
            }
        }
        flags
    }

    /// True when the template has the `extra_args` insertion.
    pub(crate) fn takes_extra_args(&self) -> bool {
        self.elements.contains(&Element::ExtraArgs)
    }

    /// How many arguments carry `{prompt}` with approvals on or off, counting only arguments
    /// that are there whatever else is set (plain ones and `approvals` groups that hold); and
    /// whether a group with another condition carries it.
    pub(crate) fn prompt_uses(&self, approvals: bool) -> (usize, bool) {
        // Each `{prompt}`, two in one argument too.
        let carries = |arg: &Arg| arg.placeholders().filter(|p| *p == Placeholder::Prompt).count();
        let mut always = 0;
        let mut conditional = false;
        for element in &self.elements {
            match element {
                Element::Arg(arg) => always += carries(arg),
                Element::Group { test, args } if test.condition == Condition::Approvals => {
                    if approvals != test.negated {
                        always += args.iter().map(carries).sum::<usize>();
                    }
                }
                Element::Group { args, .. } => conditional |= args.iter().any(|arg| carries(arg) > 0),
                Element::ExtraArgs => {}
            }
        }
        (always, conditional)
    }
}

fn condition_name(condition: Condition) -> &'static str {
    Condition::ALL.iter().find(|(_, c)| *c == condition).map_or("", |(n, _)| n)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn refused(args: Value, path: &str, says: &str) {
        let problem = Template::parse(&args, "args").expect_err("refused");
        assert_eq!(problem.path, path, "{problem:?}");
        assert!(problem.message.contains(says), "{problem:?}");
    }

    /// A caller's value that would reach the CLI as an option, or as an argument longer than
    /// Linux passes, is found before anything runs; the same value after `--`, inside a
    /// `--flag=` argument or in a group that is not added passes.
    #[test]
    fn a_value_that_would_read_as_an_option_or_not_fit_is_found() {
        let template = Template::parse(
            &json!([
                "-p", "{prompt}",
                {"if": "model", "then": ["{model}"]},
                {"if": "system_prompt", "then": ["--system={system_prompt}"]},
            ]),
            "args",
        )
        .unwrap();
        let problem = |values: Values<'_>| template.argument_problem(&values).map(|(option, _)| option);
        assert_eq!(problem(Values { prompt: "--dangerously-skip-permissions", ..Values::default() }), Some("input"));
        assert_eq!(problem(Values { prompt: "hi", model: Some("--yolo"), ..Values::default() }), Some("model"));
        assert_eq!(problem(Values { prompt: "hi", system_prompt: Some("-x"), ..Values::default() }), None);
        assert_eq!(problem(Values { prompt: "hi", model: Some("m-1"), ..Values::default() }), None);
        let long = "p".repeat(128 << 10);
        assert_eq!(problem(Values { prompt: &long, ..Values::default() }), Some("input"));
        let long_system = Values { prompt: "hi", system_prompt: Some(&long), ..Values::default() };
        assert_eq!(problem(long_system), Some("system_prompt"));

        let after =
            Template::parse(&json!([{"if": "model", "then": ["--model={model}"]}, "--", "{prompt}"]), "args").unwrap();
        let values = Values { prompt: "--not-an-option", model: Some("-m"), ..Values::default() };
        assert_eq!(after.argument_problem(&values), None);
        // A `--` in a group counts only when the group is added.
        let grouped = Template::parse(&json!([{"if": "model", "then": ["--"]}, "{prompt}"]), "args").unwrap();
        assert!(grouped.argument_problem(&Values { prompt: "-x", ..Values::default() }).is_some());
        assert!(grouped.argument_problem(&Values { prompt: "-x", model: Some("m"), ..Values::default() }).is_none());
    }

    #[test]
    fn each_placeholder_is_one_argument_whatever_it_holds() {
        let template = Template::parse(
            &json!(["-p", "--flag={{literal}}", {"if": "model", "then": ["--model", "{model}"]}, "--", "{prompt}"]),
            "args",
        )
        .unwrap();
        let prompt = "two words; $(rm -rf /) \"quoted\"\nand a line";
        let argv = template.render(&Values { prompt, model: Some("m 1"), ..Values::default() });
        assert_eq!(argv, ["-p", "--flag={literal}", "--model", "m 1", "--", prompt]);
        let argv = template.render(&Values { prompt: "hi", ..Values::default() });
        assert_eq!(argv, ["-p", "--flag={literal}", "--", "hi"]);
        assert!(template.uses(Placeholder::Model) && !template.uses(Placeholder::SessionId));
        assert_eq!(template.prompt_uses(false), (1, false));
        // The flags values are passed with: `--model` before `{model}`; `--` before the prompt
        // ends the options, and `--flag={{literal}}` passes no value.
        assert_eq!(template.value_flags(), [("--model".to_owned(), Placeholder::Model)]);
        let joined = Template::parse(&json!(["--cwd={cwd}", {"if": "resume", "then": ["-r", "{session_id}"]}]), "args");
        let flags = joined.unwrap().value_flags();
        assert_eq!(flags, [("--cwd".to_owned(), Placeholder::Cwd), ("-r".into(), Placeholder::SessionId)]);
    }

    #[test]
    fn groups_follow_their_conditions_and_extra_args_their_place() {
        let template = Template::parse(
            &json!([
                {"if": "resume", "then": ["resume", "{session_id}"]},
                {"if": "approvals", "then": ["--permission-prompt-tool", "stdio"]},
                {"if": "!approvals", "then": ["{prompt}"]},
                {"insert": "extra_args"},
                "--cwd={cwd}"
            ]),
            "args",
        )
        .unwrap();
        let extra = ["--allowedTools".to_owned(), "Bash".to_owned()];
        let values = Values { prompt: "p", session_id: Some("s1"), cwd: "/w", extra_args: &extra, ..Values::default() };
        assert_eq!(template.render(&values), ["resume", "s1", "p", "--allowedTools", "Bash", "--cwd=/w"]);
        let asking = Values { approvals: true, ..values };
        assert_eq!(
            template.render(&asking),
            ["resume", "s1", "--permission-prompt-tool", "stdio", "--allowedTools", "Bash", "--cwd=/w"]
        );
        assert_eq!(template.prompt_uses(false), (1, false));
        assert_eq!(template.prompt_uses(true), (0, false));
        assert!(template.takes_extra_args() && template.tests(Condition::Resume));
    }

    #[test]
    fn bad_templates_name_the_element() {
        refused(json!(["{promt}"]), "args[0]", "unknown placeholder (known: {prompt},");
        refused(json!(["{prompt"]), "args[0]", "not closed");
        refused(json!(["a}b"]), "args[0]", "lone `}`");
        refused(json!(["--model", "{model}"]), "args[1]", "`{model}` may be unset here");
        refused(json!([{"if": "model", "then": ["{session_id}"]}]), "args[0].then[0]", "`{session_id}` may be unset");
        refused(json!([{"if": "!model", "then": ["{model}"]}]), "args[0].then[0]", "`{model}` may be unset");
        refused(json!([{"if": "sometimes", "then": []}]), "args[0].if", "unknown condition (known:");
        refused(json!([{"then": []}]), "args[0].if", "missing field");
        refused(json!([{"if": "model"}]), "args[0].then", "missing field");
        refused(json!([{"if": "model", "then": [], "else": []}]), "args[0].else", "unknown field");
        refused(json!([{"if": "model", "then": [{"if": "model", "then": []}]}]), "args[0].then[0]", "do not nest");
        refused(json!([{"insert": "prompt"}]), "args[0]", "exactly");
        refused(json!([{"insert": "extra_args"}, {"insert": "extra_args"}]), "args[1]", "once");
        refused(json!([3]), "args[0]", "expected a string");
        refused(json!("-p"), "args", "expected an array");
        refused(json!(["--", "a\u{0}b"]), "args[1]", "NUL character");
        refused(json!([{"if": "model", "then": ["--model", "{model}\u{0}"]}]), "args[0].then[1]", "NUL character");
    }

    /// A `resume` group is how a turn names the conversation it continues; a `!resume` group
    /// only says what a turn without one passes.
    #[test]
    fn only_a_resume_group_with_the_session_id_continues_a_conversation() {
        let fresh =
            Template::parse(&json!([{"if": "!resume", "then": ["--new-conversation"]}, "{prompt}"]), "args").unwrap();
        assert!(!fresh.tests(Condition::Resume) && fresh.mentions(Condition::Resume));
        assert_eq!(fresh.render(&Values { prompt: "p", ..Values::default() }), ["--new-conversation", "p"]);
        let both = Template::parse(
            &json!([
                {"if": "!resume", "then": ["--new-conversation"]},
                {"if": "resume", "then": ["--resume", "{session_id}"]},
                "{prompt}"
            ]),
            "args",
        )
        .unwrap();
        assert!(both.tests(Condition::Resume));
        assert_eq!(
            both.render(&Values { prompt: "p", session_id: Some("s1"), ..Values::default() }),
            ["--resume", "s1", "p"]
        );
        refused(json!([{"if": "resume", "then": ["--continue"]}, "{prompt}"]), "args[0].if", "pass `{session_id}`");
    }
}
