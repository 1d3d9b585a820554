//! Batches of requests to several OSDs in flight at once: a thread and a connection per
//! lane, [`LANES_PER_OSD`] lanes per OSD, each lane's requests in order; and the request
//! the lanes sending one change to each copy of its object share (issue 41).

use super::*;
use crate::data::{Auth, Wait};
use crate::envelope::call_on;
use crate::limits::OSD_ANSWER_TIMEOUT;
use std::time::Duration;

/// Connections (and threads) one batch of requests uses per OSD: with two, one request
/// is being served while the other is sealed, sent or checked, so hashing and the wire
/// overlap the OSD's work instead of following it.
const LANES_PER_OSD: usize = 2;

/// One OSD's share of a parallel batch.
struct Lane {
    osd: u64,
    /// Which of the OSD's lanes (each its own connection and thread).
    slot: usize,
    address: String,
    auth: Auth,
    conn: Connection,
    rng: rand_chacha::ChaCha20Rng,
    calls: Vec<(usize, Arc<SharedRequest>)>,
    answers: Vec<(usize, Result<OsdResponse>)>,
    /// The OSD's clock offset an authenticated T10 answer showed (SPEC T7).
    learned: Option<i64>,
    /// Requests not sent: the lane gave its OSD up while an earlier one waited.
    unsent: usize,
}

/// A request of a parallel batch, shared by the lanes that send it to each copy of its
/// object (issue 41): its data once, not once per copy, and the data's digest computed
/// by the first lane whose envelope covers it (ALLDATA) for every other.
pub(crate) struct SharedRequest {
    request: OsdRequest,
    digest: std::sync::OnceLock<protection::DataDigest>,
    /// How long a lane waits for its answer.
    patience: Duration,
    /// Whether a lane stops waiting for an OSD the MDS reports down meanwhile
    /// ([`Client::give_up_on_copy`]): a change whose other copies can stand without it.
    watched: bool,
}

impl SharedRequest {
    /// A request whose OSD is waited for [`OSD_ANSWER_TIMEOUT`].
    pub(crate) fn new(request: OsdRequest) -> Arc<Self> {
        Self::within(request, OSD_ANSWER_TIMEOUT)
    }

    /// `this` waited for `patience` instead, its digest kept (a copy that is not this
    /// request's only chance: issue 41's skipped copies asked late). Copied if it is
    /// held elsewhere too.
    pub(crate) fn with_patience(this: Arc<Self>, patience: Duration) -> Arc<Self> {
        let mut own = Arc::try_unwrap(this).unwrap_or_else(|held| Self {
            request: held.request.clone(),
            digest: held.digest.clone(),
            patience: held.patience,
            watched: held.watched,
        });
        own.patience = patience;
        // (Its own, short wait is the whole of it.)
        own.watched = false;
        Arc::new(own)
    }

    /// A request whose OSD is waited for `patience` (a read that has another copy to
    /// ask: [`crate::limits::OSD_READ_FAILOVER_TIMEOUT`]).
    pub(crate) fn within(request: OsdRequest, patience: Duration) -> Arc<Self> {
        Arc::new(Self {
            request,
            digest: std::sync::OnceLock::new(),
            patience,
            watched: false,
        })
    }

    /// A change sent to every copy of its object, of which at least
    /// [`maat_proto::limits::COPIES_DURABLE_MIN`] others can make it stand: a lane gives
    /// up on an OSD that the MDS reports down while it waits.
    pub(crate) fn watched(request: OsdRequest) -> Arc<Self> {
        Arc::new(Self {
            request,
            digest: std::sync::OnceLock::new(),
            patience: OSD_ANSWER_TIMEOUT,
            watched: true,
        })
    }

    /// The request, copied only while another lane still shares it.
    fn into_request(self: Arc<Self>) -> OsdRequest {
        Arc::try_unwrap(self)
            .map(|s| s.request)
            .unwrap_or_else(|shared| shared.request.clone())
    }
}

