//! `maat job …`: secure delegation (SPEC M10) from the command line. A job lives in
//! `MAAT_HOME/jobs/NAME.json` (mode 0600: it holds the job's private computation key).

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use maat_client::{write_private_file, Client, JobHandle};
use maat_crypto::sign::SigningKey;
use maat_proto::capability::Mode;
use maat_proto::delegation::computation_key_hash;
use maat_proto::msg::Access;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum JobCommand {
    /// Start a job you lead: a temporary key pair that participants will hold instead of
    /// opening files themselves. Its key lives one capability lifetime unless renewed.
    Create {
        /// A name for the job (letters, digits, `.`, `_`, `-`).
        name: String,
    },
    /// Open a file for the job (`openg`): the MDS checks your permissions once and signs
    /// a handle any holder of the job's key can use.
    Open {
        /// The job.
        job: String,
        /// Path in Maat.
        path: String,
        /// Open for writing too (participants may then write it).
        #[arg(long)]
        write: bool,
        /// Create the file (mode 0644) if it does not exist (implies --write).
        #[arg(long)]
        create: bool,
        /// An encrypted file, for reading by ranges: each participant decrypts only the
        /// ranges its owner granted that participant (`maat keys grant PATH --to NAME
        /// --range A..B`, or `--slices` for member i of n), and nothing else of it.
        #[arg(long, conflicts_with_all = ["write", "create"])]
        ranges: bool,
    },
    /// Seal the job's key and handles to USER's current login and write them to a file
    /// for USER (`maat job join FILE`). USER must be logged in.
    Export {
        /// The job.
        job: String,
        /// The participant's user name.
        #[arg(long)]
        to: String,
        /// Where to write the bundle (default: JOB.to-USER.maatjob here).
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// Join a job from a bundle its lead exported to you.
    Join {
        /// The bundle file.
        file: PathBuf,
    },
    /// The jobs in MAAT_HOME: role, files, how long the key lives.
    Ls,
    /// Read a file through the job's handle (LOCAL `-` writes standard output).
    Get {
        /// The job.
        job: String,
        /// Path in Maat (as the lead opened it).
        path: String,
        /// Local file.
        local: PathBuf,
        /// Only bytes START..END (END exclusive; KiB, MiB, GiB suffixes): a file the job
        /// opened with --ranges reads only the ranges granted to you.
        #[arg(long, value_parser = crate::keys::parse_range)]
        range: Option<(u64, u64)>,
    },
    /// Write a local file as the whole content of a file the job opened for writing.
    Put {
        /// The job.
        job: String,
        /// Local file.
        local: PathBuf,
        /// Path in Maat (as the lead opened it).
        path: String,
    },
    /// Extend the job key's lifetime (the lead only; refused once the lead lost access to
    /// one of the job's files). Participants' clients fetch the new lifetime themselves.
    Renew {
        /// The job.
        job: String,
    },
    /// End the job now: every OSD refuses its key at once (the lead; the administrator
    /// may name the key by its hash, as `maat job ls` prints it).
    End {
        /// The job, or a key hash in hex (administrator).
        job: String,
    },
}

/// The job file layout this build writes.
const JOB_FILE_VERSION: u32 = 1;

#[derive(serde::Serialize, serde::Deserialize)]
struct JobFile {
    version: u32,
    name: String,
    /// "lead" or "participant".
    role: String,
    /// The lead's user id.
    lead: u64,
    /// The computation key's Ed25519 seed, hex.
    key: String,
    /// The newest key lifetime token, hex.
    lifetime: String,
    /// Signed file handles, hex.
    handles: Vec<String>,
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !name.starts_with('.');
    if !ok {
        bail!("job names are 1 to 64 letters, digits, '.', '_' or '-' (not starting with '.')");
    }
    Ok(())
}

fn jobs_dir() -> PathBuf {
    crate::home_dir().join("jobs")
}

fn job_path(name: &str) -> Result<PathBuf> {
    check_name(name)?;
    Ok(jobs_dir().join(format!("{name}.json")))
}

impl JobFile {
    fn load(name: &str) -> Result<Self> {
        let path = job_path(name)?;
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "no job {name} here ({}): `maat job ls` lists them",
                path.display()
            )
        })?;
        let file: JobFile =
            serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
        if file.version > JOB_FILE_VERSION {
            bail!(
                "{} was written by a newer maat (version {})",
                path.display(),
                file.version
            );
        }
        Ok(file)
    }

    fn save(&self) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = jobs_dir();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("{}", dir.display()))?;
        let text = serde_json::to_string_pretty(self)?;
        Ok(write_private_file(
            &job_path(&self.name)?,
            text.as_bytes(),
            true,
        )?)
    }

    fn key(&self) -> Result<SigningKey> {
        let seed: [u8; 32] = hex::decode(&self.key)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| anyhow!("job {}: the key is not 32 bytes of hex", self.name))?;
        Ok(SigningKey::from_seed(&seed))
    }

    fn key_hash(&self) -> Result<[u8; 32]> {
        Ok(computation_key_hash(
            &self.key()?.verifying_key().to_bytes(),
        ))
    }

    fn lifetime(&self) -> Result<Vec<u8>> {
        hex::decode(&self.lifetime).map_err(|_| anyhow!("job {}: lifetime is not hex", self.name))
    }

    /// Holds the job's key in `c` and verifies every handle.
    fn activate(&self, c: &mut Client) -> Result<Vec<JobHandle>> {
        c.use_job(self.key()?, &self.lifetime()?)?;
        self.handles
            .iter()
            .map(|h| {
                let bytes = hex::decode(h).map_err(|_| anyhow!("a handle is not hex"))?;
                Ok(c.verify_handle(&bytes)?)
            })
            .collect()
    }

    fn handle_for(&self, c: &mut Client, path: &str) -> Result<JobHandle> {
        self.activate(c)?
            .into_iter()
            .find(|h| h.handle.path == path.as_bytes())
            .ok_or_else(|| {
                anyhow!(
                    "job {} has no handle for {path} (its lead opens files: maat job open)",
                    self.name
                )
            })
    }

    /// Keeps the newest lifetime the client learned while working.
    fn refresh_from(&mut self, c: &Client) -> Result<()> {
        if let Some(lifetime) = c.job_lifetime_held(&self.key_hash()?) {
            let text = hex::encode(lifetime);
            if text != self.lifetime {
                self.lifetime = text;
                self.save()?;
            }
        }
        Ok(())
    }
}

