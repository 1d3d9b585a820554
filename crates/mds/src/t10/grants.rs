//! SPEC T2 at the MDS: T10 credentials for opens and removals, and their reuse.
//!
//! A credential (a T10 capability and its capability key) is made per OSD under that OSD's
//! newest working key for the partition, and given to the client sealed under its session.
//! The MDS keeps what it made (bounded) and gives the same credential again, sealed anew,
//! to the same user for the same file, OSD, permissions and method while it has more than
//! half its lifetime left and nothing revoked it: the file's policy access tag is unchanged
//! (T4 by tag) and the working key it was made under is still the newest (a refresh, or a
//! revocation by key exchange, installs a newer one). This is the T10 counterpart of M5's
//! capability cache: the MDS skips the capability-key HMAC, and the OSD finds the key in
//! its own cache. Reuse grants nothing a new credential would not: every open is checked
//! against the access-control state first, and a read open reuses a read-write credential
//! only when the user may write now too.

use super::*;
use maat_proto::protection::Protection;

use crate::limits::ISSUED_MAX;

/// What a credential is for; a credential is reused only for the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Purpose {
    uid: u64,
    partition: u64,
    file: u64,
    osd: u64,
    permissions: Permissions,
    method: Protection,
}

/// A credential made, and what it was made under.
struct Made {
    credential: t10::Credential,
    expiry: u64,
    slot: u8,
    generation: u64,
    tag: u32,
}

/// The credentials made, by purpose.
#[derive(Default)]
pub(super) struct Issued(RwLock<HashMap<Purpose, Made>>);

impl Issued {
    /// The credential made for `purpose` under working key (`slot`, `generation`) and
    /// policy access tag `tag`, if it has more than half of `lifetime` left.
    fn reusable(
        &self,
        purpose: &Purpose,
        (slot, generation, tag): (u8, u64, u32),
        now: u64,
        lifetime: u64,
    ) -> Option<t10::Credential> {
        let map = read_lock(&self.0);
        let made = map.get(purpose)?;
        let fresh = made.expiry > now && made.expiry - now > lifetime / 2;
        (fresh && made.slot == slot && made.generation == generation && made.tag == tag)
            .then(|| made.credential.clone())
    }

    fn remember(&self, purpose: Purpose, made: Made, now: u64) {
        let mut map = write_lock(&self.0);
        if map.len() >= ISSUED_MAX {
            map.retain(|_, m| m.expiry > now);
            if map.len() >= ISSUED_MAX {
                map.clear();
            }
        }
        map.insert(purpose, made);
    }
}

/// An open's or a removal's request for credentials.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrantWant {
    /// The requester.
    pub uid: u64,
    /// The file.
    pub file: u64,
    /// `Some(size)`: credentials only for the OSDs that hold the stripes of a file that
    /// long (a read open, a removal); `None`: for every registered OSD (a writer may
    /// extend the file onto any of them).
    pub placed_size: Option<u64>,
    /// The mode asked for.
    pub mode: Mode,
    /// A wider mode whose credential may be reused instead, because the requester holds
    /// its access now too.
    pub also: Option<Mode>,
}

