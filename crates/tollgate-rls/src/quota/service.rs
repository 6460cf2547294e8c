//! [`QuotaServer`]: Envoy's `RateLimitQuotaService`, one task per data
//! plane's stream.

use super::action::Assignment;
use super::bucket::{BucketKey, Kind, Limited, kind};
use super::claims::{ClaimKeys, MAX_TTL};
use super::keeper::{self, now_us};
use super::limits::{Limits, Reported, Sharing, Usage};
use crate::reload::Rules;
use crate::service::OnStoreError;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tollgate_store::{Capability, PolicyDebit, Store};
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// The most buckets one stream may report; the reports of more are
/// skipped, with one warning, so that a flood of distinct buckets is
/// bounded in memory.
pub const MAX_BUCKETS_PER_STREAM: usize = 10_000;

/// How often Envoy reports until a stream says otherwise (its filter's
/// interval is fixed at 5 s today).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// How long after it is sent an assignment is counted to have arrived,
/// at the latest, when its lapse is reckoned.
const ARRIVAL_MARGIN: Duration = Duration::from_secs(1);

/// How many limits the keeper looks at at once.
const LOOKS_AT_ONCE: usize = 64;

/// How long a report's counting waits for the store, unless told.
const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Answers `StreamRateLimitQuotas` from the same rules as
/// [`RateLimitServer`](crate::RateLimitServer), counting the reported
/// usage in the same store under the same keys: a bucket whose
/// `bucket_id` entries, sorted by key, form a descriptor that a rule
/// limits gets a token bucket sized to its data plane's share of the
/// limit; any other bucket `ALLOW_ALL` (a rule of 0 requests:
/// `DENY_ALL`). What each promise rests on is in the [module
/// docs](crate::quota).
#[derive(Debug)]
pub struct QuotaServer<St> {
    shared: Arc<Shared<St>>,
}

#[derive(Debug)]
struct Shared<St> {
    rules: Rules,
    store: St,
    on_store_error: OnStoreError,
    /// How long a report's counting may wait for the store.
    store_timeout: Duration,
    limits: Limits,
    /// Whether the store can hold the claims that let servers share it.
    claims: bool,
    /// Starts the keeper of the claims, at the first stream.
    keeper: Once,
    /// The next slot's number (a stream's bucket).
    slots: AtomicU64,
}

impl<St> Shared<St> {
    /// How the limits are bounded: by claims where the store holds them,
    /// a window whose claim failed counting as the store's errors say.
    fn sharing(&self) -> Sharing {
        match self.claims {
            true => Sharing::Claims {
                fail_open: self.on_store_error == OnStoreError::Open,
            },
            false => Sharing::Alone,
        }
    }
}

impl<St: Store> QuotaServer<St> {
    /// A server of `rules` (those of a [`RateLimitServer`], from
    /// [`RateLimitServer::rules`], so that both follow one configuration)
    /// counting in `store`.
    ///
    /// [`RateLimitServer`]: crate::RateLimitServer
    /// [`RateLimitServer::rules`]: crate::RateLimitServer::rules
    ///
    /// Several servers over one shared store serve one limit together:
    /// each claims its part of every window in the store (see the [module
    /// docs](crate::quota)). A store that cannot hold the claims (it
    /// lacks the sliding log, refunds or debits: the local-first store)
    /// is told at once in a warning, and each server then bounds only its
    /// own data planes, by N a window.
    pub fn new(rules: Rules, store: St) -> Self {
        let claims = claims_supported(&store);
        let mut shared = Shared {
            rules,
            store,
            on_store_error: OnStoreError::default(),
            store_timeout: DEFAULT_STORE_TIMEOUT,
            limits: Limits::default(),
            claims: claims.is_ok(),
            keeper: Once::new(),
            slots: AtomicU64::new(0),
        };
        if let Err(why) = claims {
            tracing::warn!(
                "{why}: the quota service bounds the data planes of each server apart \
                 (N + K a window each); serve RLQS over the shared store directly for one \
                 bound across servers"
            );
        }
        shared.limits = Limits::new(shared.sharing());
        QuotaServer {
            shared: Arc::new(shared),
        }
    }

