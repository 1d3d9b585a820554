//! SPEC M9's channel between the MDS and the OSDs, in the daemon shells (the decisions
//! are in `maat-mds` and `maat-osd`): the MDS pushes each new revocation notice to every
//! registered OSD before it answers the administrator, and every OSD asks the MDS for the
//! notices in force right after it registers (it serves no data request before that) and
//! then every [`REVOCATION_POLL`], so one that missed a push learns within that time.
//! Notices are MDS-signed; the list an OSD asks for is MACed under the join key over the
//! OSD's fresh nonce, so an old or partial list is not accepted.
//!
//! SPEC T3 travels here too: the MDS sends SET MASTER KEY and SET KEY to each OSD
//! ([`osd_plain_call`], the MDS's T10 channel) from a maintenance thread every
//! [`T10_MAINTENANCE`] and when the administrator rotates keys; each command is MACed
//! under the level above, so the channel needs no protection of its own.

use crate::{Env, ServerError};
use maat_crypto::mac::MacKey;
use maat_kds::Kds;
use maat_osd::OsdCore;
use maat_proto::msg::{self, MdsPlainRequest, MdsPlainResponse, OsdPlainRequest, OsdPlainResponse};
use maat_proto::msg::{KdsRequest, KdsResponse, OsdEntry, WireError};
use maat_proto::wire::FrameType;
use std::time::Duration;

pub use crate::limits::REVOCATION_POLL;

pub use crate::limits::T10_MAINTENANCE;

/// One plain frame to a daemon at `address` and the payload of its answer. A refusal of
/// the frame itself (`Busy`, a bad frame) is an error that says so, never a payload to
/// decode as the answer (before issue 40 a busy MDS showed as "does not decode").
fn plain_bytes(env: &Env, address: &str, payload: &[u8]) -> Result<Vec<u8>, ServerError> {
    let (t, answer) = env
        .connect(address)
        .call(FrameType::Plain, payload)
        .map_err(|source| ServerError::Unreachable {
            address: address.to_string(),
            source,
        })?;
    if t == FrameType::Refusal {
        return Err(match msg::decode::<WireError>(&answer) {
            Ok(error) => ServerError::Refused {
                address: address.to_string(),
                error,
            },
            Err(e) => bad_answer(address, format!("a refusal that does not decode: {e}")),
        });
    }
    Ok(answer)
}

fn bad_answer(address: &str, reason: impl std::fmt::Display) -> ServerError {
    ServerError::BadAnswer {
        address: address.to_string(),
        reason: reason.to_string(),
    }
}

/// One plain message to a daemon at `address` and its answer (`Result<A, WireError>`
/// decoded; a refusal becomes the error).
fn plain_call<Q: serde::Serialize, A: serde::de::DeserializeOwned>(
    env: &Env,
    address: &str,
    request: &Q,
) -> Result<A, ServerError> {
    let payload = msg::encode(request).map_err(|e| bad_answer(address, e))?;
    let answer = plain_bytes(env, address, &payload)?;
    msg::decode::<Result<A, WireError>>(&answer)
        .map_err(|e| bad_answer(address, e))?
        .map_err(|error| ServerError::Refused {
            address: address.to_string(),
            error,
        })
}

/// One plain message to an OSD and its answer (the MDS's T10 channel).
pub(crate) fn osd_plain_call(
    env: &Env,
    osd: &OsdEntry,
    request: &OsdPlainRequest,
) -> Result<OsdPlainResponse, ServerError> {
    plain_call(env, &osd.address, request)
}

/// The MDS's T10 maintenance loop: every [`T10_MAINTENANCE`], each OSD's keys brought up
/// to the policy while `leads()` (the instance holds the leader lease, issue 42); a
/// problem is logged when it first appears or changes.
pub(crate) fn t10_maintenance<S: maat_mds::MetaStore>(
    mds: &maat_mds::Mds<S>,
    env: &Env,
    shutdown: &crate::Shutdown,
    leads: &dyn Fn() -> bool,
) {
    let mut last: Vec<String> = Vec::new();
    while !shutdown.is_set() {
        let mut waited = Duration::ZERO;
        while waited < T10_MAINTENANCE && !shutdown.is_set() {
            std::thread::sleep(Duration::from_millis(50));
            waited += Duration::from_millis(50);
        }
        if !leads() {
            continue;
        }
        let problems = env.with_rng(|mut rng| mds.t10_maintain(env.now(), &mut rng));
        for p in &problems {
            if !last.contains(p) {
                tracing::warn!(problem = %p, "T10 keys");
            }
        }
        last = problems;
    }
}

