//! SPEC M10: what a job's lead hands a participant (paper 000 §3.5.2: "the key is
//! encrypted with the receiving client's public key and then signed by the source
//! client"). The job's computation private key, its key lifetime token and file handles
//! are sealed to the X25519 key of the participant's login ticket, and the whole is signed
//! with the Ed25519 key of the lead's login ticket; both tickets are MDS-signed, so each
//! side knows whom the MDS says the other is.
//!
//! Layout (version 1):
//!
//! ```text
//! u8 version = 1 | lead ticket (LOGIN_TICKET_BYTES) | u64 participant user
//! | [32] participant X25519 key | u32 len, sealed grant | [64] lead's signature
//! ```
//!
//! The signature covers `BUNDLE_CONTEXT` and every byte before it; the seal's associated
//! data is the lead ticket, participant user and key. The sealed grant is
//! `var name | [32] computation seed | var lifetime token | u32 n, n × var handle`.

use crate::codec::{Reader, Writer};
use crate::signed::{Unverified, Verified};
use crate::ticket::{LoginTicket, LOGIN_TICKET_BYTES};
use crate::{ProtoError, Result, UnixMillis, UserId};
use maat_crypto::seal::{SealingPublicKey, SealingSecretKey};
use maat_crypto::sign::{Signature, SigningKey, VerifyingKey, SIGNATURE_BYTES};
use maat_crypto::CryptoRngCore;
use zeroize::Zeroizing;

/// The bundle layout this code writes.
pub const BUNDLE_VERSION: u8 = 1;
pub use crate::limits::BUNDLE_HANDLES_MAX;
use crate::limits::HANDLE_BYTES_MAX;
pub use crate::limits::JOB_NAME_BYTES_MAX;
use crate::limits::LIFETIME_BYTES_MAX;
use crate::limits::SEALED_BYTES_MAX;
const BUNDLE_CONTEXT: &[u8] = b"maat/m10/bundle/v1\0";
const SEAL_CONTEXT: &[u8] = b"maat/m10/bundle-seal/v1\0";

/// What a participant receives.
#[derive(Clone)]
pub struct JobGrant {
    /// The job's name (the lead's choice; informational).
    pub name: String,
    /// The computation key's Ed25519 seed.
    pub computation_seed: Zeroizing<[u8; 32]>,
    /// The MDS-signed key lifetime token.
    pub lifetime: Vec<u8>,
    /// MDS-signed file handles.
    pub handles: Vec<Vec<u8>>,
}

impl std::fmt::Debug for JobGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobGrant")
            .field("name", &self.name)
            .field("handles", &self.handles.len())
            .finish_non_exhaustive()
    }
}

fn malformed(reason: &'static str) -> ProtoError {
    ProtoError::Malformed {
        what: "job bundle",
        reason,
    }
}

impl JobGrant {
    fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut w = Writer::new();
        w.var_bytes(self.name.as_bytes())
            .bytes(&self.computation_seed[..])
            .var_bytes(&self.lifetime)
            .u32(u32::try_from(self.handles.len()).unwrap_or(u32::MAX));
        for h in &self.handles {
            w.var_bytes(h);
        }
        Zeroizing::new(w.finish())
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "job grant");
        let name = std::str::from_utf8(r.var_bytes("job name", JOB_NAME_BYTES_MAX)?)
            .map_err(|_| malformed("job name is not UTF-8"))?
            .to_string();
        let computation_seed = Zeroizing::new(r.array::<32>()?);
        let lifetime = r.var_bytes("lifetime token", LIFETIME_BYTES_MAX)?.to_vec();
        let n = r.count("file handles", BUNDLE_HANDLES_MAX, 4)?;
        let handles = (0..n)
            .map(|_| Ok(r.var_bytes("file handle", HANDLE_BYTES_MAX)?.to_vec()))
            .collect::<Result<Vec<_>>>()?;
        r.finish()?;
        Ok(Self {
            name,
            computation_seed,
            lifetime,
            handles,
        })
    }
}