    /// What a bucket is assigned when the store fails to count its usage
    /// ([`OnStoreError::Open`] by default): `Open` goes on assigning from
    /// the ledger, which bounds what the data planes admit without the
    /// store (only a spent window goes unseen); `Closed` assigns
    /// `DENY_ALL` until the store counts again.
    pub fn on_store_error(mut self, on_store_error: OnStoreError) -> Self {
        // A `QuotaServer` is not `Clone`, and its streams share it only once
        // it is a service: here the one reference is this one.
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.on_store_error = on_store_error;
            shared.limits = Limits::new(shared.sharing());
        }
        self
    }

    /// How long counting a report's usage may wait for the store (default
    /// 1 s) before the report is answered as [`on_store_error`](Self::on_store_error)
    /// says: a stream's answers never wait on a store that hangs.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.store_timeout = timeout;
        }
        self
    }

    /// The tonic service to add to a `tonic::transport::Server`.
    pub fn into_service(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl<St: Store> RateLimitQuotaService for QuotaServer<St> {
    type StreamRateLimitQuotasStream = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let (out, answers) = mpsc::channel(16);
        if self.shared.claims {
            let keeper = Arc::downgrade(&self.shared);
            self.shared.keeper.call_once(|| {
                tokio::spawn(keep(keeper));
            });
        }
        let shared = Arc::clone(&self.shared);
        tokio::spawn(serve(shared, request.into_inner(), out));
        Ok(Response::new(ReceiverStream::new(answers)))
    }
}

/// Whether `store` can hold the claims of servers that share it, or why
/// not.
fn claims_supported<St: Store>(store: &St) -> Result<(), String> {
    store
        .supports(&ClaimKeys::probe())
        .map_err(|error| error.to_string())?;
    store
        .can(Capability::Refund)
        .map_err(|error| error.to_string())?;
    store
        .can(Capability::Debit)
        .map_err(|error| error.to_string())
}

/// The keeper of the claims, while the server lives: each limit looked at
/// when due, the limits no stream reports forgotten once they hold
/// nothing.
async fn keep<St: Store>(shared: Weak<Shared<St>>) {
    let mut forgot = Instant::now();
    // The looks under way, kept across rounds: a slow look holds up no
    // other limit's, and a limit is looked at once at a time (its lock).
    let mut looks = JoinSet::new();
    loop {
        tokio::time::sleep(keeper::ROUND).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        while looks.try_join_next().is_some() {}
        for id in shared.limits.due(keeper::tick, now_us()) {
            if looks.len() >= LOOKS_AT_ONCE {
                break;
            }
            let Some(one) = shared
                .limits
                .looking(&id)
                .and_then(|looking| looking.try_lock_owned().ok())
            else {
                continue;
            };
            let shared = Arc::clone(&shared);
            looks.spawn(async move {
                keeper::look(&shared.store, &shared.limits, &id, shared.store_timeout).await;
                drop(one);
            });
        }
        if forgot.elapsed() >= Duration::from_secs(1) {
            shared.limits.forget_idle(now_us());
            forgot = Instant::now();
        }
    }
}

/// Waits for a look at `limited`'s claims: made here, or, if the keeper
/// is making one that brings them up to date, that one.
async fn first_look<St: Store>(shared: &Shared<St>, limited: &Limited) {
    let id = limited.counted_as();
    let Some(looking) = shared.limits.looking(&id) else {
        return;
    };
    let busy = looking.try_lock().is_err();
    let _one = looking.lock().await;
    if !busy || shared.limits.unclaimed(limited, now_us()) {
        keeper::look(&shared.store, &shared.limits, &id, shared.store_timeout).await;
    }
}

/// One stream: its reports answered as they come, and the assignments
/// that change in between (another data plane came or went, a window was
/// spent or ended) sent when they do.
async fn serve<St: Store>(
    shared: Arc<Shared<St>>,
    mut reports: Streaming<RateLimitQuotaUsageReports>,
    out: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
) {
    let mut stream = StreamState::new();
    loop {
        let edge = stream.next_edge(now_us());
        let answer = tokio::select! {
            report = reports.message() => match report {
                Ok(Some(report)) => stream.answer(&shared, report).await,
                // Closed by the data plane, or broken.
                Ok(None) | Err(_) => break,
            },
            () = stream.wake.notified() => Ok(stream.changes(&shared, now_us())),
            () = tokio::time::sleep(edge) => Ok(stream.changes(&shared, now_us())),
            () = out.closed() => break,
        };
        let failed = answer.is_err();
        let send = match answer {
            Ok(response) if response.bucket_action.is_empty() => continue,
            answer => out.send(answer).await,
        };
        if failed || send.is_err() {
            break;
        }
    }
    stream.leave(&shared, now_us());
}

