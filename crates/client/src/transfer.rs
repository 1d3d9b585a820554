//! Whole-file transfers: put (stripes sealed when the file is encrypted, a batch of
//! them in flight at once, the size and, for a file created encrypted, its lockbox
//! recorded after every stripe is durable) and get (stripes read a window at a time,
//! opened and checked, the first window's keys asked for while it is read).

use super::*;
use crate::copy_reads::size_known;
use crate::data::{read_request, remove_request, write_request};
use crate::machines::{CopyAnswer, PastEnd};

/// The next `len` bytes of a put's input.
fn read_input(reader: &mut dyn Read, len: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    reader
        .read_exact(&mut buf)
        .map_err(|source| ClientError::Io {
            what: "reading input".into(),
            source,
        })?;
    Ok(buf)
}

impl Client {
    /// Stores `size` bytes from `reader` at `path` (creating it 0644), striping files of
    /// at least [`STRIPE_UNIT_BYTES`] over OSDs; every stripe is durable on its OSD before
    /// the size is recorded at the MDS.
    pub fn put(
        &self,
        reader: &mut dyn Read,
        size: u64,
        path: &str,
        progress: Progress<'_>,
    ) -> Result<FileStat> {
        self.put_with(reader, size, path, None, progress)
    }

    /// [`Client::put`], choosing whether a new file is encrypted (SPEC H3; `None`: the
    /// cluster's default). An existing file keeps what it is. A small new file is
    /// stored under a reserved id and then linked (`reserved`).
    pub fn put_with(
        &self,
        reader: &mut dyn Read,
        size: u64,
        path: &str,
        encrypt: Option<bool>,
        progress: Progress<'_>,
    ) -> Result<FileStat> {
        if let Some(sealed) = self.may_put_reserved(size, path, encrypt)? {
            let data = read_input(reader, size)?;
            if let Some(stat) = self.put_reserved(&data, path, sealed, &mut *progress)? {
                return Ok(stat);
            }
            // Not through a reserved id again: the path exists, or none is reserved.
            return self.put_usual(&mut &data[..], size, path, encrypt, false, progress);
        }
        self.put_usual(reader, size, path, encrypt, true, progress)
    }

    /// [`Client::put_with`] through an open: the file is created (if new) before its
    /// data is stored, and its size recorded after; under a reserved id when `reserve`
    /// and one is held or given (`reserved`).
    fn put_usual(
        &self,
        reader: &mut dyn Read,
        size: u64,
        path: &str,
        encrypt: Option<bool>,
        reserve: bool,
        progress: Progress<'_>,
    ) -> Result<FileStat> {
        self.forget_opened_path(path);
        // The open's capability was issued about now: a kept open's lifetime counts from
        // here, not from the end of a long put.
        let began = self.now();
        // A file this put creates encrypted gets its lockbox with its size (SPEC H5).
        let mut opened = if self.seals_new_files(encrypt)? {
            self.open_sealed(path, 0o644)?
        } else if reserve {
            self.open(path, Access::ReadWrite, Some(0o644))?
        } else {
            self.open_predicting(path, Access::ReadWrite, Some(0o644), &[])?
        };
        let first_lockbox = self.seal_pending(&mut opened)?;
        let sealing = first_lockbox.is_some();
        if !sealing {
            self.encrypt_if_new(path, &mut opened, encrypt)?;
        }
        let mut recorded = Vec::new();
        let stored = self
            .put_opened(&opened, reader, size, Some(opened.stat.size), progress)
            .and_then(|written| {
                recorded.clone_from(&written);
                match first_lockbox {
                    Some(lockbox) => self.set_size_lockbox(path, &opened, size, written, lockbox),
                    None => self.set_size_written(path, &opened, size, written),
                }
            });
        if stored.is_err() && sealing {
            // (As `set_size_lockbox` does when the MDS refuses.)
            self.file_keys.lock().remove(&(opened.stat.id, 1));
        }
        stored?;
        let plain = opened.stat.crypt.is_none() && !opened.stat.encrypted;
        // A file this put made encrypted: its crypt record is now what the MDS recorded,
        // the first lockbox (which `opened` shows) and the generations just written.
        let first = sealing
            && opened.stat.crypt.as_mut().is_some_and(|c| {
                recorded
                    .iter()
                    .all(|&(first, end, generation)| c.record(first, end, generation).is_ok())
                    && c.check().is_ok()
            });
        opened.stat.size = size;
        if plain || first {
            // The open was read-write, so it serves this client's reads of what it just
            // wrote (SPEC M5), as a read open would, with the keys it holds (if its
            // capability allows reading: `remember_read_open` checks). (A write to
            // an encrypted file that existed changes its record in ways kept at the MDS:
            // it is opened again.)
            self.remember_read_open(path, &opened, began);
        }
        let mut stat = opened.stat;
        stat.crypt = None;
        Ok(stat)
    }

