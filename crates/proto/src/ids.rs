//! Identifier and time newtypes shared by every token.

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
        pub struct $name(pub u64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A user, as numbered by the MDS.
    UserId
);
id_type!(
    /// A file (the MDS's inode number); its objects carry this id.
    FileId
);
id_type!(
    /// A capability's unique id (names it in renewal and revocation).
    CapabilityId
);
id_type!(
    /// An object storage daemon.
    OsdId
);
id_type!(
    /// Milliseconds since the Unix epoch (all token times use this unit).
    UnixMillis
);

impl UnixMillis {
    /// `self + millis`, saturating.
    pub fn plus_millis(self, millis: u64) -> Self {
        UnixMillis(self.0.saturating_add(millis))
    }
}
