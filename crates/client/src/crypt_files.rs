//! Byte-range access to encrypted files (SPEC H3). A stripe is sealed whole under one
//! write generation, so a handle keeps the stripes it writes as plaintext until it sends
//! them: when more than [`PENDING_STRIPES_MAX`] wait, before a truncation, and on flush.
//! Each send seals the waiting stripes under a fresh generation; flush records the
//! generations with the size at the MDS. Reads see the handle's waiting stripes first.

use crate::crypt::{new_generation, StripeCrypt};
use crate::files::{pieces, FileHandle};
use crate::{Client, ClientError, Opened, Result};
use maat_proto::msg::STRIPE_UNIT_BYTES;
use maat_proto::msg::{ErrorCode, OsdResponse};
use std::ops::Range;

pub use crate::limits::PENDING_STRIPES_MAX;

/// Every byte of a stripe (what a writer, which reseals stripes whole, needs).
const WHOLE: Range<u64> = 0..STRIPE_UNIT_BYTES;

impl Client {
    /// Plaintext of stripes `stripes` as the OSDs hold them (empty past `size`), each
    /// with the bytes of it the caller needs: a reader granted part of a file (SPEC H6)
    /// gets zeros for blocks it has no key for outside those bytes.
    fn fetch_plain(
        &self,
        handle: &FileHandle,
        stripes: &[(u32, Range<u64>)],
    ) -> Result<Vec<Vec<u8>>> {
        self.fetch_plain_with(handle, &handle.opened, handle.size, stripes)
    }

    /// [`Client::fetch_plain`] under `opened` (the handle's open, or one made again) of
    /// a file of `size` bytes.
    fn fetch_plain_with(
        &self,
        handle: &FileHandle,
        opened: &Opened,
        size: u64,
        stripes: &[(u32, Range<u64>)],
    ) -> Result<Vec<Vec<u8>>> {
        let opened = opened.clone();
        let first = stripes.iter().map(|s| s.0).min().unwrap_or(0);
        let last = stripes.iter().map(|s| s.0).max().unwrap_or(0);
        let crypt = self.stripe_crypt(&opened, first..last + 1)?;
        let full = crypt.full_stripe_sealed();
        let mut calls = Vec::new();
        let mut wanted = Vec::new();
        for (s, _) in stripes {
            let s = *s;
            let start = u64::from(s) * STRIPE_UNIT_BYTES;
            if start >= size {
                continue;
            }
            let (osd, object) = self.stripe_target(&opened, s)?;
            calls.push((osd, crate::data::read_request(&opened, object, full)));
            wanted.push(s);
        }
        let answers = self.windowed(&opened, calls)?;
        let mut out = Vec::with_capacity(stripes.len());
        let mut answers = wanted.into_iter().zip(answers);
        for (s, need) in stripes {
            let s = *s;
            let start = u64::from(s) * STRIPE_UNIT_BYTES;
            if start >= size {
                out.push(Vec::new());
                continue;
            }
            let Some((_, answer)) = answers.next() else {
                return Err(self.bad("osd", "missing answer"));
            };
            let sealed = match answer {
                Ok(OsdResponse::Data(d)) => d,
                Ok(_) => return Err(self.bad("osd", "unexpected answer")),
                Err(ClientError::Refused(e)) if e.code == ErrorCode::NoSuchObject => {
                    return Err(ClientError::DataMissing(format!(
                        "{}: stripe {s} of file {} not found",
                        handle.path(),
                        opened.stat.id
                    )))
                }
                Err(e) => return Err(e),
            };
            let expected = (size - start).min(STRIPE_UNIT_BYTES);
            // A copy whose blocks fail authentication: another copy's may pass (issue 41).
            let first = crypt.open(s, sealed, expected, need.clone());
            out.push(self.or_other_copies(&opened, s, full, first, |other| {
                crypt.open(s, other, expected, need.clone())
            })?);
        }
        Ok(out)
    }

    /// Reads `offset..end` of an encrypted file through `handle`.
    pub(crate) fn crypt_read(
        &self,
        handle: &FileHandle,
        opened: &Opened,
        size: u64,
        offset: u64,
        end: u64,
    ) -> Result<Vec<u8>> {
        let parts = pieces(offset, end);
        let missing: Vec<(u32, Range<u64>)> = parts
            .iter()
            .filter(|p| !handle.pending.contains_key(&p.0))
            .map(|&(s, within, len)| (s, within..within + len))
            .collect();
        let mut fetched = missing
            .iter()
            .map(|m| m.0)
            .zip(self.fetch_plain_with(handle, opened, size, &missing)?);
        let mut out = Vec::with_capacity((end - offset) as usize);
        for (stripe, within, len) in parts {
            let plain = match handle.pending.get(&stripe) {
                Some(p) => p.clone(),
                None => fetched.next().map(|(_, p)| p).unwrap_or_default(),
            };
            let from = (within as usize).min(plain.len());
            let to = ((within + len) as usize).min(plain.len());
            out.extend_from_slice(plain.get(from..to).unwrap_or_default());
            if to < (within + len) as usize {
                break;
            }
        }
        Ok(out)
    }

