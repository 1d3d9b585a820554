//! Maat's cryptographic core.
//!
//! Every primitive here wraps a maintained library (RustCrypto, dalek, ring, BLAKE3);
//! nothing is hand-rolled. The crate owns:
//!
//! * [`sign`]: Ed25519 signing, strict verification and batch verification (SPEC M1, M3).
//! * [`seal`]: sealing a message to an X25519 public key (X25519 + HKDF-SHA256 + AES-256-GCM).
//! * [`mac`]: HMAC-SHA256 with constant-time verification (T2, T7).
//! * [`hash`] and [`kdf`]: BLAKE3, HKDF-SHA256 and Argon2id passphrase keys (M1).
//! * [`pake`]: OPAQUE (RFC 9807), the augmented PAKE of the login (M1, T6).
//! * [`aead`]: per-block authenticated encryption where every write uses a fresh subkey (H3).
//! * [`merkle`]: domain-separated Merkle trees with composition and membership proofs (M3, M4).
//! * [`kht`]: the Horus keyed hash tree, its compact shape encoding and range covers (H1, H2).
//! * [`counters`]: exact counts of signatures, verifications, MACs and AEAD bytes.
//!
//! Secret keys zeroize on drop and are compared in constant time. Nothing in this crate
//! reads the clock, performs I/O or uses an ambient random generator: randomness is a
//! parameter ([`rand_core::CryptoRngCore`]).

pub mod limits;

pub mod aead;
pub mod counters;
mod error;
pub mod hash;
pub mod kdf;
pub mod kht;
pub mod mac;
pub mod merkle;
pub mod pake;
pub mod seal;
mod secret;
pub mod sign;

pub use counters::{Counters, OpCounters, OpCounts};
pub use error::CryptoError;
pub use rand_core::{CryptoRngCore, OsRng};
pub use secret::{ct_eq, Secret32};

/// Result type of this crate.
pub type Result<T, E = CryptoError> = std::result::Result<T, E>;
