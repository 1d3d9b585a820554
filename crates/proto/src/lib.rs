//! Maat's protocol tokens, without I/O.
//!
//! Every token has one canonical byte encoding that starts with a version byte and a
//! one-byte domain tag ([`Kind`]), and is authenticated by an Ed25519 signature, a MAC or an
//! AEAD. Decoding yields an *unverified* form; the only way to the usable form is a
//! `verify` (or `open`) that checks the signature / MAC / AEAD and the validity window
//! against a `now` supplied by the caller (this crate never reads the clock).
//!
//! | module | tokens | SPEC |
//! |---|---|---|
//! | [`ticket`] | login ticket | M1 |
//! | [`session`] | client–OSD session-key offer and confirmation | M2 |
//! | [`capability`] | extended capability | M3 |
//! | [`merkle_msg`] | Merkle tree message | M4 |
//! | [`renewal`] | renewal token | M8 |
//! | [`revocation`] | revocation notice | M9 |
//! | [`delegation`] | file handle, key lifetime token, proof token | M10 |
//! | [`job_bundle`] | a job's key and handles, sealed to a participant, signed by the lead | M10 |
//! | [`t10`] | T10 capability, credential, capability key, key derivation, SET KEY, SET MASTER KEY | T2, T3 |
//! | [`t10_keys`] | one OSD's key hierarchy as both sides keep it; the exchange steps; generations | T3 |
//! | [`horus`] | lockbox, range-key grant | H4, H5 |
//! | [`encrypted`] | an encrypted file's stripe layout and write generations | H3 |
//! | [`wire`] | frames, MACed request/response envelopes | T7 |
//! | [`replay`] | the receivers' replay window over nonce streams; a sender's sequenced nonces | T7 |
//! | [`msg`] | MDS, OSD and KDS messages (postcard) | M1, M2, T5, T9, H4 |
//!
//! Byte layouts and test vectors: `docs/PROTOCOL.md`.

pub mod capability;
pub mod codec;
pub mod control;
pub mod copies;
pub mod decoders;
pub mod delegation;
pub mod encrypted;
mod error;
pub mod file_crypt;
pub mod horus;
pub mod ids;
pub mod job_bundle;
pub mod key_ranges;
pub mod limits;
pub mod lockbox;
pub mod login;
pub mod merkle_msg;
pub mod msg;
pub mod placement;
pub mod protection;
pub mod renewal;
pub mod replay;
pub mod revocation;
pub mod session;
pub mod signed;
pub mod sync;
pub mod t10;
pub mod t10_keys;
pub mod ticket;
pub mod wire;

pub use error::ProtoError;
pub use ids::{CapabilityId, FileId, OsdId, UnixMillis, UserId};
pub use signed::{Kind, Unverified, Verified, PROTOCOL_VERSION};

/// Result type of this crate.
pub type Result<T, E = ProtoError> = std::result::Result<T, E>;
