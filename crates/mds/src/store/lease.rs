//! Leases on singleton duties (issue 42): [`MetaStore::lease`]'s answer, and how its
//! default keeps a lease in `meta`.

use super::{Batch, MetaStore, Op, StoreError};

/// Where [`MetaStore::lease`]'s default keeps leases: `meta` `lease/NAME`.
pub const LEASE_PREFIX: &str = "lease/";

/// The lease a store answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// Who holds it now (the caller, when granted).
    pub holder: String,
    /// The fencing token: grows each time the lease passes to another holder.
    pub token: u64,
    /// Whether the caller holds it now.
    pub granted: bool,
}

/// A lease as the default keeps it: `version(1) = 1 ‖ until(8, ms) ‖ token(8) ‖ holder
/// (UTF-8, the rest)`.
struct LeaseRecord {
    holder: String,
    until: u64,
    token: u64,
}

const LEASE_RECORD_VERSION: u8 = 1;

impl LeaseRecord {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(17 + self.holder.len());
        out.push(LEASE_RECORD_VERSION);
        out.extend_from_slice(&self.until.to_be_bytes());
        out.extend_from_slice(&self.token.to_be_bytes());
        out.extend_from_slice(self.holder.as_bytes());
        out
    }

    fn decode(key: &str, v: &[u8]) -> Result<Self, StoreError> {
        let corrupt = |why: &str| StoreError::corrupt(format!("meta {key}"), why);
        let (version, rest) = v.split_first().ok_or_else(|| corrupt("empty"))?;
        if *version != LEASE_RECORD_VERSION {
            return Err(StoreError::Version(format!(
                "meta {key}: lease record version {version}, this MDS knows {LEASE_RECORD_VERSION}"
            )));
        }
        let (until, rest) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("short"))?;
        let (token, holder) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("short"))?;
        Ok(Self {
            holder: String::from_utf8(holder.to_vec()).map_err(|_| corrupt("holder not UTF-8"))?,
            until: u64::from_be_bytes(*until),
            token: u64::from_be_bytes(*token),
        })
    }
}

/// [`MetaStore::lease`]'s default: the lease in `meta`, times by `now`.
pub fn lease_in_meta<S: MetaStore + ?Sized>(
    store: &S,
    name: &str,
    holder: &str,
    ttl_millis: u64,
    now: u64,
) -> Result<LeaseState, StoreError> {
    let key = format!("{LEASE_PREFIX}{name}");
    let current = match store.meta(&key)? {
        Some(v) => Some(LeaseRecord::decode(&key, &v)?),
        None => None,
    };
    let token = match current {
        None => 1,
        Some(l) if l.holder == holder => l.token,
        Some(l) if l.until < now => l.token.saturating_add(1),
        Some(l) => {
            return Ok(LeaseState {
                holder: l.holder,
                token: l.token,
                granted: false,
            })
        }
    };
    let record = LeaseRecord {
        holder: holder.to_string(),
        until: now.saturating_add(ttl_millis),
        token,
    };
    // (Deferred: a lease the process holds alone needs no fsync of its own; it becomes
    // durable with the next change that does.)
    store.commit_deferred(Batch(vec![Op::PutMeta(key, record.encode())]))?;
    Ok(LeaseState {
        holder: holder.to_string(),
        token,
        granted: true,
    })
}

/// [`MetaStore::raise_lease`]'s default: the lease in `meta`, timed by `now`. The
/// raise is durable before it answers (commands go out under the new token).
pub fn raise_in_meta<S: MetaStore + ?Sized>(
    store: &S,
    name: &str,
    holder: &str,
    at_least: u64,
    now: u64,
) -> Result<Option<u64>, StoreError> {
    let key = format!("{LEASE_PREFIX}{name}");
    let Some(mut record) = store
        .meta(&key)?
        .map(|v| LeaseRecord::decode(&key, &v))
        .transpose()?
    else {
        return Ok(None);
    };
    if record.holder != holder || record.until < now {
        return Ok(None);
    }
    if record.token < at_least {
        record.token = at_least;
        store.commit(Batch(vec![Op::PutMeta(key, record.encode())]))?;
    }
    Ok(Some(record.token))
}

