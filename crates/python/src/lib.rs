//! `maat._native`: Maat's client library for Python (pyo3). The Python package `maat`
//! (crates/python/python/maat) wraps it in `maat.Client`, binary file objects and an fsspec
//! filesystem; this module is the thin layer that moves calls and errors across.
//!
//! Every call releases the GIL while it talks to the cluster, so Python threads overlap
//! their I/O. One `NativeClient` is one `maat_client::Client` behind a mutex: calls on
//! the same client take turns (the client is `&mut self`; issue 13 makes it `&self`), and
//! separate clients run side by side.

use maat_client::{Client, ClientError, ClusterFile, Credential, FileHandle, Home, OpenFlags};
use maat_proto::msg::{ErrorCode, FileStat, SetTime};
use pyo3::exceptions::{
    PyConnectionError, PyFileExistsError, PyFileNotFoundError, PyIsADirectoryError,
    PyNotADirectoryError, PyOSError, PyPermissionError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pyo3::create_exception!(
    _native,
    MaatError,
    PyOSError,
    "Any error from Maat that no built-in exception names (an OSError: `errno` is set)."
);
pyo3::create_exception!(
    _native,
    SecurityError,
    MaatError,
    "A security check failed: expired, revoked, replayed or tampered."
);
pyo3::create_exception!(
    _native,
    ExpiredError,
    SecurityError,
    "A capability or session expired (or is not valid yet): open again or log in again."
);
pyo3::create_exception!(
    _native,
    RevokedError,
    SecurityError,
    "The access was revoked by the administrator."
);
pyo3::create_exception!(
    _native,
    ReplayedError,
    SecurityError,
    "A request was refused as replayed or stale (its nonce was seen, or its time is too far off)."
);
pyo3::create_exception!(
    _native,
    TamperedError,
    SecurityError,
    "A MAC or signature did not verify: a message or token was changed on the way."
);
pyo3::create_exception!(
    _native,
    AuthenticationError,
    SecurityError,
    "Login failed: unknown user or wrong passphrase."
);
pyo3::create_exception!(
    _native,
    NotLoggedInError,
    MaatError,
    "No session: call Client.login(name, passphrase) first."
);
pyo3::create_exception!(
    _native,
    DataMissingError,
    MaatError,
    "Data inside a file's recorded size was not found on its OSD."
);

/// Linux errno values set on the OSErrors raised (Python compares them with `errno.*`).
mod errno {
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EBADF: i32 = 9;
    pub const EACCES: i32 = 13;
    pub const EEXIST: i32 = 17;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const EFBIG: i32 = 27;
    pub const ENOTEMPTY: i32 = 39;
    pub const ENOTCONN: i32 = 107;
    pub const ECONNREFUSED: i32 = 111;
}

/// The Python exception for a client error; refusals carry their code name as `.code`.
fn py_err(py: Python<'_>, e: ClientError) -> PyErr {
    use errno::*;
    let text = e.to_string();
    let (err, code) = match &e {
        ClientError::Refused(w) => {
            let err = match w.code {
                ErrorCode::PermissionDenied
                | ErrorCode::WrongUser
                | ErrorCode::WrongFile
                | ErrorCode::InsecureRefused
                | ErrorCode::ProtectionTooWeak => PyPermissionError::new_err((EACCES, text)),
                ErrorCode::NoSuchFile | ErrorCode::NoSuchUser | ErrorCode::NoSuchGroup => {
                    PyFileNotFoundError::new_err((ENOENT, text))
                }
                ErrorCode::AlreadyExists => PyFileExistsError::new_err((EEXIST, text)),
                ErrorCode::NotADirectory => PyNotADirectoryError::new_err((ENOTDIR, text)),
                ErrorCode::IsADirectory => PyIsADirectoryError::new_err((EISDIR, text)),
                ErrorCode::NotEmpty => PyOSError::new_err((ENOTEMPTY, text)),
                ErrorCode::CapabilityExpired
                | ErrorCode::CapabilityNotYetValid
                | ErrorCode::SessionExpired => ExpiredError::new_err((EACCES, text)),
                ErrorCode::Revoked => RevokedError::new_err((EACCES, text)),
                ErrorCode::ReplayedRequest | ErrorCode::StaleRequest => {
                    ReplayedError::new_err((EACCES, text))
                }
                ErrorCode::BadMac | ErrorCode::BadSignature | ErrorCode::TreeMismatch => {
                    TamperedError::new_err((EACCES, text))
                }
                ErrorCode::AuthenticationFailed => AuthenticationError::new_err((EACCES, text)),
                ErrorCode::InvalidArgument | ErrorCode::Malformed => {
                    MaatError::new_err((EINVAL, text))
                }
                ErrorCode::TooLarge => MaatError::new_err((EFBIG, text)),
                _ => MaatError::new_err((EIO, text)),
            };
            (err, Some(format!("{:?}", w.code)))
        }
        ClientError::Net { .. } => (PyConnectionError::new_err((ECONNREFUSED, text)), None),
        ClientError::BadAnswer { .. }
        | ClientError::Token { .. }
        | ClientError::Integrity { .. } => (TamperedError::new_err((EIO, text)), None),
        ClientError::NotLoggedIn => (NotLoggedInError::new_err((ENOTCONN, text)), None),
        ClientError::NotOpenForWriting(_) => (MaatError::new_err((EBADF, text)), None),
        ClientError::DataMissing(_) => (DataMissingError::new_err((EIO, text)), None),
        ClientError::Io { source, .. } => (
            PyOSError::new_err((source.raw_os_error().unwrap_or(EIO), text)),
            None,
        ),
        ClientError::NotInJob(_) => (PyPermissionError::new_err((EACCES, text)), None),
        ClientError::InvalidArgument(_) | ClientError::Config(_) => {
            (MaatError::new_err((EINVAL, text)), None)
        }
        _ => (MaatError::new_err((EIO, text)), None),
    };
    if let Some(code) = code {
        // Best effort: an exception object that refuses attributes keeps its message.
        let _ = err.value(py).setattr("code", code);
    }
    err
}

fn local_err(what: &str, e: std::io::Error) -> PyErr {
    PyOSError::new_err((
        e.raw_os_error().unwrap_or(errno::EIO),
        format!("{what}: {e}"),
    ))
}

/// A stat as a dict: name-free attributes (the caller adds `name`).
fn stat_dict<'py>(py: Python<'py>, s: &FileStat) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("type", if s.is_dir { "directory" } else { "file" })?;
    d.set_item("size", s.size)?;
    d.set_item("mode", s.mode)?;
    d.set_item("owner", &s.owner)?;
    d.set_item("group", &s.group)?;
    d.set_item("mtime", s.mtime as f64 / 1000.0)?;
    d.set_item("id", s.id)?;
    d.set_item("partition", &s.partition)?;
    d.set_item("protection", format!("{:?}", s.protection).to_uppercase())?;
    d.set_item("encrypted", s.encrypted)?;
    Ok(d)
}