/// Pushes one notice the MDS signed to each OSD in `osds` and each KDS instance at
/// `kds`; returns how many OSDs applied it. Those that missed it learn at their next
/// check.
pub(crate) fn push_revocation(env: &Env, notice: &[u8], osds: &[OsdEntry], kds: &[String]) -> u32 {
    let mut applied = 0;
    for osd in osds {
        match osd_plain_call(env, osd, &OsdPlainRequest::Revoke(notice.to_vec())) {
            Ok(OsdPlainResponse::Applied) => applied += 1,
            Ok(other) => {
                tracing::warn!(osd = osd.id, answer = ?other, "unexpected answer to a revocation push")
            }
            Err(e) => tracing::warn!(
                osd = osd.id,
                error = %e,
                "could not push a revocation; the OSD learns at its next check"
            ),
        }
    }
    for address in kds {
        match plain_call(env, address, &KdsRequest::Revoke(notice.to_vec())) {
            Ok(KdsResponse::Applied) => {}
            Ok(other) => {
                tracing::warn!(kds = %address, answer = ?other, "unexpected answer to a revocation push")
            }
            Err(e) => tracing::warn!(
                kds = %address,
                error = %e,
                "could not push a revocation; the KDS learns at its next check"
            ),
        }
    }
    applied
}

/// One catch-up: asks the MDS for every notice in force and applies them.
pub(crate) fn sync_revocations(
    env: &Env,
    core: &OsdCore,
    mds_address: &str,
    id: u64,
    join: &MacKey,
) -> Result<(), ServerError> {
    let mut nonce = [0u8; 16];
    env.with_rng(|rng| rng.fill_bytes(&mut nonce));
    let mac = maat_proto::revocation::revocations_request_mac(join, id, &nonce);
    let request = MdsPlainRequest::Revocations {
        osd: id,
        nonce,
        mac,
    };
    match plain_call(env, mds_address, &request)? {
        MdsPlainResponse::Revocations { notices, mac } => {
            let expected = maat_proto::revocation::revocations_mac(join, id, &nonce, &notices);
            if !maat_crypto::ct_eq(&expected, &mac) {
                return Err(bad_answer(
                    mds_address,
                    "the list of revocations has a bad MAC",
                ));
            }
            core.sync_revocations(&notices, env.now())
                .map_err(|e| bad_answer(mds_address, e))
        }
        _ => Err(bad_answer(
            mds_address,
            "not the answer to a revocations request",
        )),
    }
}

/// Issue 41: asks the MDS which copies on this OSD missed a change and makes that the
/// list the OSD refuses to serve; returns how many. When the list is longer than the one
/// applied before, asks once more, so that the MDS hears at once that the OSD has it
/// (clients wait for that before they acknowledge a change that missed a copy here). An
/// MDS from before copies missed (it does not know the request) records none.
pub(crate) fn sync_missed(
    env: &Env,
    core: &OsdCore,
    mds_address: &str,
    id: u64,
    join: &MacKey,
) -> Result<usize, ServerError> {
    let before = core.missed_applied();
    let held = pull_missed(env, core, mds_address, id, join)?;
    if core.missed_applied() > before {
        return pull_missed(env, core, mds_address, id, join);
    }
    Ok(held)
}