/// What one stream reported, and what it was told.
struct StreamState {
    wake: Arc<Notify>,
    buckets: HashMap<(String, BucketKey), Watched>,
    /// The longest time between two reports seen (the data plane's
    /// reporting interval).
    interval: Duration,
    /// Whether the warning of a skipped bucket was given.
    warned: bool,
}

/// A bucket a stream reported.
struct Watched {
    slot: u64,
    limited: Option<Limited>,
    sent: Option<Assignment>,
    /// When its assignment was last sent, in µs.
    sent_at: u64,
}

impl StreamState {
    fn new() -> Self {
        StreamState {
            wake: Arc::new(Notify::new()),
            buckets: HashMap::new(),
            interval: DEFAULT_INTERVAL,
            warned: false,
        }
    }

    /// How long an assignment lives: three reporting intervals, so that
    /// one or two lost reports do not let it lapse; each report renews it.
    fn ttl(&self) -> Duration {
        self.interval * 3
    }

    /// The answer to one report: an assignment for each bucket it
    /// reports (a new one's first), or `INVALID_ARGUMENT` for a report
    /// without a domain.
    async fn answer<St: Store>(
        &mut self,
        shared: &Shared<St>,
        report: RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, Status> {
        if report.domain.is_empty() {
            return Err(Status::invalid_argument(
                "a usage report needs a domain (the rate limit configuration's `domain`)",
            ));
        }
        let config = shared.rules.current();
        let mut actions = Vec::with_capacity(report.bucket_quota_usages.len());
        let mut answered = Vec::with_capacity(report.bucket_quota_usages.len());
        for usage in &report.bucket_quota_usages {
            let Some(bucket) = usage.bucket_id.as_ref().and_then(BucketKey::of) else {
                self.skip("a bucket without entries (no rule can match it)");
                continue;
            };
            let seconds = usage
                .time_elapsed
                .map_or(0, |d| u64::try_from(d.seconds).unwrap_or(0));
            // An interval is learned up to a third of the longest time to
            // live (60 s; Envoy's is 5 s), so the claims outlast it.
            let longest = MAX_TTL.as_secs() / 3;
            self.interval = self.interval.max(Duration::from_secs(seconds.min(longest)));
            let key = (report.domain.clone(), bucket);
            if !self.buckets.contains_key(&key) && self.buckets.len() >= MAX_BUCKETS_PER_STREAM {
                self.skip("more buckets than one stream may report");
                continue;
            }
            let kind = kind(&config, &report.domain, &key.1);
            let usage = Usage {
                allowed: usage.num_requests_allowed,
                denied: usage.num_requests_denied,
                elapsed_seconds: seconds,
            };
            let assignment = self.assignment(shared, &key, kind, usage).await;
            actions.push(assignment.action(&key.1, self.ttl()));
            answered.push(key);
        }
        // Sent now: the assignments live from here (a report of many
        // buckets over a slow store takes a while to answer).
        let sent = now_us();
        for key in answered {
            if let Some(watched) = self.buckets.get_mut(&key) {
                watched.sent_at = sent;
            }
        }
        Ok(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// The assignment for `key`, whose rules say `kind`, after `usage`:
    /// counted, and shared, where a rule limits it.
    async fn assignment<St: Store>(
        &mut self,
        shared: &Shared<St>,
        key: &(String, BucketKey),
        kind: Kind,
        usage: Usage,
    ) -> Assignment {
        let now = now_us();
        let (slot, first) = match self.buckets.get(key) {
            Some(watched) => (watched.slot, false),
            None => (shared.slots.fetch_add(1, Ordering::Relaxed), true),
        };
        let (assignment, limited) = match kind {
            Kind::Unlimited => (Assignment::AllowAll, None),
            Kind::Closed => (Assignment::DenyAll, None),
            Kind::Limited(limited) => {
                let series = shared.limits.series(limited.rule.full_key());
                series.allowed.increment(usage.allowed);
                series.denied.increment(usage.denied);
                let remaining = count(shared, &limited, &usage).await;
                // The store's answers took their time: what follows is of now.
                let now = now_us();
                let closed = remaining.is_none() && shared.on_store_error == OnStoreError::Closed;
                let assignment = if limited.counts_only {
                    Assignment::AllowAll
                } else if closed {
                    Assignment::DenyAll
                } else {
                    let limits = &shared.limits;
                    let ttl = self.ttl();
                    let report = Reported {
                        usage,
                        remaining,
                        ttl,
                    };
                    let assignment = limits.report(&limited, slot, &self.wake, report, now);
                    if first && limits.claiming(&limited) || limits.unclaimed(&limited, now) {
                        // A bucket new to this stream (what its data
                        // planes want changed), a limit new to this server,
                        // or one the keeper fell behind on (its shares
                        // wait meanwhile): the answer waits for a look at
                        // the claims (or for the one the keeper is making).
                        first_look(shared, &limited).await;
                        limits.assignment(&limited, slot, now_us())
                    } else {
                        assignment
                    }
                };
                (assignment, (!limited.counts_only).then_some(limited))
            }
        };
        self.buckets.insert(
            key.clone(),
            Watched {
                slot,
                limited,
                sent: Some(assignment),
                sent_at: now,
            },
        );
        assignment
    }

    /// The assignments that changed since they were sent.
    fn changes<St: Store>(&mut self, shared: &Shared<St>, now: u64) -> RateLimitQuotaResponse {
        let ttl = self.ttl();
        let mut actions = Vec::new();
        for ((_, bucket), watched) in &mut self.buckets {
            let Some(limited) = &watched.limited else {
                continue;
            };
            let assignment = shared.limits.assignment(limited, watched.slot, now);
            if watched.sent != Some(assignment) {
                watched.sent = Some(assignment);
                watched.sent_at = now;
                actions.push(assignment.action(bucket, ttl));
            }
        }
        RateLimitQuotaResponse {
            bucket_action: actions,
        }
    }

    /// How long until the earliest end of a window in which one of the
    /// stream's limited buckets is denied (then it may admit again); an
    /// hour when none is.
    fn next_edge(&self, now: u64) -> Duration {
        let edge = self
            .buckets
            .values()
            .filter(|watched| watched.sent == Some(Assignment::DenyAll))
            .filter_map(|watched| watched.limited.as_ref())
            .map(|limited| (now / limited.window_us + 1) * limited.window_us)
            .min();
        edge.map_or(Duration::from_secs(3_600), |edge| {
            Duration::from_micros(edge - now)
        })
    }

    /// The stream closed at `now`: each limited bucket's data plane keeps
    /// its last assignment until it lapses, counted until then.
    fn leave<St: Store>(&self, shared: &Shared<St>, now: u64) {
        // The assignment lives from when the data plane has it: a margin
        // for the way there.
        let ttl = self.ttl() + ARRIVAL_MARGIN;
        let ttl = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        for watched in self.buckets.values() {
            if let Some(limited) = &watched.limited {
                let lapses = watched.sent_at.saturating_add(ttl);
                shared.limits.leave(limited, watched.slot, now, lapses);
            }
        }
        shared.limits.forget_idle(now);
    }

    fn skip(&mut self, why: &str) {
        if !std::mem::replace(&mut self.warned, true) {
            tracing::warn!(
                "a quota stream's report skipped {why}; further skips on it are not logged"
            );
        }
    }
}

/// Reads what remains of `limited`'s window, then charges the usage's
/// admitted requests to it, each waited for within the server's store
/// timeout (the ledger bounds what the data planes admit without the
/// store): what remained before the charge, for
/// [`Limits::report`] to judge whether the window is spent. A charge not
/// answered in time goes on: the store lands it when it can, or logs that
/// it failed (a store's charge that failed may have landed, so it is not
/// sent again: it would count twice).
async fn count<St: Store>(shared: &Shared<St>, limited: &Limited, usage: &Usage) -> Option<u64> {
    let timeout = shared.store_timeout;
    let peek = shared.store.peek(&limited.policy, &limited.key).resolve();
    let remaining = match tokio::time::timeout(timeout, peek).await {
        Ok(Ok(decision)) => Some(decision.merged().remaining()),
        Ok(Err(error)) => {
            tracing::debug!(%error, "a quota report's limit could not be read");
            None
        }
        Err(_) => None,
    };
    if usage.allowed > 0 {
        let cost = u32::try_from(usage.allowed).unwrap_or(u32::MAX);
        let debit = shared
            .store
            .debit(&limited.policy, &limited.key, PolicyDebit::new(cost))
            .landed();
        if tokio::time::timeout(timeout, debit).await.is_err() {
            tracing::debug!("a quota report's usage was not counted within the store timeout");
        }
    }
    remaining
}