/// Lead side: seals `grant` to the participant of `participant` (a ticket the lead has
/// verified) and signs the bundle with the lead's client key (named in `lead_ticket`).
pub fn seal_bundle(
    grant: &JobGrant,
    lead_ticket: &[u8],
    lead_signing: &SigningKey,
    participant: &LoginTicket,
    rng: &mut impl CryptoRngCore,
) -> Result<Vec<u8>> {
    if lead_ticket.len() != LOGIN_TICKET_BYTES {
        return Err(malformed("lead ticket has the wrong length"));
    }
    if grant.handles.len() > BUNDLE_HANDLES_MAX || grant.name.len() > JOB_NAME_BYTES_MAX {
        return Err(ProtoError::TooLarge {
            what: "job bundle handles",
            len: grant.handles.len(),
            limit: BUNDLE_HANDLES_MAX,
        });
    }
    let mut aad = Writer::new();
    aad.bytes(lead_ticket)
        .u64(participant.user.0)
        .bytes(&participant.client_sealing_key.0);
    let sealed =
        participant
            .client_sealing_key
            .seal(SEAL_CONTEXT, aad.as_slice(), &grant.encode(), rng)?;
    let mut w = Writer::new();
    w.u8(BUNDLE_VERSION)
        .bytes(aad.as_slice())
        .var_bytes(&sealed);
    let signature = lead_signing.sign(&[BUNDLE_CONTEXT, w.as_slice()].concat());
    w.bytes(&signature.0);
    Ok(w.finish())
}

/// A bundle read but not yet opened: who sent it, to whom.
#[derive(Debug)]
pub struct OpenedBundle {
    /// The lead's verified ticket.
    pub lead: Verified<LoginTicket>,
    /// What the lead granted.
    pub grant: JobGrant,
}

/// The fields of a bundle, decoded but not checked.
#[derive(Debug)]
pub struct BundleParts<'a> {
    lead_ticket: &'a [u8],
    user: UserId,
    sealing_key: SealingPublicKey,
    sealed: &'a [u8],
    /// The bytes the lead's signature covers (after the context).
    signed: &'a [u8],
    signature: Signature,
}

impl<'a> BundleParts<'a> {
    /// Decodes the layout (no key is used).
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "job bundle");
        let version = r.u8()?;
        if version != BUNDLE_VERSION {
            return Err(ProtoError::UnsupportedVersion { found: version });
        }
        let lead_ticket = r.take(LOGIN_TICKET_BYTES)?;
        let user = UserId(r.u64()?);
        let sealing_key = SealingPublicKey(r.array::<32>()?);
        let sealed = r.var_bytes("sealed grant", SEALED_BYTES_MAX)?;
        let signed_len = bytes.len() - r.remaining();
        let signature = Signature(r.array::<SIGNATURE_BYTES>()?);
        r.finish()?;
        Ok(Self {
            lead_ticket,
            user,
            sealing_key,
            sealed,
            signed: bytes
                .get(..signed_len)
                .ok_or(ProtoError::Truncated { what: "job bundle" })?,
            signature,
        })
    }

    /// The participant the bundle is sealed to.
    pub fn participant(&self) -> UserId {
        self.user
    }
}

