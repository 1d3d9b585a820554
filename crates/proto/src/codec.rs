//! A bounds-checked reader and a writer for canonical encodings (big-endian integers).

use crate::{ProtoError, Result};

/// Appends canonical encodings to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// Appends a big-endian u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends a big-endian u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends a big-endian u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends raw bytes (fixed-length fields).
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// Appends a u32 length prefix and the bytes. Callers enforce limits before encoding.
    pub fn var_bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.bytes(v)
    }
    /// The encoding so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    /// The finished encoding.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads a canonical encoding, refusing truncation and (at [`Reader::finish`]) trailing bytes.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// Reads `buf`, naming it `what` in errors.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// The bytes not yet read.
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }
    /// Reads `n` raw bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.buf.len() {
            return Err(ProtoError::Truncated { what: self.what });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    /// Reads a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.take(N)?;
        bytes
            .try_into()
            .map_err(|_| ProtoError::Truncated { what: self.what })
    }
    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }
    /// Reads a big-endian u16.
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian u32.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian u64.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    /// Reads a u32 count and checks it against `limit` and against the bytes left
    /// (`item_bytes` each) before anything is allocated.
    pub fn count(&mut self, what: &'static str, limit: usize, item_bytes: usize) -> Result<usize> {
        let n = usize::try_from(self.u32()?).unwrap_or(usize::MAX);
        if n > limit {
            return Err(ProtoError::TooLarge {
                what,
                len: n,
                limit,
            });
        }
        if n.saturating_mul(item_bytes) > self.buf.len() {
            return Err(ProtoError::Truncated { what: self.what });
        }
        Ok(n)
    }
    /// Reads u32-length-prefixed bytes of at most `limit`.
    pub fn var_bytes(&mut self, what: &'static str, limit: usize) -> Result<&'a [u8]> {
        let n = self.count(what, limit, 1)?;
        self.take(n)
    }
    /// Refuses trailing bytes.
    pub fn finish(self) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::TrailingBytes {
                what: self.what,
                count: self.buf.len(),
            })
        }
    }
}

/// Refuses a list of ids that is not strictly ascending (the canonical order, which also
/// rules out duplicates).
pub fn check_strictly_ascending(ids: &[u64], what: &'static str) -> Result<()> {
    if ids.windows(2).all(|w| matches!(w, [a, b] if a < b)) {
        Ok(())
    } else {
        Err(ProtoError::Malformed {
            what,
            reason: "ids not strictly ascending",
        })
    }
}