/// One Maat client (one user's session), shared by the handles it opens. Python threads
/// use it at once: the client takes `&self` and each call runs without the GIL.
#[pyclass(frozen, module = "maat._native")]
struct NativeClient {
    inner: Arc<Client>,
}

/// Runs `f` on the client without the GIL, mapping its error.
fn with_client<T: Send>(
    py: Python<'_>,
    inner: &Client,
    f: impl FnOnce(&Client) -> Result<T, ClientError> + Send,
) -> PyResult<T> {
    py.detach(|| f(inner)).map_err(|e| py_err(py, e))
}

#[pymethods]
impl NativeClient {
    /// A client of the cluster described by the file `cluster` (`maat up` writes
    /// DIR/client.toml), keeping identity and session in the directory `home`.
    #[new]
    #[pyo3(signature = (cluster, home))]
    fn new(py: Python<'_>, cluster: PathBuf, home: PathBuf) -> PyResult<Self> {
        let file = ClusterFile::load(&cluster).map_err(|e| py_err(py, e))?;
        let client = Client::new(file, Some(Home::new(home))).map_err(|e| py_err(py, e))?;
        Ok(Self {
            inner: Arc::new(client),
        })
    }

    /// Logs in as `name` (the passphrase is stretched locally and never sent).
    fn login(&self, py: Python<'_>, name: String, passphrase: String) -> PyResult<()> {
        with_client(py, &self.inner, move |c| {
            c.login(&name, Credential::Passphrase(passphrase.as_bytes()))
        })
    }