fn describe_lifetime(c: &Client, lifetime: &[u8]) -> String {
    use maat_proto::delegation::KeyLifetimeToken;
    use maat_proto::signed::Unverified;
    match Unverified::<KeyLifetimeToken>::decode(lifetime) {
        Ok(t) => {
            let expiry = t.unverified_body().expiry.0;
            let now = c.protocol_now();
            if expiry > now {
                format!("key valid {} s more", (expiry - now) / 1000)
            } else {
                format!("key lapsed {} s ago", (now - expiry) / 1000)
            }
        }
        Err(_) => "lifetime unreadable".into(),
    }
}

fn mode_name(mode: Mode) -> &'static str {
    if mode.allows(Mode::RANGE_KEYS) {
        return "read, by granted ranges";
    }
    match (mode.allows(Mode::READ), mode.allows(Mode::WRITE)) {
        (true, false) => "read",
        (false, true) => "write",
        _ => "read-write",
    }
}

pub fn run(cluster: &Option<PathBuf>, command: JobCommand) -> Result<()> {
    let mut c = crate::client(cluster)?;
    match command {
        JobCommand::Create { name } => {
            let path = job_path(&name)?;
            if path.exists() {
                bail!("job {name} exists ({}); pick another name", path.display());
            }
            let (key, lifetime) = c.job_create()?;
            let file = JobFile {
                version: JOB_FILE_VERSION,
                name: name.clone(),
                role: "lead".into(),
                lead: c.uid().unwrap_or_default(),
                key: hex::encode(key.to_seed()),
                lifetime: hex::encode(&lifetime),
                handles: Vec::new(),
            };
            file.save()?;
            eprintln!(
                "job {name} created ({}); open files with `maat job open {name} PATH`",
                describe_lifetime(&c, &lifetime)
            );
            Ok(())
        }
        JobCommand::Open {
            job,
            path,
            write,
            create,
            ranges,
        } => {
            let mut file = JobFile::load(&job)?;
            if file.role != "lead" {
                bail!("only the job's lead opens files for it");
            }
            let key = file.key()?;
            file.activate(&mut c)?;
            let access = if write || create {
                Access::ReadWrite
            } else {
                Access::Read
            };
            let (handle, _stat) = if ranges {
                c.openg_ranges(&key, &path)?
            } else {
                c.openg(&key, &path, access, create.then_some(0o644))?
            };
            let mode = handle.handle.mode;
            file.handles.retain(|h| {
                hex::decode(h)
                    .ok()
                    .and_then(|b| c.verify_handle(&b).ok())
                    .is_some_and(|h| h.handle.path != path.as_bytes())
            });
            file.handles.push(hex::encode(&handle.bytes));
            file.save()?;
            eprintln!("{path} opened for job {job} ({})", mode_name(mode));
            Ok(())
        }
        JobCommand::Export { job, to, out } => {
            let file = JobFile::load(&job)?;
            if file.role != "lead" {
                bail!("only the job's lead exports it");
            }
            let handles = file.activate(&mut c)?;
            let bundle = c.job_export(&job, &file.key()?, &file.lifetime()?, &handles, &to)?;
            let out = out.unwrap_or_else(|| PathBuf::from(format!("{job}.to-{to}.maatjob")));
            write_private_file(&out, &bundle, true)?;
            eprintln!(
                "wrote {} ({} file(s), sealed to {to}'s current login): give it to {to}, who runs `maat job join {}`",
                out.display(),
                handles.len(),
                out.display()
            );
            Ok(())
        }
        JobCommand::Join { file } => {
            let bytes = std::fs::read(&file).with_context(|| format!("{}", file.display()))?;
            let (grant, lead) = c.job_join(&bytes)?;
            let name = grant.name.clone();
            if job_path(&name)?.exists() {
                bail!("a job named {name} exists here already");
            }
            let job = JobFile {
                version: JOB_FILE_VERSION,
                name: name.clone(),
                role: "participant".into(),
                lead: lead.0,
                key: hex::encode(&grant.computation_seed[..]),
                lifetime: hex::encode(&grant.lifetime),
                handles: grant.handles.iter().map(hex::encode).collect(),
            };
            job.save()?;
            eprintln!(
                "joined job {name} (lead: user {}), {} file(s): `maat job ls` lists them",
                lead.0,
                grant.handles.len()
            );
            Ok(())
        }
        JobCommand::Ls => {
            let dir = jobs_dir();
            let mut names: Vec<String> = match std::fs::read_dir(&dir) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()
                            .and_then(|n| n.strip_suffix(".json"))
                            .map(str::to_string)
                    })
                    .collect(),
                Err(_) => Vec::new(),
            };
            names.sort();
            for name in names {
                let file = JobFile::load(&name)?;
                say!(
                    "{name}  {}  lead uid {}  {}  key hash {}",
                    file.role,
                    file.lead,
                    describe_lifetime(&c, &file.lifetime()?),
                    hex::encode(file.key_hash()?)
                );
                for h in file.activate(&mut c)? {
                    say!(
                        "  {}  {}",
                        String::from_utf8_lossy(&h.handle.path),
                        mode_name(h.handle.mode)
                    );
                }
            }
            Ok(())
        }
        JobCommand::Get {
            job,
            path,
            local,
            range,
        } => {
            let mut file = JobFile::load(&job)?;
            let handle = file.handle_for(&mut c, &path)?;
            let opened = c.openfh(&handle)?;
            // The whole file, or (a job opened by ranges) the bytes granted.
            let read = |out: &mut dyn Write| match range {
                Some((start, end)) => {
                    let reading = c.reading_handle(&path, opened.clone());
                    crate::files::write_range(&c, &reading, start, end, out)
                }
                None => c.get_opened(&path, &opened, out, &mut |_| {}).map(drop),
            };
            let result = if local == Path::new("-") {
                let stdout = std::io::stdout();
                let mut lock = stdout.lock();
                let r = read(&mut lock);
                lock.flush()?;
                r
            } else {
                let mut data = Vec::new();
                let r = read(&mut data);
                if r.is_ok() {
                    std::fs::write(&local, &data)
                        .with_context(|| format!("{}", local.display()))?;
                }
                r
            };
            file.refresh_from(&c)?;
            Ok(result?)
        }
        JobCommand::Put { job, local, path } => {
            let mut file = JobFile::load(&job)?;
            let handle = file.handle_for(&mut c, &path)?;
            if !handle.handle.mode.allows(Mode::WRITE) {
                bail!("job {job} opened {path} for reading only");
            }
            let data = std::fs::read(&local).with_context(|| format!("{}", local.display()))?;
            let opened = c.openfh(&handle)?;
            let result = c
                .put_opened(
                    &opened,
                    &mut data.as_slice(),
                    data.len() as u64,
                    None,
                    &mut |_| {},
                )
                .and_then(|_| c.set_size_by_handle(&handle, data.len() as u64));
            file.refresh_from(&c)?;
            Ok(result?)
        }
        JobCommand::Renew { job } => {
            let mut file = JobFile::load(&job)?;
            if file.role != "lead" {
                bail!("only the job's lead renews its key (participants' clients fetch the lead's renewals)");
            }
            file.activate(&mut c)?;
            let lifetime = c.job_renew(&file.key()?)?;
            file.lifetime = hex::encode(&lifetime);
            file.save()?;
            eprintln!("job {job}: {}", describe_lifetime(&c, &lifetime));
            Ok(())
        }
        JobCommand::End { job } => {
            let hash = match JobFile::load(&job) {
                Ok(file) => file.key_hash()?,
                Err(e) => hex::decode(&job)
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or(e)?,
            };
            let r = c.job_end(&hash)?;
            eprintln!(
                "job ended (notice {}): {} of {} OSDs refuse its key now",
                r.notice.notice_id, r.osds_told, r.osds
            );
            Ok(())
        }
    }
}