impl<S: MetaStore> Mds<S> {
    /// The session and partition under which `inode`'s opens and removal get T10
    /// credentials: a secure request (NOSEC has none), an unencrypted file (encrypted
    /// files keep signed capabilities: the KDS takes those), a partition that gives them.
    pub(crate) fn t10_partition<'s>(
        &self,
        session: Option<&'s [u8; 16]>,
        inode: &crate::store::Inode,
    ) -> Result<Option<(&'s [u8; 16], PartitionRecord)>> {
        let (Some(session), None) = (session, &inode.crypt) else {
            return Ok(None);
        };
        let partition = self.partition(inode.partition)?;
        Ok((partition.credentials == Credentials::T10).then_some((session, partition)))
    }

    /// SPEC T2: write credentials to remove the objects of `inode`, just unlinked by
    /// `uid`, when its partition gives T10 credentials and one can be issued for every OSD
    /// that holds them; `None` otherwise (NOSEC, an encrypted file, another partition,
    /// keys not ready or an OSD whose keys await a revocation), and the caller signs a
    /// capability instead: the unlink is done, so its answer must not fail now.
    pub(crate) fn removal_credentials(
        &self,
        session: Option<&[u8; 16]>,
        uid: u64,
        inode: &crate::store::Inode,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Option<Vec<T10Grant>>> {
        let Some((session, partition)) = self.t10_partition(session, inode)? else {
            return Ok(None);
        };
        let want = GrantWant {
            uid,
            file: inode.id,
            placed_size: Some(inode.size),
            mode: Mode::WRITE,
            // The remover could write the file until the unlink.
            also: Some(Mode::READ_WRITE),
        };
        match self.t10_grants(session, &partition, &want, now, rng) {
            Ok((grants, 0)) => Ok(Some(grants)),
            _ => Ok(None),
        }
    }

    /// SPEC T2: credentials for `want` in partition `partition`, each key sealed under the
    /// session's envelope key, one per OSD `want` asks for; made anew or reused (see the
    /// module documentation). Also answers how many of those OSDs were passed over
    /// because their keys await a revocation by key exchange.
    pub(crate) fn t10_grants(
        &self,
        session: &[u8; 16],
        partition: &PartitionRecord,
        want: &GrantWant,
        now: UnixMillis,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(Vec<T10Grant>, usize)> {
        let wrap = t10::capability_key_wrap(&self.session_mac(session)?);
        let file = want.file;
        let lifetime = self.config.capability_lifetime_millis;
        let (tag, revoked_at) =
            self.with_t10_revocations(|r| (r.tag(partition.id, file), r.revoked_at(partition.id)))?;
        let osds = self.store.osds()?;
        let holders = want.placed_size.map(|size| {
            maat_proto::placement::holders(&osds, file, size, usize::from(partition.replicas))
        });
        let mut grants = Vec::new();
        let (mut made, mut reused, mut skipped) = (0u64, 0u64, 0usize);
        for osd in osds {
            if holders.as_ref().is_some_and(|h| !h.contains(&osd.id)) {
                continue;
            }
            let state = self
                .t10_state(osd.id)?
                .ok_or_else(|| not_ready(osd.id, "not set yet; retry in a second"))?;
            if exchange_pending(&state, partition.id, revoked_at)
                || state.policy_tag(partition.id, file) < tag
            {
                // Not reached since its keys were revoked, or since the file's tag rose:
                // nothing is issued that it would refuse as revoked.
                skipped += 1;
                continue;
            }
            let (key_version, working) = state
                .newest_working(partition.id)
                .ok_or_else(|| not_ready(osd.id, "no working key for the partition yet"))?;
            let purpose = |mode: Mode| Purpose {
                uid: want.uid,
                partition: partition.id,
                file,
                osd: osd.id,
                permissions: permissions(mode),
                method: partition.protection,
            };
            let under = (key_version, working.generation, tag);
            let found = [Some(want.mode), want.also]
                .into_iter()
                .flatten()
                .find_map(|m| {
                    self.t10
                        .issued
                        .reusable(&purpose(m), under, now.0, lifetime)
                });
            let credential = match found {
                Some(credential) => {
                    reused += 1;
                    credential
                }
                None => {
                    let mut discriminator = [0u8; 12];
                    rng.fill_bytes(&mut discriminator);
                    let expiry = now.0 + lifetime;
                    let capability = T10Capability {
                        security_method: partition.protection,
                        key_version,
                        permissions: permissions(want.mode),
                        partition_id: partition.id,
                        object_id: file,
                        policy_access_tag: tag,
                        expiry: UnixMillis(expiry),
                        discriminator,
                    };
                    let key = maat_crypto::mac::MacKey::new(working.key.clone())
                        .with_counters(self.counters.clone());
                    let credential = t10::issue_credential(&capability, &key);
                    made += 1;
                    let record = Made {
                        credential: credential.clone(),
                        expiry,
                        slot: key_version,
                        generation: working.generation,
                        tag,
                    };
                    self.t10.issued.remember(purpose(want.mode), record, now.0);
                    credential
                }
            };
            grants.push(T10Grant {
                osd: osd.id,
                sealed_key: t10::seal_capability_key(&wrap, &credential, rng)?,
                capability: credential.capability,
            });
        }
        self.stats
            .t10_credentials_issued
            .fetch_add(made, Ordering::Relaxed);
        self.stats
            .t10_credentials_reused
            .fetch_add(reused, Ordering::Relaxed);
        Ok((grants, skipped))
    }
}
