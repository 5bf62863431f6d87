//! The shipped presets and a presets directory: [`PresetCatalog`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::allow::AllowList;
use crate::error::{PresetError, Problem};
use crate::preset::Preset;
use crate::provider::PresetProvider;

/// The presets shipped in this crate, by file name.
pub const SHIPPED: &[(&str, &str)] = &[
    ("claude-print.json", include_str!("../presets/claude-print.json")),
    ("codex-exec.json", include_str!("../presets/codex-exec.json")),
    ("pi-print.json", include_str!("../presets/pi-print.json")),
];

/// The presets a harness can run: the shipped ones and those of a presets directory (a file
/// there replaces a shipped preset with the same ID), each checked against an
/// [`AllowList`]. A preset that does not load is left out and reported in
/// [`PresetCatalog::errors`]; the others still load. A file that does not load still replaces
/// the preset it names (its `id`, else its file name): no preset of that ID is offered, so a
/// broken override never runs the CLI it meant to replace.
///
/// ```
/// use agent_provider_preset::{AllowList, PresetCatalog};
///
/// let catalog = PresetCatalog::builder(AllowList::shipped()).load();
/// assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
/// let ids: Vec<&str> = catalog.presets().map(|p| p.id()).collect();
/// assert_eq!(ids, ["claude-print", "codex-exec", "pi-print"]);
/// let provider = catalog.provider("codex-exec").expect("shipped");
/// # let _ = provider;
/// ```
#[derive(Clone)]
pub struct PresetCatalog {
    presets: BTreeMap<String, Arc<Preset>>,
    errors: Vec<PresetError>,
    allow: Arc<AllowList>,
}

/// What [`PresetCatalog::builder`] loads.
#[derive(Clone, Debug)]
pub struct CatalogBuilder {
    allow: AllowList,
    dirs: Vec<PathBuf>,
    shipped: bool,
}

impl CatalogBuilder {
    /// Also loads every `*.json` file of `dir` (in name order). Files of a later directory
    /// replace presets with the same ID from earlier ones and from the shipped set.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dirs.push(dir.into());
        self
    }

    /// Leaves the shipped presets out.
    pub fn without_shipped(mut self) -> Self {
        self.shipped = false;
        self
    }

    /// Reads and checks every preset.
    pub fn load(self) -> PresetCatalog {
        let mut presets = BTreeMap::new();
        let mut errors = Vec::new();
        if self.shipped {
            for (name, text) in SHIPPED {
                match Preset::from_json(text, &format!("shipped:{name}"), &self.allow) {
                    Ok(preset) => {
                        presets.insert(preset.id.clone(), Arc::new(preset));
                    }
                    Err(error) => errors.push(error),
                }
            }
        }
        for dir in &self.dirs {
            load_dir(dir, &self.allow, &mut presets, &mut errors);
        }
        PresetCatalog { presets, errors, allow: Arc::new(self.allow) }
    }
}

/// The largest preset file read: presets are a few KB, and a directory may hold anything.
const MAX_PRESET_FILE: u64 = 1 << 20;

/// The text of the preset file at `path`, read up to [`MAX_PRESET_FILE`] bytes.
fn read_preset(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(MAX_PRESET_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_PRESET_FILE {
        let message = format!("the file is larger than {MAX_PRESET_FILE} bytes");
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, message));
    }
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "the file is not UTF-8"))
}

fn load_dir(dir: &Path, allow: &AllowList, presets: &mut BTreeMap<String, Arc<Preset>>, errors: &mut Vec<PresetError>) {
    let shown = dir.display().to_string();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            errors
                .push(PresetError::new(shown, Problem::new("", format!("cannot read the presets directory: {error}"))));
            return;
        }
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json") && p.is_file())
        .collect();
    files.sort();
    // IDs this directory defined, and in which file.
    let mut here: BTreeMap<String, String> = BTreeMap::new();
    for file in files {
        let origin = file.display().to_string();
        let text = match read_preset(&file) {
            Ok(text) => text,
            Err(error) => {
                // Unreadable (not UTF-8, no permission), it still replaces the preset its file
                // name names: a broken override never runs the CLI it meant to replace.
                let mut error = PresetError::new(origin, Problem::new("", format!("cannot read: {error}")));
                error.id = file.file_stem().and_then(|s| s.to_str()).map(str::to_owned);
                if let Some(id) = error.id.as_ref().filter(|id| !here.contains_key(*id)) {
                    presets.remove(id);
                }
                errors.push(error);
                continue;
            }
        };
        match Preset::from_json(&text, &origin, allow) {
            Ok(preset) => {
                if let Some(first) = here.get(&preset.id) {
                    let problem = Problem::new("id", format!("`{}` is already defined by {first}", preset.id));
                    errors.push(PresetError::new(origin, problem));
                    continue;
                }
                here.insert(preset.id.clone(), origin);
                presets.insert(preset.id.clone(), Arc::new(preset));
            }
            Err(mut error) => {
                // A file meant to replace a preset (shipped, or from an earlier directory) must
                // not leave it in place when it does not load: that ID is then unavailable, and
                // asking for it gives this error.
                error.id = claimed_id(&text).or_else(|| file.file_stem().and_then(|s| s.to_str()).map(str::to_owned));
                if let Some(id) = error.id.as_ref().filter(|id| !here.contains_key(*id)) {
                    presets.remove(id);
                }
                errors.push(error);
            }
        }
    }
}

/// The `id` a preset file says it defines, if it is JSON with a string `id`.
fn claimed_id(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    value.get("id")?.as_str().map(str::to_owned)
}

impl PresetCatalog {
    /// Presets checked against `allow`: the shipped ones, plus directories added to the builder.
    pub fn builder(allow: AllowList) -> CatalogBuilder {
        CatalogBuilder { allow, dirs: Vec::new(), shipped: true }
    }

    /// The presets that loaded, by ID.
    pub fn presets(&self) -> impl Iterator<Item = &Arc<Preset>> {
        self.presets.values()
    }

    /// The preset `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<Preset>> {
        self.presets.get(id)
    }

    /// What did not load, each naming its file and field.
    pub fn errors(&self) -> &[PresetError] {
        &self.errors
    }

    /// The allow-list the presets were checked against (and option overrides are).
    pub fn allow_list(&self) -> &AllowList {
        &self.allow
    }

    /// A provider for the preset `id`, registered as `preset:<id>`.
    pub fn provider(&self, id: &str) -> Option<PresetProvider> {
        self.presets.get(id).map(|preset| PresetProvider::new(Arc::clone(preset), Arc::clone(&self.allow)))
    }

    /// A provider for every preset.
    pub fn providers(&self) -> Vec<PresetProvider> {
        self.presets.values().map(|preset| PresetProvider::new(Arc::clone(preset), Arc::clone(&self.allow))).collect()
    }
}

impl fmt::Debug for PresetCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresetCatalog")
            .field("presets", &self.presets.keys().collect::<Vec<_>>())
            .field("errors", &self.errors.len())
            .field("allow", &self.allow)
            .finish()
    }
}