/// One request of [`sync_missed`].
fn pull_missed(
    env: &Env,
    core: &OsdCore,
    mds_address: &str,
    id: u64,
    join: &MacKey,
) -> Result<usize, ServerError> {
    let mut nonce = [0u8; 16];
    env.with_rng(|rng| rng.fill_bytes(&mut nonce));
    let applied = core.missed_applied();
    let mac = maat_proto::copies::missed_request_mac(join, id, &nonce, applied);
    // The OSD's lease runs from here: the MDS hears the request later than this.
    let sent = env.now();
    let request = MdsPlainRequest::MissedCopies {
        osd: id,
        nonce,
        applied,
        mac,
    };
    match plain_call(env, mds_address, &request) {
        Ok(MdsPlainResponse::MissedCopies { objects, next, mac }) => {
            let expected = maat_proto::copies::missed_mac(join, id, &nonce, next, &objects);
            if !maat_crypto::ct_eq(&expected, &mac) {
                return Err(bad_answer(
                    mds_address,
                    "the list of missed copies has a bad MAC",
                ));
            }
            Ok(core.sync_missed(&objects, next, sent))
        }
        Ok(_) => Err(bad_answer(
            mds_address,
            "not the answer to a missed-copies request",
        )),
        Err(ServerError::Refused { error, .. }) if error.code == msg::ErrorCode::Malformed => {
            Ok(core.sync_missed(&[], 0, sent))
        }
        Err(e) => Err(e),
    }
}

/// SPEC M9 at a KDS: one catch-up, asking the MDS for every notice in force (the request
/// signed by the KDS, the list by the MDS); returns how many are in force.
pub(crate) fn sync_kds_revocations(
    env: &Env,
    kds: &Kds,
    mds_address: &str,
) -> Result<usize, ServerError> {
    let ask = env
        .with_rng(|mut rng| kds.revocations_request(env.now(), &mut rng))
        .map_err(|e| bad_answer(mds_address, e))?;
    let answer = plain_bytes(env, mds_address, &ask.payload)?;
    kds.accept_revocations(&ask, &answer, env.now())
        .map_err(|e| bad_answer(mds_address, e))
}

/// SPEC M9: catches up on the revocations in force right away (requests wait for it),
/// then checks again every `REVOCATION_POLL` until shutdown; `who` names the daemon in
/// its log, `sync` is one catch-up.
pub(crate) fn revocation_loop(
    mds_address: &str,
    shutdown: &crate::Shutdown,
    sync: impl Fn() -> Result<(), ServerError>,
) {
    let mut failing = false;
    while !shutdown.is_set() {
        match sync() {
            Ok(()) => {
                if failing {
                    tracing::info!(mds = %mds_address, "revocations checked with the MDS again");
                }
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        mds = %mds_address,
                        error = %e,
                        "cannot check revocations with the MDS; retrying"
                    );
                }
                failing = true;
            }
        }
        let mut waited = Duration::ZERO;
        while waited < REVOCATION_POLL && !shutdown.is_set() {
            let step = if failing {
                Duration::from_millis(100)
            } else {
                Duration::from_millis(50)
            };
            std::thread::sleep(step);
            waited += step;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::serve::{ServeLimits, ServeStats};
    use std::net::TcpListener;
    use std::sync::Arc;

    /// Issue 40: a catch-up refused `Busy` by a full MDS was logged as "malformed message:
    /// does not decode"; it says what the MDS said.
    #[test]
    fn a_refused_frame_is_reported_as_the_refusal() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let shutdown = crate::Shutdown::new();
        let s = shutdown.clone();
        // No room at all: every connection is refused `Busy` at once.
        let limits = ServeLimits {
            connections_max: 0,
            ..ServeLimits::default()
        };
        let handler: Arc<crate::Handler> = Arc::new(|_: &[u8], t, p: &[u8]| (t, p.to_vec()).into());
        std::thread::spawn(move || {
            crate::serve::serve(
                listener,
                handler,
                &s,
                "mds",
                limits,
                Arc::new(ServeStats::default()),
            )
        });
        let e = plain_call::<_, MdsPlainResponse>(
            &Env::system(),
            &addr,
            &MdsPlainRequest::LoginStart { name: "x".into() },
        )
        .unwrap_err();
        match &e {
            ServerError::Refused { error, .. } => {
                assert_eq!(error.code, maat_proto::msg::ErrorCode::Busy, "{e}");
                assert!(error.detail.contains("connections open"), "{e}");
            }
            other => panic!("not the refusal: {other}"),
        }
        shutdown.trigger();
    }
}