    /// Makes a just-opened empty file of this user encrypted when `encrypt` (or, for
    /// `None`, the cluster default) asks for it. An explicit request for encryption
    /// (`Some(true)`) that cannot be honoured (the file exists in clear with data, or
    /// belongs to someone else) is an error before any data is written, never a silent
    /// plaintext write (issue 40, item 5).
    pub(crate) fn encrypt_if_new(
        &self,
        path: &str,
        opened: &mut Opened,
        encrypt: Option<bool>,
    ) -> Result<()> {
        let pending = opened.stat.crypt.as_ref().is_some_and(|c| c.is_pending());
        if opened.stat.encrypted && !pending {
            return Ok(());
        }
        let mine = self.user_name().as_deref() == Some(opened.stat.owner.as_str());
        if encrypt == Some(true) && !pending {
            let why = if self.insecure_user.is_some() {
                Some("a NOSEC client encrypts nothing".to_string())
            } else if !mine {
                Some(format!(
                    "it exists unencrypted and belongs to {}",
                    opened.stat.owner
                ))
            } else if opened.stat.size != 0 {
                Some("it exists unencrypted and holds data".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ClientError::InvalidArgument(format!(
                    "{path}: cannot encrypt: {why}; encryption is chosen when a file is \
                     created (write to a new path, or remove the file first)"
                )));
            }
        }
        if opened.stat.size != 0 || self.insecure_user.is_some() {
            return Ok(());
        }
        // A file created encrypted whose lockbox is still to come is encrypted whatever
        // this writer would choose.
        let wanted = pending
            || match encrypt {
                Some(w) => w,
                None => self.encrypts_new_files()?,
            };
        if wanted && self.user_name().as_deref() == Some(opened.stat.owner.as_str()) {
            self.make_encrypted(path, opened)?;
        }
        Ok(())
    }

    /// Records the size, and for an encrypted file the generations of the stripes
    /// written (`written`, from [`Client::put_opened`]) and the key tree of `opened`
    /// they were sealed under (SPEC H7).
    pub fn set_size_written(
        &self,
        path: &str,
        opened: &Opened,
        size: u64,
        written: Vec<(u32, u32, u64)>,
    ) -> Result<()> {
        if written.is_empty() {
            return self.set_size(path, opened, size);
        }
        let (_, lockbox) = crate::crypt::lockbox_of(opened)?;
        self.expect_ok(MdsRequest::SetSizeSealed {
            path: path.into(),
            file: opened.stat.id,
            size,
            tree_version: lockbox.tree_version,
            written,
        })
    }

