//! The gateway's data directory: made private, locked against a second
//! process, and its parts (secrets, spill files, readable files) prepared.

use std::path::{Path, PathBuf};

use super::EngineError;
use crate::config::Config;

fn prepare_data_dir(dir: &Path) -> Result<PathBuf, EngineError> {
    std::fs::create_dir_all(dir).map_err(|source| EngineError::DataDir {
        path: dir.to_path_buf(),
        source,
    })?;
    dir.canonicalize().map_err(|source| EngineError::DataDir {
        path: dir.to_path_buf(),
        source,
    })
}

/// Takes the exclusive lock on `<dir>/duckgate.lock` (released by the OS when
/// the process ends, however it ends) and writes the holder's pid into it.
fn lock_data_dir(dir: &Path) -> Result<std::fs::File, EngineError> {
    use std::io::{Read, Seek, Write};
    let path = dir.join("duckgate.lock");
    let io = |source| EngineError::DataDir {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(EngineError::Locked {
                path: dir.to_path_buf(),
                holder: if holder.is_empty() {
                    "holder unknown".into()
                } else {
                    holder.to_string()
                },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "pid {}", std::process::id()).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(file)
}

fn create_private_dir(dir: &Path) -> Result<(), EngineError> {
    std::fs::create_dir_all(dir).map_err(|source| EngineError::DataDir {
        path: dir.to_path_buf(),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// The gateway's directories, prepared and locked at start.
pub(super) struct Dirs {
    pub(super) data: PathBuf,
    pub(super) secrets: PathBuf,
    pub(super) tmp: PathBuf,
    pub(super) files: PathBuf,
    pub(super) lock: std::fs::File,
}

impl Dirs {
    pub(super) fn prepare(config: &Config) -> Result<Self, EngineError> {
        let data_dir = prepare_data_dir(&config.engine.data_dir)?;
        // Nothing in the directory is touched before this lock is held: two
        // processes on one directory would share spill files and wipe each
        // other's secrets.
        let lock = lock_data_dir(&data_dir)?;
        let secrets_dir = data_dir.join("secrets");
        // A restart is a recycle: secrets persisted by an earlier run (or
        // planted) must never load.
        if secrets_dir.exists() {
            std::fs::remove_dir_all(&secrets_dir).map_err(|source| EngineError::DataDir {
                path: secrets_dir.clone(),
                source,
            })?;
        }
        create_private_dir(&secrets_dir)?;
        // Spill files left by a process that was killed are nobody's now.
        let tmp_dir = data_dir.join("tmp");
        if tmp_dir.exists() {
            std::fs::remove_dir_all(&tmp_dir).map_err(|source| EngineError::DataDir {
                path: tmp_dir.clone(),
                source,
            })?;
        }
        create_private_dir(&tmp_dir)?;
        let files_dir = match &config.engine.files_dir {
            Some(dir) => prepare_data_dir(dir)?,
            None => prepare_data_dir(&data_dir.join("files"))?,
        };
        let spool_dir = data_dir.join("spool");
        let private = [&tmp_dir, &secrets_dir, &spool_dir];
        if private
            .iter()
            .any(|p| files_dir.starts_with(p) || p.starts_with(&files_dir))
        {
            return Err(EngineError::Setup {
                step: "DUCKGATE_FILES_DIR",
                message: "the readable directory may neither be inside nor hold the spill, secret or spool directory".into(),
            });
        }
        Ok(Self {
            data: data_dir,
            secrets: secrets_dir,
            tmp: tmp_dir,
            files: files_dir,
            lock,
        })
    }
}
