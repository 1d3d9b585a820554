//! Exact counts of cryptographic operations.
//!
//! The papers' claims are about how many signatures, verifications and MACs a design
//! needs; these counters make those numbers observable. Every key type carries a
//! [`Counters`] handle (by default the process-wide [`global`] one) and bumps it on use,
//! so a daemon that gives its keys its own handle gets its own figures even when several
//! daemons share a process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Shared handle to a set of counters.
pub type Counters = Arc<OpCounters>;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Live atomic counters of cryptographic operations.
        #[derive(Debug, Default)]
        pub struct OpCounters { $(pub(crate) $name: AtomicU64,)* }

        /// A snapshot of [`OpCounters`]; subtract two snapshots to get the work in between.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct OpCounts { $($(#[$doc])* pub $name: u64,)* }

        impl OpCounters {
            /// Reads every counter (each read is atomic; the set is not a single atomic cut).
            pub fn snapshot(&self) -> OpCounts {
                OpCounts { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl std::ops::Sub for OpCounts {
            type Output = OpCounts;
            fn sub(self, rhs: OpCounts) -> OpCounts {
                OpCounts { $($name: self.$name.saturating_sub(rhs.$name),)* }
            }
        }

        impl OpCounts {
            /// `(name, value)` pairs, for metrics export and tables.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Ed25519 signatures produced.
    signatures_made,
    /// Ed25519 signatures checked (each signature of a batch counts once).
    signatures_verified,
    /// Batch verification calls.
    batch_verifications,
    /// MAC tags computed (HMAC-SHA256), including those computed in order to verify.
    macs_computed,
    /// MAC tags checked against a received tag.
    macs_verified,
    /// Messages sealed to a public key.
    seals,
    /// Sealed messages opened.
    unseals,
    /// X25519 agreements of a static key outside sealing and opening (keyed range-key
    /// grants, SET MASTER KEY).
    key_agreements,
    /// Plaintext bytes encrypted by the block AEAD.
    aead_bytes_sealed,
    /// Ciphertext bytes decrypted and authenticated by the block AEAD.
    aead_bytes_opened,
    /// Keyed-hash-tree node keys derived (one keyed hash each).
    kht_derivations,
    /// Merkle node hashes computed (leaves and inner nodes).
    merkle_hashes,
    /// Argon2id passphrase derivations (also the key stretching inside OPAQUE).
    passphrase_derivations,
    /// OPAQUE login steps that cost group operations (server KE2, client finish, server
    /// finish).
    pake_steps,
}

impl OpCounters {
    /// A fresh, independent set of counters.
    pub fn new_handle() -> Counters {
        Arc::new(OpCounters::default())
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

macro_rules! bump {
    ($counters:expr, $field:ident) => {
        $crate::counters::OpCounters::add(&$counters.$field, 1)
    };
    ($counters:expr, $field:ident, $n:expr) => {
        $crate::counters::OpCounters::add(&$counters.$field, $n as u64)
    };
}
pub(crate) use bump;

/// The process-wide counters used by keys that were not given their own.
pub fn global() -> &'static Counters {
    static GLOBAL: OnceLock<Counters> = OnceLock::new();
    GLOBAL.get_or_init(OpCounters::new_handle)
}
