//! Bad input at open: clear errors, and the file at the path left exactly as it was.

mod common;

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agent_store_sqlite::{OpenError, SCHEMA_VERSION, SqliteOptions, SqliteStore};
use common::TempDir;

/// What must not change: the file's length and a digest of its bytes, and which SQLite side
/// files exist next to it.
#[derive(Debug, PartialEq, Eq)]
struct State {
    len: usize,
    digest: u64,
    wal: bool,
    shm: bool,
}

fn state(path: &Path) -> State {
    let bytes = fs::read(path).expect("read file");
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    let side = |suffix: &str| Path::new(&format!("{}{suffix}", path.display())).exists();
    State { len: bytes.len(), digest: hasher.finish(), wal: side("-wal"), shm: side("-shm") }
}

#[track_caller]
fn refused(path: &Path) -> OpenError {
    match SqliteStore::open(path) {
        Ok(store) => panic!("{} must be refused, but opened as {store:?}", path.display()),
        Err(error) => error,
    }
}

#[test]
fn a_path_in_a_missing_directory_is_refused_and_nothing_is_created() {
    let dir = TempDir::new("open-missing-dir");
    let missing = dir.path().join("no-such-dir");
    let path = missing.join("store.db");
    let error = refused(&path);
    assert!(matches!(&error, OpenError::MissingDirectory { dir, .. } if *dir == missing), "{error:?}");
    assert!(error.to_string().contains("does not exist"), "{error}");
    assert!(!missing.exists(), "the directory must not be created");
    // With `?` in a function returning the harness's `Result`, the error stays reachable.
    let open = || -> agent_core::Result<SqliteStore> { Ok(SqliteStore::open(&path)?) };
    match open() {
        Err(agent_core::Error::Store(agent_core::StoreError::Backend(source))) => {
            let source = source.downcast_ref::<OpenError>();
            assert!(matches!(source, Some(OpenError::MissingDirectory { .. })), "{source:?}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_untouched() {
    let dir = TempDir::new("open-not-sqlite");
    let path = dir.path().join("notes.txt");
    fs::write(&path, b"these are notes, not a database\n").unwrap();
    let before = state(&path);
    let error = refused(&path);
    assert!(matches!(error, OpenError::NotSqlite { .. }), "{error:?}");
    assert!(error.to_string().contains("is not a SQLite database"), "{error}");
    assert_eq!(state(&path), before, "the file must be left untouched");
}

#[test]
fn a_short_file_and_a_damaged_sqlite_file_are_refused_untouched() {
    let dir = TempDir::new("open-damaged");
    let short = dir.path().join("short.db");
    fs::write(&short, b"SQLite").unwrap();
    let before = state(&short);
    assert!(matches!(refused(&short), OpenError::NotSqlite { .. }));
    assert_eq!(state(&short), before);

    // A valid header followed by garbage: SQLite itself rejects it.
    let damaged = dir.path().join("damaged.db");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend((0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    fs::write(&damaged, &bytes).unwrap();
    let before = state(&damaged);
    let error = refused(&damaged);
    assert!(matches!(error, OpenError::NotSqlite { .. }), "{error:?}");
    assert_eq!(state(&damaged), before);
}

#[test]
fn another_applications_sqlite_database_is_refused_untouched() {
    let dir = TempDir::new("open-foreign");
    let path = dir.path().join("app.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE contacts (name TEXT); INSERT INTO contacts VALUES ('ada');").unwrap();
    }
    let before = state(&path);
    let error = refused(&path);
    assert!(matches!(error, OpenError::NotAStore { .. }), "{error:?}");
    assert!(error.to_string().contains("another application"), "{error}");
    assert_eq!(state(&path), before);
}

/// A `schema_version` table of its own does not make another application's database a store,
/// whatever version it names: refused as foreign, its journal mode and bytes as they were.
#[test]
fn another_applications_database_with_a_schema_version_table_is_refused_untouched() {
    let dir = TempDir::new("open-foreign-versioned");
    for version in [0, 1, 2, 3, SCHEMA_VERSION + 6] {
        let path = dir.path().join(format!("app-{version}.db"));
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE schema_version (version INTEGER, applied_at TEXT); CREATE TABLE users (name TEXT);",
            )
            .unwrap();
            conn.execute("INSERT INTO schema_version VALUES (?1, 'x')", [version]).unwrap();
        }
        let before = state(&path);
        let error = refused(&path);
        assert!(matches!(error, OpenError::NotAStore { .. }), "version {version}: {error:?}");
        assert_eq!(state(&path), before, "version {version}: the file must be left untouched");
    }
    // Nor does a table of that name with columns of its own.
    let path = dir.path().join("app-text.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE schema_version (name TEXT); INSERT INTO schema_version VALUES ('v1');")
            .unwrap();
    }
    let before = state(&path);
    let error = refused(&path);
    assert!(matches!(error, OpenError::NotAStore { .. }), "{error:?}");
    assert_eq!(state(&path), before);
}

/// With `create(false)`, only a file that holds a store opens: no file, an empty file and a
/// SQLite database without tables are refused and left as they were; a store opens.
#[test]
fn without_create_only_a_store_opens() {
    let dir = TempDir::new("open-no-create");
    let reader = || SqliteOptions::new().create(false);
    let missing = dir.path().join("missing.db");
    let error = SqliteStore::open_with(&missing, reader()).expect_err("refused");
    assert!(matches!(error, OpenError::NoStore { .. }), "{error:?}");
    assert!(!missing.exists(), "nothing was created");
    let empty = dir.path().join("empty.db");
    fs::write(&empty, b"").unwrap();
    let vacuumed = dir.path().join("vacuumed.db");
    rusqlite::Connection::open(&vacuumed).unwrap().execute_batch("VACUUM").unwrap();
    for path in [&empty, &vacuumed] {
        let before = state(path);
        let error = SqliteStore::open_with(path, reader()).expect_err("refused");
        assert!(matches!(error, OpenError::NoStore { .. }), "{}: {error:?}", path.display());
        assert_eq!(state(path), before, "{} is left as it was", path.display());
    }
    let store = dir.path().join("store.db");
    drop(SqliteStore::open(&store).expect("made"));
    drop(SqliteStore::open_with(&store, reader()).expect("a store opens"));
}

#[test]
fn a_store_with_a_newer_schema_version_is_refused_untouched() {
    let dir = TempDir::new("open-newer");
    let path = dir.path().join("store.db");
    drop(SqliteStore::open(&path).expect("create the store"));
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?1, 'later')", [SCHEMA_VERSION + 1])
            .unwrap();
    }
    let before = state(&path);
    assert!(!before.wal && !before.shm, "a cleanly closed store has no side files");
    let error = refused(&path);
    match &error {
        OpenError::NewerSchema { found, supported, .. } => {
            assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    assert!(error.to_string().contains("newer build"), "{error}");
    assert_eq!(state(&path), before, "the file must be left untouched");
}

#[test]
fn a_directory_path_is_refused() {
    let dir = TempDir::new("open-dir");
    let error = refused(dir.path());
    assert!(matches!(error, OpenError::NotAFile { .. }), "{error:?}");
}

#[test]
fn a_new_store_file_is_private_and_so_are_its_wal_files() {
    let dir = TempDir::new("open-private");
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).expect("open");
    let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600, "the database file must be private");
    for suffix in ["-wal", "-shm"] {
        let side = Path::new(&format!("{}{suffix}", path.display())).to_owned();
        assert_eq!(mode(&side), 0o600, "{suffix} must be private too");
    }
    drop(store);
}