    /// Writes `data` at `offset` of an encrypted file through `handle` (kept until sent;
    /// a gap before it is filled with zeros).
    pub(crate) fn crypt_write(
        &self,
        handle: &mut FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        if offset > handle.size {
            // Zeros from the end to `offset`, a stripe at a time.
            let mut at = handle.size;
            while at < offset {
                let n = (offset - at).min(STRIPE_UNIT_BYTES - at % STRIPE_UNIT_BYTES);
                self.crypt_write(handle, at, &vec![0u8; n as usize])?;
                at += n;
            }
        }
        let end = offset + data.len() as u64;
        let mut at = 0usize;
        for (stripe, within, len) in pieces(offset, end) {
            if !handle.pending.contains_key(&stripe) {
                // A write of every byte the stripe holds (the whole stripe, or all of it
                // up to the end of the file) needs none of its old bytes.
                let start = u64::from(stripe) * STRIPE_UNIT_BYTES;
                let whole = within == 0 && (len == STRIPE_UNIT_BYTES || start + len >= handle.size);
                let plain = if whole {
                    Vec::new()
                } else {
                    self.fetch_plain(handle, &[(stripe, WHOLE)])?
                        .pop()
                        .unwrap_or_default()
                };
                handle.pending.insert(stripe, plain);
            }
            let piece = data.get(at..at + len as usize).unwrap_or_default();
            at += len as usize;
            if let Some(plain) = handle.pending.get_mut(&stripe) {
                let upto = (within + len) as usize;
                if plain.len() < upto {
                    plain.resize(upto, 0);
                }
                if let Some(dst) = plain.get_mut(within as usize..upto) {
                    dst.copy_from_slice(piece);
                }
            }
            handle.size = handle
                .size
                .max(u64::from(stripe) * STRIPE_UNIT_BYTES + within + len);
            if handle.pending.len() > PENDING_STRIPES_MAX {
                self.send_pending(handle)?;
            }
        }
        handle.dirty = true;
        Ok(())
    }

    /// Seals and sends the stripes `handle` keeps, under one fresh generation, which the
    /// handle records (for its own reads) and reports at its next flush.
    pub(crate) fn send_pending(&self, handle: &mut FileHandle) -> Result<()> {
        if handle.pending.is_empty() {
            return Ok(());
        }
        let opened = handle.opened.clone();
        let generation = new_generation(&mut self.nonce_rng());
        let pending = std::mem::take(&mut handle.pending);
        let mut calls = Vec::with_capacity(pending.len());
        let mut crypt: Option<(std::ops::Range<u32>, StripeCrypt)> = None;
        for (stripe, plain) in &pending {
            // Keys per run of adjacent stripes (stripes far apart need no keys between).
            if crypt.as_ref().is_none_or(|(run, _)| !run.contains(stripe)) {
                let mut end = *stripe + 1;
                while pending.contains_key(&end) {
                    end += 1;
                }
                let run = *stripe..end;
                match self.stripe_crypt(&opened, run.clone()) {
                    Ok(c) => crypt = Some((run, c)),
                    Err(e) => {
                        handle.pending = pending;
                        return Err(e);
                    }
                }
            }
            let Some((_, crypt)) = &crypt else {
                return Err(ClientError::Internal("no keys for a pending stripe".into()));
            };
            let sealed = crypt.seal(*stripe, generation, plain, &mut self.nonce_rng())?;
            let (osd, object) = self.stripe_target(&opened, *stripe)?;
            calls.push((osd, crate::data::write_request(&opened, object, sealed)));
        }
        let answers = self.windowed(&opened, calls);
        let failed = match answers {
            Ok(answers) => answers.into_iter().find_map(|a| a.err()),
            Err(e) => Some(e),
        };
        if let Some(e) = failed {
            // Kept for a retry by the next flush: nothing was recorded.
            handle.pending = pending;
            return Err(e);
        }
        for stripe in pending.keys() {
            handle.written.push((*stripe, *stripe + 1, generation));
            if let Some(c) = handle.opened.stat.crypt.as_mut() {
                c.record(*stripe, *stripe + 1, generation)
                    .map_err(|source| ClientError::Token {
                        what: "write generations",
                        source,
                    })?;
            }
        }
        Ok(())
    }

    /// Truncates an encrypted file through `handle` to `size`: the last kept stripe is
    /// cut and resealed, the stripes past it removed.
    pub(crate) fn crypt_truncate(&self, handle: &mut FileHandle, size: u64) -> Result<()> {
        if size > handle.size {
            // Zeros up to the new size (a write of nothing at `size` fills the gap).
            return self.crypt_write(handle, size, &[]);
        }
        let keep = crate::stripes_for(size);
        if size % STRIPE_UNIT_BYTES != 0 && !handle.pending.contains_key(&(keep - 1)) {
            // The new last stripe, whole, to be cut and sealed again.
            let plain = self
                .fetch_plain(handle, &[(keep - 1, WHOLE)])?
                .pop()
                .unwrap_or_default();
            handle.pending.insert(keep - 1, plain);
        }
        handle.cut_pending(size);
        self.send_pending(handle)?;
        let known = crate::stripes_for(handle.size).max(keep);
        self.remove_stripes_range(&handle.opened.clone(), keep, known)?;
        handle.size = size;
        handle.dirty = true;
        Ok(())
    }

    /// Sends what `handle` keeps and records the size and generations at the MDS.
    pub(crate) fn crypt_flush(&self, handle: &mut FileHandle) -> Result<()> {
        self.send_pending(handle)?;
        let stripes = crate::stripes_for(handle.size);
        let mut written: Vec<(u32, u32, u64)> = Vec::new();
        for &(first, end, g) in &handle.written {
            let end = end.min(stripes);
            if first >= end {
                continue;
            }
            match written.last_mut() {
                Some(last) if last.1 == first && last.2 == g => last.1 = end,
                _ => written.push((first, end, g)),
            }
        }
        let path = handle.path().to_string();
        match handle.first_lockbox.take() {
            Some(lockbox) => {
                self.set_size_lockbox(&path, &handle.opened, handle.size, written, lockbox)?
            }
            None => self.set_size_written(&path, &handle.opened, handle.size, written)?,
        }
        handle.written.clear();
        Ok(())
    }
}
