//! Making the mount: its options, and serving it until it is unmounted or told to stop.

use super::*;

/// How a mount is made.
#[derive(Debug, Default)]
pub struct MountSettings {
    /// Honour setuid and setgid bits of programs run from the mount. Off by default
    /// (`nosuid`, and always `nodev`): any Maat user who may write a directory could
    /// otherwise plant a setuid program for the local machine's users (issue 44).
    pub suid: bool,
    /// Serve every local user, each through their own session (mounted `allow_other`);
    /// `None`: only the mounting user (the kernel refuses everyone else).
    pub many_users: Option<ManyUsers>,
    /// Show owners and groups as local ids, and take local ids in `chown`.
    pub idmap: Option<IdMap>,
}

/// Mounts the Maat directory `root` at `mountpoint` and serves until it is unmounted
/// (`fusermount3 -u MOUNTPOINT`) or `stop` returns true (checked every 100 ms); then
/// unmounts, sending every open file's buffered writes and size first.
pub fn mount(
    client: Client,
    root: &str,
    mountpoint: &Path,
    settings: MountSettings,
    mounted: impl FnOnce(),
    mut stop: impl FnMut() -> bool,
) -> Result<(), FuseError> {
    let many = settings.many_users.is_some();
    let fs = MaatFs::new(client, root, settings.many_users, settings.idmap)?;
    let mut config = fuser::Config::default();
    config
        .mount_options
        .push(fuser::MountOption::FSName(format!("maat:{root}")));
    config
        .mount_options
        .push(fuser::MountOption::Subtype("maat".into()));
    config.mount_options.push(fuser::MountOption::NoDev);
    if many {
        // `allow_other`: the kernel lets every local user in; each acts as themselves.
        config.acl = fuser::SessionACL::All;
    }
    config.mount_options.push(if settings.suid {
        fuser::MountOption::Suid
    } else {
        fuser::MountOption::NoSuid
    });
    let failed = |source| FuseError::Mount {
        mountpoint: mountpoint.display().to_string(),
        source,
    };
    let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(failed)?;
    mounted();
    loop {
        if session.guard.is_finished() {
            return session.join().map_err(failed);
        }
        if stop() {
            return session.umount_and_join().map_err(failed);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