#[test]
fn an_empty_existing_file_becomes_a_store_and_reopens() {
    let dir = TempDir::new("open-empty");
    let path = dir.path().join("store.db");
    fs::write(&path, b"").unwrap();
    drop(SqliteStore::open(&path).expect("an empty file is a new store"));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: u32 = conn.query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    drop(conn);
    drop(SqliteStore::open(&path).expect("reopen"));
}

/// Makes `dir` and its parents up to the tests' directory readable by everyone (not writable).
fn let_nobody_reach(dir: &Path) {
    for dir in dir.ancestors().take_while(|d| d.starts_with(env!("CARGO_TARGET_TMPDIR"))) {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Runs the test `test` of this binary as `nobody`, with `var` naming the store `path`, and
/// checks that it passed.
fn as_nobody(test: &str, var: &str, path: &Path) {
    use std::os::unix::process::CommandExt;
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(var, path)
        .uid(65534)
        .gid(65534)
        .status()
        .expect("the test binary runs as nobody");
    assert!(status.success(), "the child opening {} as nobody failed: {status}", path.display());
}

/// The variable that makes [`a_file_this_process_cannot_write_is_refused_untouched`] the child
/// it starts as another user, naming the file to open.
const AS_NOBODY: &str = "AGENT_STORE_SQLITE_TEST_READ_ONLY";

/// A store file this process may not write is refused, untouched, rather than opened read-only
/// (every write would then fail after the store was taken on). Run as root, which may write any
/// file, the test opens it from a child running as `nobody`.
#[test]
fn a_file_this_process_cannot_write_is_refused_untouched() {
    use std::os::unix::fs::MetadataExt;

    if let Some(path) = std::env::var_os(AS_NOBODY) {
        let error = refused(Path::new(&path));
        assert!(matches!(error, OpenError::ReadOnly { .. }), "{error:?}");
        assert!(error.to_string().contains("cannot be written by this process"), "{error}");
        return;
    }
    let dir = TempDir::new("read-only");
    let path = dir.path().join("store.db");
    drop(SqliteStore::open(&path).expect("a new store"));
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    let before = state(&path);
    let root = fs::metadata("/proc/self").expect("/proc").uid() == 0;
    if root {
        // `nobody` reads the file, and may make SQLite's side files beside it.
        let_nobody_reach(dir.path());
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        as_nobody("a_file_this_process_cannot_write_is_refused_untouched", AS_NOBODY, &path);
    } else {
        let error = refused(&path);
        assert!(matches!(error, OpenError::ReadOnly { .. }), "{error:?}");
    }
    assert_eq!(state(&path), before, "the file is left as it was");
}

/// The variable that makes [`a_store_in_a_directory_this_process_cannot_write_is_refused_by_name`]
/// the child it starts as another user, naming the file to open.
const IN_READ_ONLY_DIR: &str = "AGENT_STORE_SQLITE_TEST_READ_ONLY_DIR";

/// A store this process may write, in a directory it may not: SQLite cannot make its side files
/// there and says only "unable to open database file"; the error names the directory. Run as
/// root, the test opens it from a child running as `nobody`.
#[test]
fn a_store_in_a_directory_this_process_cannot_write_is_refused_by_name() {
    use std::os::unix::fs::MetadataExt;

    let check = |path: &Path| {
        let error = refused(path);
        assert!(matches!(error, OpenError::ReadOnlyDirectory { .. }), "{error:?}");
        assert!(error.to_string().contains("cannot be written by this process"), "{error}");
    };
    if let Some(path) = std::env::var_os(IN_READ_ONLY_DIR) {
        check(Path::new(&path));
        return;
    }
    let dir = TempDir::new("read-only-dir");
    let path = dir.path().join("store.db");
    drop(SqliteStore::open(&path).expect("a new store"));
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
    let root = fs::metadata("/proc/self").expect("/proc").uid() == 0;
    if root {
        // `nobody` may reach and write the file, not add files beside it.
        let_nobody_reach(dir.path());
        as_nobody("a_store_in_a_directory_this_process_cannot_write_is_refused_by_name", IN_READ_ONLY_DIR, &path);
    } else {
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o555)).unwrap();
        check(&path);
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Opens of one empty file at once (two runs given the same new path) all become the same store:
/// the one that lost the race to make it waits for the other, within the busy timeout, rather
/// than failing with "database is locked".
#[test]
fn opens_of_one_empty_file_at_once_all_succeed() {
    for round in 0..20 {
        let dir = TempDir::new("racing-opens");
        let path = dir.path().join(format!("store-{round}.db"));
        fs::write(&path, b"").unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let (path, barrier) = (path.clone(), std::sync::Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for open in opens {
            let opened = open.join().unwrap();
            assert!(opened.is_ok(), "round {round}: {opened:?}");
        }
    }
}

/// The POSIX locks this process holds on `path` (from `/proc/locks`).
fn own_locks(path: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let inode = fs::metadata(path).expect("metadata").ino();
    let pid = std::process::id().to_string();
    let locks = fs::read_to_string("/proc/locks").expect("/proc/locks");
    locks
        .lines()
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&"POSIX")
                && fields.get(4) == Some(&pid.as_str())
                && fields.get(5).is_some_and(|id| id.rsplit(':').next() == Some(inode.to_string().as_str()))
        })
        .count()
}

/// Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
/// included: a store opened a second time in one process must not read the file behind
/// SQLite's back, or the first one's locks go, and another process closing the database takes
/// itself for the last one and removes the WAL the first store still writes (acknowledged
/// writes lost).
#[tokio::test]
async fn a_second_open_in_one_process_keeps_the_first_ones_locks() {
    let dir = TempDir::new("open-twice-locks");
    let path = dir.path().join("store.db");
    let first = SqliteStore::open(&path).expect("first open");
    // A read holds the reader's connection open with its locks.
    assert!(agent_core::Store::list_sessions(&first).await.expect("read").is_empty());
    let held = own_locks(&path);
    assert!(held > 0, "SQLite holds locks on the database in WAL mode");
    let second = SqliteStore::open(&path).expect("second open");
    assert!(own_locks(&path) >= held, "the second open dropped the first one's locks");
    drop(second);
    assert!(own_locks(&path) >= held, "closing the second store dropped the first one's locks");
    assert!(agent_core::Store::list_sessions(&first).await.expect("read").is_empty());
}

/// A link to nothing is not a file a store can be made in: refused as such, and nothing is
/// made where it points.
#[test]
fn a_link_to_nothing_is_refused_as_not_a_file() {
    let dir = TempDir::new("open-dangling");
    let path = dir.path().join("store.db");
    std::os::unix::fs::symlink(dir.path().join("nowhere.db"), &path).unwrap();
    let error = refused(&path);
    assert!(matches!(error, OpenError::NotAFile { .. }), "{error:?}");
    assert!(!dir.path().join("nowhere.db").exists(), "nothing was made where the link points");
}

