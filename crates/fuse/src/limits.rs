//! Every limit of the mount in one place: read-ahead, write-back, the kernel's largest
//! request and how long the kernel keeps attributes. Each module that applies one
//! re-exports it under its old path.

use maat_proto::msg::STRIPE_UNIT_BYTES;
use std::time::Duration;

/// How long the kernel may keep attributes and names before asking again.
pub(crate) const TTL: Duration = Duration::from_secs(1);

/// Read-ahead of a sequential reader: eight stripes, fetched from the OSDs at once.
pub const READ_AHEAD_BYTES: u64 = 8 * STRIPE_UNIT_BYTES;

/// A file's write-back buffer is sent when it holds this much.
pub const WRITE_BACK_BYTES: usize = 8 * STRIPE_UNIT_BYTES as usize;

/// Largest read and write the kernel sends at once (it splits larger ones).
pub(crate) const KERNEL_IO_BYTES: u32 = 1024 * 1024;

/// The local id an owner or group without a mapping shows as on a mount with an identity
/// map: the kernel's overflow id (`nobody`), as NFSv4 shows an unknown owner.
pub const UNMAPPED_ID: u32 = 65_534;