    /// Ends the session.
    fn logout(&self, py: Python<'_>) -> PyResult<()> {
        with_client(py, &self.inner, |c| c.logout())
    }

    /// Makes sure there is a live session (logs in with the home's stored key if any).
    fn ensure_session(&self, py: Python<'_>) -> PyResult<()> {
        with_client(py, &self.inner, |c| c.ensure_session())
    }

    /// The logged-in user's name.
    fn whoami(&self) -> PyResult<Option<String>> {
        Ok(self.inner.user_name())
    }

    /// Attributes of `path`, with its link count and its change and access times.
    fn stat<'py>(&self, py: Python<'py>, path: String) -> PyResult<Bound<'py, PyDict>> {
        let (s, more) = with_client(py, &self.inner, move |c| c.stat_full(&path))?;
        let d = stat_dict(py, &s)?;
        d.set_item("nlink", more.nlink)?;
        d.set_item("ctime", more.ctime as f64 / 1000.0)?;
        d.set_item("atime", more.atime as f64 / 1000.0)?;
        Ok(d)
    }

    /// Sets the access and/or modification time of `path` (seconds since the epoch, as
    /// `os.utime`; `None` leaves one as it is); `now=True` sets both to the MDS's time now.
    #[pyo3(signature = (path, atime=None, mtime=None, now=false))]
    fn utime(
        &self,
        py: Python<'_>,
        path: String,
        atime: Option<f64>,
        mtime: Option<f64>,
        now: bool,
    ) -> PyResult<()> {
        let ms = |t: f64| SetTime::At((t.max(0.0) * 1000.0).round() as u64);
        let (atime, mtime) = if now {
            (Some(SetTime::Now), Some(SetTime::Now))
        } else {
            (atime.map(ms), mtime.map(ms))
        };
        with_client(py, &self.inner, move |c| c.set_times(&path, atime, mtime))
    }

    /// Entries of the directory `path`: (name, attributes).
    fn ls<'py>(
        &self,
        py: Python<'py>,
        path: String,
    ) -> PyResult<Vec<(String, Bound<'py, PyDict>)>> {
        let entries = with_client(py, &self.inner, move |c| c.readdir(&path))?;
        entries
            .iter()
            .map(|(name, s)| Ok((name.clone(), stat_dict(py, s)?)))
            .collect()
    }

    /// Creates a directory (and its parents with `parents`).
    #[pyo3(signature = (path, mode=0o755, parents=false))]
    fn mkdir(&self, py: Python<'_>, path: String, mode: u16, parents: bool) -> PyResult<()> {
        with_client(py, &self.inner, move |c| c.mkdir(&path, mode, parents))
    }

    /// Removes an empty directory.
    fn rmdir(&self, py: Python<'_>, path: String) -> PyResult<()> {
        with_client(py, &self.inner, move |c| c.rmdir(&path))
    }

    /// Removes a file and its objects.
    fn rm(&self, py: Python<'_>, path: String) -> PyResult<()> {
        with_client(py, &self.inner, move |c| c.unlink(&path))
    }

    /// Makes `dst` another name of the file `src` (a hard link, issue 44: one file and
    /// one set of permissions under both names; not of a directory).
    fn link(&self, py: Python<'_>, src: String, dst: String) -> PyResult<()> {
        with_client(py, &self.inner, move |c| {
            c.hard_link(&src, &dst).map(|_| ())
        })
    }

    /// Makes a symbolic link at `path` pointing to `target` (never followed by Maat).
    fn symlink(&self, py: Python<'_>, target: String, path: String) -> PyResult<()> {
        with_client(py, &self.inner, move |c| {
            c.symlink(&target, &path).map(|_| ())
        })
    }

    /// The target of the symbolic link at `path`.
    fn readlink(&self, py: Python<'_>, path: String) -> PyResult<String> {
        with_client(py, &self.inner, move |c| c.readlink(&path))
    }

    /// Makes a FIFO at `path` with permission bits `mode` (each machine's kernel
    /// serves it; Maat keeps the name).
    #[pyo3(signature = (path, mode=0o666))]
    fn mkfifo(&self, py: Python<'_>, path: String, mode: u16) -> PyResult<()> {
        let mode = maat_proto::msg::S_IFIFO | (mode & 0o7777);
        with_client(py, &self.inner, move |c| {
            c.mknod(&path, mode, 0).map(|_| ())
        })
    }

    /// Renames `src` to `dst`.
    fn mv(&self, py: Python<'_>, src: String, dst: String) -> PyResult<()> {
        with_client(py, &self.inner, move |c| c.rename(&src, &dst))
    }

    /// Sets permission bits.
    fn chmod(&self, py: Python<'_>, path: String, mode: u16) -> PyResult<()> {
        with_client(py, &self.inner, move |c| c.chmod(&path, mode))
    }

    /// This user's umask (issue 40), replaced when `set` is given; answers the one in
    /// force.
    #[pyo3(signature = (set=None))]
    fn umask(&self, py: Python<'_>, set: Option<u16>) -> PyResult<u16> {
        with_client(py, &self.inner, move |c| c.umask(set))
    }

    /// Sets owner and/or group (by name).
    #[pyo3(signature = (path, owner=None, group=None))]
    fn chown(
        &self,
        py: Python<'_>,
        path: String,
        owner: Option<String>,
        group: Option<String>,
    ) -> PyResult<()> {
        with_client(py, &self.inner, move |c| {
            c.chown(&path, owner.as_deref(), group.as_deref())
        })
    }

    /// Stores the local file `local` at `remote`; returns the bytes stored.
    fn put(&self, py: Python<'_>, local: PathBuf, remote: String) -> PyResult<u64> {
        let mut file = std::fs::File::open(&local)
            .map_err(|e| local_err(&format!("opening {}", local.display()), e))?;
        let size = file
            .metadata()
            .map_err(|e| local_err(&format!("reading {}", local.display()), e))?
            .len();
        with_client(py, &self.inner, move |c| {
            c.put(&mut file, size, &remote, &mut |_| {}).map(|s| s.size)
        })
    }

    /// Fetches `remote` into the local file `local`; returns the bytes written.
    fn get(&self, py: Python<'_>, remote: String, local: PathBuf) -> PyResult<u64> {
        let mut file = std::fs::File::create(&local)
            .map_err(|e| local_err(&format!("creating {}", local.display()), e))?;
        with_client(py, &self.inner, move |c| {
            c.get_whole(&remote, &mut file, &mut |_| {})
        })
    }

    /// The whole content of `path`.
    fn cat<'py>(&self, py: Python<'py>, path: String) -> PyResult<Bound<'py, PyBytes>> {
        let data = with_client(py, &self.inner, move |c| {
            let mut out = Vec::new();
            c.get_whole(&path, &mut out, &mut |_| {})?;
            Ok(out)
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// Stores `data` as the whole content of `path` (created 0644 if new).
    fn pipe(&self, py: Python<'_>, path: String, data: Vec<u8>) -> PyResult<()> {
        with_client(py, &self.inner, move |c| {
            let size = data.len() as u64;
            c.put(&mut data.as_slice(), size, &path, &mut |_| {})
                .map(|_| ())
        })
    }

    /// Opens `path` for byte-range I/O (what `maat.Client.open` builds file objects on).
    #[pyo3(signature = (path, write=false, create=None, exclusive=false, truncate=false))]
    fn open_handle(
        &self,
        py: Python<'_>,
        path: String,
        write: bool,
        create: Option<u16>,
        exclusive: bool,
        truncate: bool,
    ) -> PyResult<NativeHandle> {
        let flags = OpenFlags {
            write,
            create,
            exclusive,
            truncate,
        };
        let handle = with_client(py, &self.inner, move |c| c.open_file(&path, flags))?;
        Ok(NativeHandle {
            client: Arc::clone(&self.inner),
            handle: Mutex::new(Some(handle)),
        })
    }
}

/// An open file of a `NativeClient`: positionless reads and writes (the file object in
/// `maat` keeps the position).
#[pyclass(frozen, module = "maat._native")]
struct NativeHandle {
    client: Arc<Client>,
    handle: Mutex<Option<FileHandle>>,
}

impl NativeHandle {
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Client, &mut FileHandle) -> Result<T, ClientError> + Send,
    ) -> PyResult<T> {
        let client = &self.client;
        let handle = &self.handle;
        let result = py.detach(|| {
            let mut h = handle.lock().map_err(|_| "handle unusable after a panic")?;
            let h = h.as_mut().ok_or("I/O operation on closed file")?;
            Ok::<_, &'static str>(f(client, h))
        });
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(py_err(py, e)),
            Err(text) => Err(pyo3::exceptions::PyValueError::new_err(text)),
        }
    }
}