/// Participant side: checks the lead's ticket (MDS-signed, valid `now`), that the bundle
/// is for `me` (user and the X25519 key of its current login), the lead's signature, and
/// opens the grant.
pub fn open_bundle(
    bytes: &[u8],
    mds_key: &VerifyingKey,
    me: UserId,
    my_sealing: &SealingSecretKey,
    now: UnixMillis,
) -> Result<OpenedBundle> {
    let parts = BundleParts::parse(bytes)?;
    let lead = Unverified::<LoginTicket>::decode(parts.lead_ticket)?.verify(mds_key, now)?;
    if parts.user != me || parts.sealing_key != my_sealing.public_key() {
        return Err(ProtoError::WrongRecipient {
            token: "job bundle",
            reason: "sealed to another user or to another login of this user",
        });
    }
    let lead_key = lead.body().client_verifying_key(mds_key)?;
    lead_key
        .verify(&[BUNDLE_CONTEXT, parts.signed].concat(), &parts.signature)
        .map_err(|_| ProtoError::BadSignature {
            token: "job bundle",
        })?;
    let mut aad = Writer::new();
    aad.bytes(parts.lead_ticket)
        .u64(parts.user.0)
        .bytes(&parts.sealing_key.0);
    let plain = my_sealing
        .open(SEAL_CONTEXT, aad.as_slice(), parts.sealed)
        .map_err(|_| ProtoError::DecryptionFailed {
            token: "job bundle",
        })?;
    Ok(OpenedBundle {
        lead,
        grant: JobGrant::decode(&plain)?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::signed;
    use rand_core::SeedableRng;

    const NOW: UnixMillis = UnixMillis(1_000_000);

    struct Login {
        ticket: Vec<u8>,
        body: LoginTicket,
        signing: SigningKey,
        sealing: SealingSecretKey,
    }

    fn login(mds: &SigningKey, user: u64, rng: &mut rand_chacha::ChaCha20Rng) -> Login {
        let signing = SigningKey::generate(rng);
        let sealing = SealingSecretKey::generate(rng);
        let body = LoginTicket {
            ticket_id: user,
            user: UserId(user),
            client_signing_key: signing.verifying_key().to_bytes(),
            client_sealing_key: sealing.public_key(),
            iv: [0; 16],
            start: UnixMillis(0),
            expiry: UnixMillis(2_000_000),
        };
        let ticket = signed::sign(body.clone(), mds).encoded().to_vec();
        Login {
            ticket,
            body,
            signing,
            sealing,
        }
    }

    fn grant() -> JobGrant {
        JobGrant {
            name: "sim".into(),
            computation_seed: Zeroizing::new([9; 32]),
            lifetime: vec![1, 2, 3],
            handles: vec![vec![4; 10], vec![5; 20]],
        }
    }

    #[test]
    fn a_bundle_opens_for_its_participant_only_and_unaltered() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let mds = SigningKey::generate(&mut rng);
        let mds_key = mds.verifying_key();
        let lead = login(&mds, 10, &mut rng);
        let bob = login(&mds, 11, &mut rng);
        let carol = login(&mds, 12, &mut rng);
        let bundle =
            seal_bundle(&grant(), &lead.ticket, &lead.signing, &bob.body, &mut rng).unwrap();

        let opened = open_bundle(&bundle, &mds_key, UserId(11), &bob.sealing, NOW).unwrap();
        assert_eq!(opened.lead.body().user, UserId(10));
        assert_eq!(*opened.grant.computation_seed, [9; 32]);
        assert_eq!(opened.grant.handles, grant().handles);

        // Someone else, even holding the file.
        assert!(matches!(
            open_bundle(&bundle, &mds_key, UserId(12), &carol.sealing, NOW),
            Err(ProtoError::WrongRecipient { .. })
        ));
        // Bob after logging in again (a new X25519 key).
        let bob2 = login(&mds, 11, &mut rng);
        assert!(matches!(
            open_bundle(&bundle, &mds_key, UserId(11), &bob2.sealing, NOW),
            Err(ProtoError::WrongRecipient { .. })
        ));
        // Any changed byte after the lead ticket: the signature or the seal fails.
        for at in [
            1 + LOGIN_TICKET_BYTES + 20,
            bundle.len() - 70,
            bundle.len() - 1,
        ] {
            let mut bad = bundle.clone();
            bad[at] ^= 1;
            assert!(
                open_bundle(&bad, &mds_key, UserId(11), &bob.sealing, NOW).is_err(),
                "byte {at}"
            );
        }
        // Re-signed by someone who is not the ticket's holder.
        let mut forged = bundle[..bundle.len() - SIGNATURE_BYTES].to_vec();
        let sig = carol
            .signing
            .sign(&[BUNDLE_CONTEXT, forged.as_slice()].concat());
        forged.extend_from_slice(&sig.0);
        assert!(matches!(
            open_bundle(&forged, &mds_key, UserId(11), &bob.sealing, NOW),
            Err(ProtoError::BadSignature { .. })
        ));
        // A ticket the MDS did not sign.
        let rogue = SigningKey::generate(&mut rng);
        let fake_lead = login(&rogue, 10, &mut rng);
        let bundle = seal_bundle(
            &grant(),
            &fake_lead.ticket,
            &fake_lead.signing,
            &bob.body,
            &mut rng,
        )
        .unwrap();
        assert!(matches!(
            open_bundle(&bundle, &mds_key, UserId(11), &bob.sealing, NOW),
            Err(ProtoError::BadSignature { .. })
        ));
    }
}
