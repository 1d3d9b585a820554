//! The MDS instances a daemon (an OSD, a KDS) checks in at (issue 42): the config's
//! `mds` and `mds_others`. A check-in, a registration or a revocation catch-up goes to
//! the instance that answered last, and to the next ones when it fails: each is a read
//! or an idempotent registration, so asking another instance again is harmless, and
//! with the first instance gone the OSDs still check in (else every instance would soon
//! count them down).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The instances, and the one asked first.
#[derive(Debug)]
pub(crate) struct MdsAddresses {
    all: Vec<String>,
    at: AtomicUsize,
}

impl MdsAddresses {
    /// `first` (the config's `mds`), then `others` without repeats.
    pub(crate) fn new(first: &str, others: &[String]) -> Self {
        let mut all = vec![first.to_string()];
        for o in others {
            if !all.contains(o) {
                all.push(o.clone());
            }
        }
        Self {
            all,
            at: AtomicUsize::new(0),
        }
    }

    /// The instance asked first now.
    pub(crate) fn current(&self) -> &str {
        let i = self.at.load(Ordering::Relaxed) % self.all.len().max(1);
        self.all.get(i).map_or("", String::as_str)
    }

    /// `call` at the instance asked first, then at each next one until one succeeds;
    /// that one is asked first from then on. The last error when none did.
    pub(crate) fn call<T, E>(&self, mut call: impl FnMut(&str) -> Result<T, E>) -> Result<T, E> {
        let n = self.all.len().max(1);
        let start = self.at.load(Ordering::Relaxed);
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            let Some(address) = self.all.get(i) else {
                break;
            };
            match call(address) {
                Ok(v) => {
                    self.at.store(i, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(e),
            // `all` always holds `first`: unreachable, but not a panic.
            None => call(self.current()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn moves_to_the_first_that_answers_and_stays() {
        let m = MdsAddresses::new("a", &["b".into(), "c".into(), "a".into()]);
        let mut asked = Vec::new();
        let got: Result<&str, ()> = m.call(|a| {
            asked.push(a.to_string());
            if a == "c" {
                Ok("c")
            } else {
                Err(())
            }
        });
        assert_eq!((got, asked.len()), (Ok("c"), 3));
        assert_eq!(m.current(), "c");
        let none: Result<(), u32> = m.call(|_| Err(7));
        assert_eq!(none, Err(7));
        assert_eq!(
            m.current(),
            "c",
            "a round where none answered moves nothing"
        );
    }
}