    /// Writes `size` bytes from `reader` as the whole content of an opened file (stripes
    /// in flight at once) and removes the stripes past the new end: those of `old_size`,
    /// or, when the old size is unknown (a job's handle), each next stripe until one is
    /// missing. The caller records the size, with the stripe generations returned (an
    /// encrypted file's: `(first, end, generation)`; empty for a plaintext file).
    pub fn put_opened(
        &self,
        opened: &Opened,
        reader: &mut dyn Read,
        size: u64,
        old_size: Option<u64>,
        progress: Progress<'_>,
    ) -> Result<Vec<(u32, u32, u64)>> {
        let opened = opened.clone();
        let stripes = stripes_for(size);
        if let (Some(old_size), 0) = (old_size, size % STRIPE_UNIT_BYTES) {
            // Stripes past both ends exist only where a write failed after some of its
            // stripes were stored (its answer lost, its client gone). A read looks past
            // the recorded size only when that size ends on a stripe boundary (0
            // included), so then they must go, or the file would read as more than this
            // put wrote. First, so that a failure here changes nothing.
            self.remove_stripes_from(&opened, stripes.max(stripes_for(old_size)))?;
        }
        let window = self.stripes_in_flight()?;
        let mut crypt = match opened.stat.crypt {
            Some(_) => Some(self.stripe_crypt(&opened, 0..window.min(stripes))?),
            None => None,
        };
        let generation = crypt::new_generation(&mut self.nonce_rng());
        let mut done = 0u64;
        let mut stripe = 0u32;
        while stripe < stripes {
            let n = (stripes - stripe).min(window);
            if crypt.is_some() && stripe > 0 {
                // Keys for this window (held ones unless the key level is too deep for
                // one request to cover the file, SPEC H8).
                crypt = Some(self.stripe_crypt(&opened, stripe..stripe + n)?);
            }
            let mut calls = Vec::with_capacity(n as usize);
            let mut lens = Vec::with_capacity(n as usize);
            for k in stripe..stripe + n {
                let len = (size - done - lens.iter().sum::<u64>()).min(STRIPE_UNIT_BYTES);
                let buf = read_input(reader, len)?;
                let (osd, object) = self.stripe_target(&opened, k)?;
                calls.push((osd, object, buf));
                lens.push(len);
            }
            let calls = match &crypt {
                Some(c) => seal_all(c, generation, calls, &mut self.nonce_rng())?,
                None => calls,
            };
            let calls = calls
                .into_iter()
                .map(|(osd, object, data)| (osd, write_request(&opened, object, data)))
                .collect();
            for (answer, len) in self.parallel(&opened, calls)?.into_iter().zip(lens) {
                answer?;
                done += len;
            }
            progress(done);
            stripe += n;
        }
        assert_eq!(
            done, size,
            "a put stores exactly the bytes whose size it records"
        );
        let written = match crypt {
            Some(_) if stripes > 0 => vec![(0, stripes, generation)],
            _ => Vec::new(),
        };
        let Some(old_size) = old_size else {
            self.remove_stripes_from(&opened, stripes)?;
            return Ok(written);
        };
        let old_stripes = stripes_for(old_size);
        let mut removes = Vec::new();
        for stripe in stripes..old_stripes {
            let (osd, object) = self.stripe_target(&opened, stripe)?;
            removes.push((osd, remove_request(&opened, object)));
        }
        for answer in self.parallel(&opened, removes)? {
            match answer {
                Ok(_) => {}
                Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// Removes stripe `first` and each next one until one does not exist. A stripe that
    /// no copy that answered holds, but whose other copies did not answer, is removed as
    /// well (the copies that cannot take the removal are recorded as missed, so that
    /// they never serve what they may hold), and is the last.
    pub(crate) fn remove_stripes_from(&self, opened: &Opened, first: u32) -> Result<()> {
        for stripe in first.. {
            match self.look_past_end(opened, stripe)? {
                Some(PastEnd::Held) => self.remove_object(opened, stripe)?,
                Some(PastEnd::Unanswered) => return self.remove_object(opened, stripe),
                // A write-only open cannot look: stripes past the end stay (a read stops
                // at the first short stripe, so only a size that is a multiple of the
                // stripe unit could show them).
                Some(PastEnd::Absent) | None => break,
            }
        }
        Ok(())
    }

    /// Streams the file at `path` into `writer`; returns the bytes written.
    ///
    /// Stripes are read until one is short, so a cached (older) size never truncates the
    /// data; a missing stripe inside the recorded size is an error, never a hole.
    pub fn get(&self, path: &str, writer: &mut dyn Write, progress: Progress<'_>) -> Result<u64> {
        let opened = self.open(path, Access::Read, None)?;
        let mut counted = Counted {
            inner: writer,
            n: 0,
        };
        match self.get_opened(path, &opened, &mut counted, &mut *progress) {
            // A T10 open from this client's cache whose credential was revoked (SPEC T4):
            // the refusal dropped it, and the MDS decides again on a fresh open, once,
            // if nothing was written yet.
            Err(ClientError::Refused(e))
                if e.code == ErrorCode::Revoked
                    && opened.capability.is_empty()
                    && opened.mds_cached
                    && counted.n == 0 =>
            {
                let opened = self.open(path, Access::Read, None)?;
                self.get_opened(path, &opened, writer, progress)
            }
            // A stripe the open's size promised is gone: the open kept in this client's
            // cache may be older than another writer's shorter put (found by the
            // simulator, issue 39: "data missing" for a file that exists). The MDS is
            // asked again, once, if nothing was written yet; missing again, it is
            // missing.
            Err(ClientError::DataMissing(_)) if counted.n == 0 => {
                self.forget_opened_path(path);
                let opened = self.open(path, Access::Read, None)?;
                self.get_opened(path, &opened, writer, progress)
            }
            other => other,
        }
    }

    /// Streams an opened file into `writer` (`path` names it in errors); returns the
    /// bytes written.
    pub fn get_opened(
        &self,
        path: &str,
        opened: &Opened,
        writer: &mut dyn Write,
        progress: Progress<'_>,
    ) -> Result<u64> {
        if opened.stat.crypt.as_ref().is_some_and(|c| c.is_pending()) {
            // Created encrypted, its writer not finished: nothing readable yet (SPEC H5).
            // (Such opens are never cached, so this is the MDS's view now.)
            return Ok(0);
        }
        if opened.stat.encrypted && opened.stat.crypt.is_none() {
            // Never hand out ciphertext as the file's bytes.
            return Err(ClientError::Keys(format!(
                "{path} is encrypted but this open carries no crypt record: open it again"
            )));
        }
        let mut opened = opened.clone();
        let mut expected = opened.stat.size;
        let mut known = stripes_for(expected);
        let window = self.stripes_in_flight()?;
        // The first window's keys are asked for while its stripes are read.
        let (mut first_keys, mut full) = match opened.stat.crypt {
            Some(_) => {
                let leaf = crate::crypt::lockbox_of(&opened)?.1.shape.leaf_size_bytes();
                let begun = self.stripe_crypt_begin(&opened, 0..window.min(known))?;
                (
                    Some(begun),
                    maat_proto::encrypted::sealed_len(STRIPE_UNIT_BYTES, leaf),
                )
            }
            None => (None, STRIPE_UNIT_BYTES),
        };
        let mut crypt = None;
        let mut refreshed = false;
        let mut done = 0u64;
        let mut stripe = 0u32;
        'stripes: loop {
            // Inside the recorded size a window at a time; past it (the file grew since
            // the size was read) one stripe at a time until one is short or missing.
            let n = if stripe < known {
                (known - stripe).min(window)
            } else {
                1
            };
            if crypt.is_some() && stripe > 0 && stripe < known {
                crypt = Some(self.stripe_crypt(&opened, stripe..stripe + n)?);
            }
            let mut calls = Vec::with_capacity(n as usize);
            for k in stripe..stripe + n {
                let (osd, object) = self.stripe_target(&opened, k)?;
                calls.push((osd, read_request(&opened, object, full)));
            }
            let answers = match calls.pop() {
                // (Past a size the MDS gave, a copy that holds nothing stands over a
                // silent one. A job's handle comes with no size: there, every stripe is
                // read as inside the file.)
                Some((osd, request))
                    if stripe >= known && done >= expected && size_known(&opened) =>
                {
                    let answer = self.read_past_end(&opened, osd, request);
                    let unanswered = matches!(
                        crate::copies::classify(&answer),
                        CopyAnswer::Failed | CopyAnswer::Stale
                    );
                    if unanswered && self.size_stands(path, &opened)? {
                        break 'stripes;
                    }
                    vec![answer]
                }
                Some(last) => {
                    calls.push(last);
                    self.parallel(&opened, calls)?
                }
                None => Vec::new(),
            };
            if let Some(begun) = first_keys.take() {
                crypt = Some(self.stripe_crypt_end(&opened, begun)?);
            }
            for (k, answer) in (stripe..).zip(answers) {
                let mut data = match answer {
                    Ok(OsdResponse::Data(d)) => d,
                    Ok(_) => return Err(self.bad("osd", "unexpected answer")),
                    Err(ClientError::Refused(e))
                        if e.code == ErrorCode::NoSuchObject && done >= expected =>
                    {
                        break 'stripes;
                    }
                    Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => {
                        return Err(ClientError::DataMissing(format!(
                            "{path}: stripe {k} of file {} not found",
                            opened.stat.id
                        )))
                    }
                    Err(e) => return Err(e),
                };
                if crypt.is_some() && k >= known {
                    // A stripe past the size read at open (the file grew): its keys.
                    crypt = Some(self.stripe_crypt(&opened, k..k + 1)?);
                }
                if let Some(c) = &crypt {
                    let within = expected.saturating_sub(u64::from(k) * STRIPE_UNIT_BYTES);
                    // A copy whose blocks fail authentication: another copy's may pass
                    // (issue 41).
                    let first = c.open(k, data, within, 0..STRIPE_UNIT_BYTES);
                    let first = self.or_other_copies(&opened, k, full, first, |other| {
                        c.open(k, other, within, 0..STRIPE_UNIT_BYTES)
                    });
                    data = match first {
                        Ok(plain) => plain,
                        // A writer may have rewritten the stripe since this open: open the
                        // file again (its generations come fresh) and read on from this
                        // stripe, unless the stripes already handed out changed too: then
                        // what was given is another version's (a torn read, simulator
                        // seed 1795786985521578218, issue 39) and the read fails.
                        Err(ClientError::Integrity { .. }) if !refreshed => {
                            refreshed = true;
                            self.forget_opened_path(path);
                            let before = opened.stat.crypt.clone();
                            let before_id = opened.stat.id;
                            opened = self.open(path, Access::Read, None)?;
                            if (k > 0 && opened.stat.id != before_id)
                                || !same_stripes(before.as_ref(), opened.stat.crypt.as_ref(), k)
                            {
                                return Err(ClientError::Replaced(path.to_string()));
                            }
                            // (The size may have changed too, as with a kept open.)
                            expected = opened.stat.size;
                            known = stripes_for(expected);
                            let leaf = crate::crypt::lockbox_of(&opened)?.1.shape.leaf_size_bytes();
                            full = maat_proto::encrypted::sealed_len(STRIPE_UNIT_BYTES, leaf);
                            if k == 0 {
                                // (Past stripe 0 the loop asks for each window's keys.)
                                let n = known.min(window).max(1);
                                crypt = Some(self.stripe_crypt(&opened, 0..n)?);
                            }
                            stripe = k;
                            continue 'stripes;
                        }
                        Err(e) => return Err(e),
                    };
                }
                writer.write_all(&data).map_err(|source| ClientError::Io {
                    what: "writing output".into(),
                    source,
                })?;
                done += data.len() as u64;
                progress(done);
                if (data.len() as u64) < STRIPE_UNIT_BYTES {
                    break 'stripes;
                }
            }
            stripe += n;
        }
        if done < expected {
            // The open may be older than a shorter rewrite (an open kept in this client's
            // cache, the file then rewritten by another client or a mount: issue 44): the
            // bytes read are the objects as they are now, so the MDS's size now decides.
            self.forget_opened_path(path);
            let now = self.stat(path)?;
            if now.id == opened.stat.id && now.size == done {
                return Ok(done);
            }
            return Err(ClientError::DataMissing(format!(
                "{path}: {done} of {expected} bytes found"
            )));
        }
        Ok(done)
    }
}

/// Seals each `(osd, object, plaintext)` stripe of an encrypted file, the two halves of
/// the batch on two threads (one stripe on this one).
fn seal_all(
    crypt: &crypt::StripeCrypt,
    generation: u64,
    calls: Vec<(u64, ObjectId, Vec<u8>)>,
    rng: &mut rand_chacha::ChaCha20Rng,
) -> Result<Vec<(u64, ObjectId, Vec<u8>)>> {
    let mut seeds = [[0u8; 32]; 2];
    for s in seeds.iter_mut() {
        rng.fill_bytes(s);
    }
    let half = calls.len().div_ceil(2);
    let mut calls = calls;
    let second = calls.split_off(half);
    let seal = |part: Vec<(u64, ObjectId, Vec<u8>)>, seed: [u8; 32]| {
        let mut rng = rand_chacha::ChaCha20Rng::from_seed(seed);
        part.into_iter()
            .map(|(osd, object, plain)| {
                let sealed = crypt.seal(object.stripe, generation, &plain, &mut rng)?;
                Ok((osd, object, sealed))
            })
            .collect::<Result<Vec<_>>>()
    };
    let [a, b] = seeds;
    if second.is_empty() {
        // One stripe (a small object): a thread would cost more than it saves.
        return seal(calls, a);
    }
    let (first, second) = std::thread::scope(|scope| {
        let handle = scope.spawn(|| seal(second, b));
        let first = seal(calls, a);
        (first, handle.join())
    });
    let mut out = first?;
    out.extend(second.map_err(|_| ClientError::Internal("the sealing thread panicked".into()))??);
    Ok(out)
}

/// Whether stripes `0..end` are sealed under the same generations and key trees in
/// both crypt records (two opens of one file), so that bytes read under the first are
/// the second's too.
fn same_stripes(
    before: Option<&maat_proto::file_crypt::FileCrypt>,
    after: Option<&maat_proto::file_crypt::FileCrypt>,
    end: u32,
) -> bool {
    match (before, after) {
        (Some(b), Some(a)) => (0..end).all(|s| {
            b.generation(s) == a.generation(s) && b.earlier_version(s) == a.earlier_version(s)
        }),
        (None, None) => true,
        _ => end == 0,
    }
}

/// A writer that counts what went through it.
struct Counted<'a> {
    inner: &'a mut dyn Write,
    n: u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