#[pymethods]
impl NativeHandle {
    /// Up to `n` bytes at `offset` (short at the end of the file).
    fn pread<'py>(&self, py: Python<'py>, offset: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.run(py, move |c, h| c.read_file_at(h, offset, n))?;
        Ok(PyBytes::new(py, &data))
    }

    /// Writes `data` at `offset`; returns the bytes written.
    fn pwrite(&self, py: Python<'_>, offset: u64, data: &[u8]) -> PyResult<usize> {
        let data = data.to_vec();
        self.run(py, move |c, h| {
            c.write_file_at(h, offset, &data)?;
            Ok(data.len())
        })
    }

    /// Sets the size (recorded at once).
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        self.run(py, move |c, h| c.truncate_file(h, size))
    }

    /// Records the size at the MDS if this handle wrote since the last record.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |c, h| c.flush_file(h))
    }

    /// The size as this handle sees it.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |_, h| Ok(h.size()))
    }

    /// Whether it was opened for writing.
    #[getter]
    fn writable(&self, py: Python<'_>) -> PyResult<bool> {
        self.run(py, |_, h| Ok(h.writable()))
    }

    /// Flushes and closes (closing twice is harmless).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let open = self.handle.lock().map(|h| h.is_some()).unwrap_or(false);
        if !open {
            return Ok(());
        }
        let flushed = self.run(py, |c, h| c.flush_file(h));
        if let Ok(mut h) = self.handle.lock() {
            *h = None;
        }
        flushed
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.lock().map(|h| h.is_none()).unwrap_or(true)
    }
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<NativeClient>()?;
    m.add_class::<NativeHandle>()?;
    m.add("MaatError", py.get_type::<MaatError>())?;
    m.add("SecurityError", py.get_type::<SecurityError>())?;
    m.add("ExpiredError", py.get_type::<ExpiredError>())?;
    m.add("RevokedError", py.get_type::<RevokedError>())?;
    m.add("ReplayedError", py.get_type::<ReplayedError>())?;
    m.add("TamperedError", py.get_type::<TamperedError>())?;
    m.add("AuthenticationError", py.get_type::<AuthenticationError>())?;
    m.add("NotLoggedInError", py.get_type::<NotLoggedInError>())?;
    m.add("DataMissingError", py.get_type::<DataMissingError>())?;
    m.add("STRIPE_UNIT_BYTES", maat_proto::msg::STRIPE_UNIT_BYTES)?;
    m.add("FILE_IO_BYTES_MAX", maat_client::FILE_IO_BYTES_MAX)?;
    Ok(())
}