impl Client {
    /// Runs the data requests `calls` (OSD, request) for `opened` with a thread and a
    /// connection per lane, [`LANES_PER_OSD`] lanes per OSD, each lane's requests in
    /// order (so requests to one object must not share a batch); answers in the order of
    /// `calls`.
    /// A request refused at the envelope (unknown session, stale timestamp) was not
    /// applied: it is retried alone through [`Client::osd_call`], which renegotiates.
    pub(crate) fn parallel_exact(
        &self,
        opened: &Opened,
        calls: Vec<(u64, Arc<SharedRequest>)>,
    ) -> Result<Vec<Result<OsdResponse>>> {
        let insecure = self.insecure_for(opened)?;
        // Each request once (the copies of a change share one), to count the digests made.
        let mut distinct: Vec<Arc<SharedRequest>> = Vec::new();
        for (_, request) in &calls {
            // (One whose digest a first send made already is sent again: not counted.)
            if request.digest.get().is_none() && !distinct.iter().any(|d| Arc::ptr_eq(d, request)) {
                distinct.push(Arc::clone(request));
            }
        }
        let mut lanes: Vec<Lane> = Vec::new();
        let mut per_osd: Vec<(u64, usize)> = Vec::new();
        let mut unreachable: Vec<(u64, ClientError)> = Vec::new();
        let mut failed: Vec<(usize, Result<OsdResponse>)> = Vec::new();
        // A session made for a lane waits as long as the most patient request to its OSD
        // (one that fails to be made fails them all), and gives up on an OSD the MDS
        // reports down meanwhile only if every request to it would.
        let since = self.now();
        let mut waits: HashMap<u64, Wait> = HashMap::new();
        for (osd, request) in &calls {
            let w = waits.entry(*osd).or_insert(Wait {
                within: Duration::ZERO,
                watch_since: Some(since),
            });
            w.within = w.within.max(request.patience);
            if !request.watched {
                w.watch_since = None;
            }
        }
        for (index, (osd, request)) in calls.into_iter().enumerate() {
            // The n-th request to an OSD goes on its lane n mod LANES_PER_OSD.
            let slot = match per_osd.iter_mut().find(|(o, _)| *o == osd) {
                Some((_, n)) => {
                    *n += 1;
                    *n % LANES_PER_OSD
                }
                None => {
                    per_osd.push((osd, 0));
                    0
                }
            };
            if let Some(lane) = lanes.iter_mut().find(|l| l.osd == osd && l.slot == slot) {
                lane.calls.push((index, request));
                continue;
            }
            // An OSD that cannot be reached (no session, no trees supplied) fails its
            // requests, not the batch: another copy may serve them (issue 41).
            if let Some((_, e)) = unreachable.iter().find(|(o, _)| *o == osd) {
                failed.push((index, Err(e.again())));
                continue;
            }
            let ready = (|| {
                if insecure.is_none() {
                    self.prepare_capability(osd, &request.request.capability)?;
                }
                let wait = waits
                    .get(&osd)
                    .copied()
                    .unwrap_or_else(|| request.patience.into());
                let auth = self.auth_for(osd, &request.request, insecure, wait)?;
                Ok::<_, ClientError>((auth, self.osd_entry(osd)?.address))
            })();
            let (auth, address) = match ready {
                Ok(ready) => ready,
                Err(e) => {
                    failed.push((index, Err(e.again())));
                    unreachable.push((osd, e));
                    continue;
                }
            };
            lanes.push(Lane {
                osd,
                slot,
                conn: self.connections.take(&self.network, &address),
                address,
                auth,
                rng: self.nonce_rng(),
                calls: vec![(index, request)],
                answers: Vec::new(),
                learned: None,
                unsent: 0,
            });
        }
        let clock = &self.clock;
        let run = |lane: &mut Lane| {
            // Set once a watched request's OSD was given up on: the lane's later watched
            // requests (copies the others can stand without too) fail as it did, unsent,
            // rather than each waiting for the MDS's word again.
            let mut gave_up: Option<ClientError> = None;
            for (index, request) in &lane.calls {
                if let (Some(e), true) = (&gave_up, request.watched) {
                    lane.answers.push((*index, Err(e.again())));
                    lane.unsent += 1;
                    continue;
                }
                lane.conn.set_io_timeout(request.patience);
                // A change's copy that others can stand without is given up on once
                // the MDS, asked while it is silent, reports its OSD down (issue 41).
                let since = self.now();
                let osd = lane.osd;
                let given = std::cell::Cell::new(false);
                let give_up = || {
                    let why = self.give_up_on_copy(osd, since);
                    given.set(why.is_some());
                    why
                };
                let watch = maat_net::Watch {
                    every: crate::limits::CHANGE_WATCH_EVERY,
                    keep_waiting: &give_up,
                };
                let answer = call_on(
                    &mut lane.conn,
                    &lane.address,
                    &lane.auth,
                    &request.request,
                    &request.digest,
                    clock,
                    &mut lane.rng,
                    &mut lane.learned,
                    request.watched.then_some(&watch),
                );
                if let (true, Err(e)) = (given.get(), &answer) {
                    gave_up = Some(e.again());
                }
                lane.answers.push((*index, answer));
            }
        };
        // A thread per lane (one lane: the caller's); in a simulation, a simulated task
        // per lane, interleaved by the scheduler like the threads they are.
        self.network.run_lanes(&mut lanes, &run);
        let digests = distinct.iter().filter(|r| r.digest.get().is_some()).count();
        self.stats.lock().data_digests += digests as u64;
        drop(distinct);
        let mut answers = failed;
        let mut renewed: Vec<u64> = Vec::new();
        for lane in lanes {
            self.stats.lock().requests += (lane.calls.len() - lane.unsent) as u64;
            self.connections.give_back(lane.conn);
            self.learn_t10_clock(lane.osd, lane.learned);
            for ((index, answer), (_, request)) in lane.answers.into_iter().zip(lane.calls) {
                self.after_t10_refusal(lane.osd, &lane.auth, &request.request, &answer);
                let answer = match answer {
                    Err(ClientError::Refused(e))
                        if matches!(
                            e.code,
                            ErrorCode::UnknownSession
                                | ErrorCode::StaleRequest
                                | ErrorCode::NotReady
                                | ErrorCode::UnknownTree
                                | ErrorCode::CapabilityExpired
                                | ErrorCode::ProofRequired
                        ) =>
                    {
                        // Only a forgotten session needs a new one; a stale or early
                        // request is simply sent again (`osd_call` waits as needed,
                        // supplies Merkle trees the OSD lacks and renewal tokens).
                        // (Once per OSD: its other lane's retry may have made the new
                        // session already.)
                        if e.code == ErrorCode::UnknownSession && !renewed.contains(&lane.osd) {
                            renewed.push(lane.osd);
                            if let Some(s) = self.session.lock().as_mut() {
                                s.osd_sessions.retain(|o| o.osd != lane.osd);
                            }
                        }
                        let patience = request.patience;
                        self.data_call_within(opened, lane.osd, request.into_request(), patience)
                    }
                    other => other,
                };
                answers.push((index, answer));
            }
        }
        answers.sort_by_key(|(index, _)| *index);
        assert!(
            answers
                .iter()
                .enumerate()
                .all(|(i, (index, _))| i == *index),
            "one answer per request, in the requests' order"
        );
        Ok(answers.into_iter().map(|(_, answer)| answer).collect())
    }
}
