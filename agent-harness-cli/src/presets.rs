//! Presets: the catalog `run --provider preset:ID` and `presets` read (the shipped presets and
//! `--presets-dir`, checked against the executable allow-list), and `agent-harness presets`.

use std::path::Path;

use agent_harness::providers::preset::{AllowList, Preset, PresetCatalog, PresetInfo};
use agent_harness::{Capability, Support};

use crate::args::{PresetSourceArgs, PresetsArgs};
use crate::exit::{Exit, Failure, one_line};

/// The prefix of a preset provider's name.
pub(crate) const PREFIX: &str = "preset:";

/// The catalog `source` names. The allow-list is the shipped presets' programs, every
/// `--allow-executable`, and `cli_path` (a program the user named on the command line).
pub(crate) fn catalog(source: &PresetSourceArgs, cli_path: Option<&Path>) -> Result<PresetCatalog, Failure> {
    let mut allow = AllowList::shipped();
    let named = source.allow_executables.iter().map(|p| ("--allow-executable", p.as_path()));
    for (flag, program) in named.chain(cli_path.map(|p| ("--cli-path", p))) {
        if !program.is_absolute() && program.components().count() != 1 {
            return Err(Failure::usage(format!(
                "{flag} {}: expected a bare program name or an absolute path",
                program.display()
            )));
        }
        allow = allow.allow(program);
    }
    let mut builder = PresetCatalog::builder(allow);
    if let Some(dir) = &source.presets_dir {
        if !dir.is_dir() {
            return Err(Failure::usage(format!("--presets-dir {}: not a directory", dir.display())));
        }
        builder = builder.dir(dir);
    }
    Ok(builder.load())
}

/// The preset `id` of `catalog`, or a usage error: its load error when it did not load, else
/// the IDs there are.
pub(crate) fn preset<'c>(catalog: &'c PresetCatalog, id: &str) -> Result<&'c Preset, Failure> {
    if let Some(preset) = catalog.get(id) {
        return Ok(preset);
    }
    let failed = catalog.errors().iter().find(|e| {
        // A file that did not load says its ID, or is named after its preset.
        e.id.as_deref() == Some(id)
            || Path::new(&e.origin).file_stem().is_some_and(|stem| stem == id)
            || e.origin.ends_with(&format!(":{id}.json"))
    });
    if let Some(error) = failed {
        return Err(Failure::usage(one_line(&format!("preset `{id}` did not load: {error}"))));
    }
    let known: Vec<String> = catalog.presets().map(|p| format!("{PREFIX}{}", p.id())).collect();
    Err(Failure::usage(format!("unknown preset `{id}`: expected one of {}", known.join(", "))))
}

/// `agent-harness presets`: every preset that loaded, then every one that did not (stderr).
pub(crate) fn list(args: PresetsArgs) -> Result<Exit, Failure> {
    let catalog = catalog(&args.source, None)?;
    for preset in catalog.presets() {
        let info = preset.info();
        if args.json {
            let line = serde_json::to_string(&info)
                .map_err(|error| Failure::failed(format!("cannot serialize preset {}: {error}", info.id)))?;
            crate::exit::print(&format!("{line}\n"))?;
        } else {
            crate::exit::print(&human(&info))?;
        }
    }
    for error in catalog.errors() {
        // The file's name and what the error quotes are text: a control character is shown.
        crate::exit::complain(&crate::render::visible(&one_line(&error.to_string())));
    }
    Ok(if catalog.errors().is_empty() { Exit::Completed } else { Exit::Failed })
}

/// A preset for people: its provider name and description, what it runs, what it can do, and
/// the options it takes with their defaults.
fn human(info: &PresetInfo) -> String {
    let description = crate::render::visible_field(info.description.as_deref().unwrap_or(""));
    let mut out = format!("{}\t{description}\n", info.provider);
    let (program, origin) = (crate::render::visible_field(&info.program), crate::render::visible_field(&info.origin));
    out += &format!("  program: {program}  ({origin})\n");
    let available: Vec<String> = Capability::ALL
        .iter()
        .filter_map(|&capability| match info.capabilities.get(capability) {
            Support::Native => Some(capability.to_string()),
            Support::Emulated => Some(format!("{capability} (emulated)")),
            Support::Experimental => Some(format!("{capability} (experimental)")),
            _ => None,
        })
        .collect();
    out += &format!("  capabilities: {}\n", available.join(", "));
    let options: Vec<String> = info.options.iter().map(|o| format!("{}={}", o.name, o.default)).collect();
    out += &format!("  options: {}\n", options.join(" "));
    out
}