/// Splits the lease requirements ([`Op::RequireLease`]) off `batch`: the changes, and
/// each requirement as `(name, holder, token)`. For a store that checks them itself
/// before it applies the rest.
pub fn take_lease_requirements(batch: Batch) -> (Batch, Vec<(String, String, u64)>) {
    if !batch
        .0
        .iter()
        .any(|op| matches!(op, Op::RequireLease { .. }))
    {
        return (batch, Vec::new());
    }
    let mut changes = Batch::default();
    let mut required = Vec::new();
    for op in batch.0 {
        match op {
            Op::RequireLease {
                name,
                holder,
                token,
            } => required.push((name, holder, token)),
            other => {
                changes.push(other);
            }
        }
    }
    (changes, required)
}

/// Whether the lease record `stored` (kept in `meta` at `lease/NAME`, as
/// [`lease_in_meta`] keeps it) says `holder` holds lease `name` under `token`:
/// [`StoreError::LeaseLost`] if not. Expiry does not matter here: a lease that ran out
/// and that nobody took since still fences nobody else's writes.
pub fn check_lease_record(
    name: &str,
    stored: Option<&[u8]>,
    holder: &str,
    token: u64,
) -> Result<(), StoreError> {
    let key = format!("{LEASE_PREFIX}{name}");
    let (now_holder, found) = match stored {
        Some(v) => {
            let r = LeaseRecord::decode(&key, v)?;
            (r.holder, r.token)
        }
        None => (String::new(), 0),
    };
    check_lease_holder(name, holder, token, now_holder, found)
}

/// Whether lease `name`, held now by `now_holder` under `found` (empty and 0: never
/// taken), is `holder`'s under `token`: [`StoreError::LeaseLost`] if not. For a store
/// that keeps leases its own way (PostgreSQL's `leases` table).
pub fn check_lease_holder(
    name: &str,
    holder: &str,
    token: u64,
    now_holder: String,
    found: u64,
) -> Result<(), StoreError> {
    if now_holder == holder && found == token {
        return Ok(());
    }
    Err(StoreError::LeaseLost {
        name: name.to_string(),
        token,
        holder: now_holder,
        found,
    })
}

/// [`check_lease_record`] on what `store` holds now. Sound for a store whose leases
/// only its own process changes (a redb file, held by one process): the caller checks
/// and applies under the process's serialization of commits.
pub fn require_lease_in_meta<S: MetaStore + ?Sized>(
    store: &S,
    name: &str,
    holder: &str,
    token: u64,
) -> Result<(), StoreError> {
    let stored = store.meta(&format!("{LEASE_PREFIX}{name}"))?;
    check_lease_record(name, stored.as_deref(), holder, token)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// The vector in docs/PROTOCOL.md ("At rest", leases).
    #[test]
    fn a_lease_record_has_its_documented_bytes_and_loads_back() {
        let r = LeaseRecord {
            holder: "h:/d".into(),
            until: 1_150,
            token: 2,
        };
        let bytes = r.encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "01000000000000047e0000000000000002683a2f64");
        let back = LeaseRecord::decode("lease/leader", &bytes).unwrap();
        assert_eq!(
            (back.holder.as_str(), back.until, back.token),
            ("h:/d", 1_150, 2)
        );
        assert!(LeaseRecord::decode("lease/leader", &bytes[..9]).is_err());
        let mut newer = bytes.clone();
        newer[0] = 2;
        assert!(matches!(
            LeaseRecord::decode("lease/leader", &newer),
            Err(StoreError::Version(_))
        ));
    }

    #[test]
    fn a_lease_requirement_holds_only_for_its_holder_under_its_token() {
        let r = LeaseRecord {
            holder: "a".into(),
            until: 10,
            token: 3,
        }
        .encode();
        assert!(check_lease_record("leader", Some(&r), "a", 3).is_ok());
        // The same holder under an older token (it lost the lease and took it back).
        assert!(matches!(
            check_lease_record("leader", Some(&r), "a", 2),
            Err(StoreError::LeaseLost { found: 3, .. })
        ));
        assert!(matches!(
            check_lease_record("leader", Some(&r), "b", 3),
            Err(StoreError::LeaseLost { ref holder, .. }) if holder == "a"
        ));
        assert!(matches!(
            check_lease_record("leader", None, "a", 3),
            Err(StoreError::LeaseLost { found: 0, .. })
        ));
        let (rest, required) = take_lease_requirements(Batch(vec![
            Op::DeleteMeta("x".into()),
            Op::RequireLease {
                name: "leader".into(),
                holder: "a".into(),
                token: 3,
            },
        ]));
        assert_eq!(rest, Batch(vec![Op::DeleteMeta("x".into())]));
        assert_eq!(required, vec![("leader".into(), "a".into(), 3)]);
    }
}