/// The variable that makes [`what_keeps_this_process_out_is_named`] the child it starts as
/// another user, naming the directory its cases are in.
const KEPT_OUT: &str = "AGENT_STORE_SQLITE_TEST_KEPT_OUT";

/// Where this process may not go, the error says what stops it: a directory it may not search
/// is not a missing one, a new store in a directory it may not write names the directory, and
/// a file it may not open is read-only to it rather than a bare SQLite failure. Run as root,
/// which may go anywhere, the test opens them from a child running as `nobody`.
#[test]
fn what_keeps_this_process_out_is_named() {
    use std::os::unix::fs::MetadataExt;

    let check = |base: &Path| {
        let error = refused(&base.join("locked/in/store.db"));
        assert!(
            matches!(&error, OpenError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied),
            "{error:?}"
        );
        let error = refused(&base.join("ro/store.db"));
        assert!(matches!(error, OpenError::ReadOnlyDirectory { .. }), "{error:?}");
        let error = refused(&base.join("rw/store.db"));
        assert!(matches!(error, OpenError::ReadOnly { .. }), "{error:?}");
    };
    if let Some(base) = std::env::var_os(KEPT_OUT) {
        check(Path::new(&base));
        return;
    }
    let dir = TempDir::new("kept-out");
    let base = dir.path();
    fs::create_dir_all(base.join("locked/in")).unwrap();
    fs::create_dir_all(base.join("ro")).unwrap();
    fs::create_dir_all(base.join("rw")).unwrap();
    fs::write(base.join("rw/store.db"), b"").unwrap();
    let_nobody_reach(base);
    fs::set_permissions(base.join("locked"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(base.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
    fs::set_permissions(base.join("rw"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(base.join("rw/store.db"), fs::Permissions::from_mode(0o000)).unwrap();
    let root = fs::metadata("/proc/self").expect("/proc").uid() == 0;
    if root {
        as_nobody("what_keeps_this_process_out_is_named", KEPT_OUT, base);
    } else {
        check(base);
    }
    assert!(!base.join("ro/store.db").exists(), "nothing was made in the read-only directory");
    assert_eq!(fs::metadata(base.join("rw/store.db")).unwrap().len(), 0, "the file is left as it was");
    // The scratch directory is removed by its owner.
    fs::set_permissions(base.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();
}

/// The variable that makes [`a_new_store_on_a_read_only_file_system_names_its_directory`] the
/// child it starts on the read-only mount, naming the file to create.
const ON_READ_ONLY_FS: &str = "AGENT_STORE_SQLITE_TEST_READ_ONLY_FS";

/// A new store on a file system mounted read-only names the directory it cannot write, as one
/// in a directory of another owner does, rather than a bare I/O error. The child runs in user
/// and mount namespaces of its own, with a read-only tmpfs over a directory of this test.
#[test]
fn a_new_store_on_a_read_only_file_system_names_its_directory() {
    if let Some(path) = std::env::var_os(ON_READ_ONLY_FS) {
        let error = refused(Path::new(&path));
        assert!(matches!(error, OpenError::ReadOnlyDirectory { .. }), "{error:?}");
        assert!(!Path::new(&path).exists(), "nothing was created");
        return;
    }
    let dir = TempDir::new("read-only-fs");
    let mount = dir.path().join("ro");
    fs::create_dir(&mount).expect("mount point");
    let path = mount.join("store.db");
    let test = "a_new_store_on_a_read_only_file_system_names_its_directory";
    let script = r#"mount -t tmpfs -o ro none "$1" && exec "$2" --exact "$3" --nocapture"#;
    let status = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"])
        .arg(&mount)
        .arg(std::env::current_exe().expect("the test binary"))
        .arg(test)
        .env(ON_READ_ONLY_FS, &path)
        .status()
        .expect("`unshare` (util-linux) with unprivileged user namespaces: apt-get install util-linux");
    assert!(status.success(), "the child on the read-only mount failed: {status}");
}
