//! Publish deduplication by producer id and per-stream sequence (the
//! idempotent producer), as a state machine: an in-memory outbox processor
//! publishes its rows to their streams in batches, Redis appends each one
//! at most once, and calls fail, land late or lose their reply.
//!
//! - **The producer** is one in-memory outbox processor. Its producer id
//!   is new at every process start; its outbox starts empty (nothing from
//!   before a restart is ever resent). Each row it commits has a sequence
//!   (its outbox row id: 1, 2, … from the start, strictly increasing in
//!   commit order) and goes to one stream.
//! - **Publishing.** The processor has up to `in_flight` calls out at
//!   once (pipelined: a batch's chunks go one after another without
//!   waiting for the replies before): each up to `batch` rows not known to
//!   be published and not in a call in flight, in sequence order, each as
//!   a publication `(P, s, prev)` to its row's stream. The one rule on what
//!   a call holds binds each stream: a row of a stream is sent only when
//!   every earlier row of that stream is known published, in a call in
//!   flight, or sent before it in the same call (each stream's rows in a
//!   call are a prefix of its rows neither known published nor in flight).
//!   `prev` is the sequence of the row before it in its stream when that
//!   row is in flight or earlier in the same call, else 0. A call carries
//!   each stream's rows together (in commit order, the streams in order of
//!   their first row), as the broker sends them. Which streams a call
//!   takes, and how many rows of each, is free (the model explores every
//!   choice); the
//!   processor that resends everything from its first row not known
//!   published is one of them. A reply answers each publication done
//!   (`ok` or `dup`: both mean the row is in its stream) and, on an error,
//!   which one failed (nothing after it was tried); the rows answered are
//!   marked published, the others stay pending. Replies are taken in the
//!   order the calls were sent; any call in flight may time out.
//! - **The script**, per publication of a call, in order, atomically:
//!   `last = HGET(producers(stream), P)` (0 when absent); if `s <= last`
//!   the answer is `dup` and nothing is appended; else if `last < prev`
//!   the row before it is not in the stream (its call failed, or has not
//!   landed yet): the call stops there with `gap`, nothing of it or after
//!   it written; else `XADD`, then `HSET(producers(stream), P, s)`. When an
//!   `XADD` fails the call stops there, and nothing of the failed
//!   publication is recorded.
//! - **Faults**: an `XADD` fails (the call stops there, the error reaches
//!   the processor); the processor times out waiting for a reply (the
//!   request never arrived, arrives later than the resend, or was carried
//!   out and its reply lost); the process restarts (a call in flight may
//!   still land). A request that outlives its sender's timeout may land at
//!   any later moment or never.
//!
//! The properties: a row appears in its stream at most once; a producer's
//! rows appear in each stream in sequence order; a row the processor marks
//! published is in its stream; and, on every history that ends, every row
//! of the running producer is published (rows left in the in-memory outbox
//! of a process that stopped are lost with it, by design).
//!
//! Not modelled: trimming of the producer hash (a field goes only when its
//! producer has not published to the stream within a window longer than any
//! resend or late request: a dead producer's id never comes back, and a
//! live producer's field is never trimmed while it may resend), a batch
//! split into one call per Cluster node (one node's call failing while
//! another's succeeds: each stream's publications are still a prefix of its
//! call's, which is what the rule needs), the PostgreSQL outbox (its rows
//! keep the position dedup of [`crate::protocol`]'s publish), and
//! publications without a producer (a command run's derived ids, direct
//! publishes of commands): they keep the message-id set, which
//! [`crate::commands`] models.

use std::fmt;

use stateright::{HasDiscoveries, Model, Property};

use crate::explore::{Counterexample, Outcome, explore};
use crate::mutant::mutants;

/// What is explored: rows × streams × faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishConfig {
    /// Rows committed to the outbox over the run (by every process start).
    pub rows: u8,
    /// Streams the rows go to (one per partition).
    pub streams: u8,
    /// The most rows one call publishes.
    pub batch: u8,
    /// Failed `XADD`s and timeouts (the request lost or late, or the reply
    /// lost).
    pub faults: u8,
    /// Process restarts (a new producer id, an empty outbox).
    pub restarts: u8,
    /// The most calls the processor has out at once.
    pub in_flight: u8,
}

impl PublishConfig {
    /// 3 rows over 2 streams, batches of 2, 3 faults and a restart (the
    /// default of `ordo-model publish`, and the test suite's).
    pub const FULL: Self = Self {
        rows: 3,
        streams: 2,
        batch: 2,
        faults: 3,
        restarts: 1,
        in_flight: 1,
    };

    /// Lost replies, late requests and failed appends on one stream: 4
    /// rows, batches of 2, 3 faults, no restart.
    pub const FAULTS: Self = Self {
        rows: 4,
        streams: 1,
        batch: 2,
        faults: 3,
        restarts: 0,
        in_flight: 1,
    };

    /// Restarts around faults on one stream: 3 rows, batches of 2, a
    /// fault and 2 restarts.
    pub const RESTART: Self = Self {
        rows: 3,
        streams: 1,
        batch: 2,
        faults: 1,
        restarts: 2,
        in_flight: 1,
    };

    /// 4 rows over 2 streams, batches of 3, 3 faults and a restart (too
    /// large for the test suite).
    pub const WIDE: Self = Self {
        rows: 4,
        streams: 2,
        batch: 3,
        faults: 3,
        restarts: 1,
        in_flight: 1,
    };

    /// Pipelined calls: 3 rows over 2 streams, batches of 2, two calls in
    /// flight, 3 faults and a restart.
    pub const PIPELINED: Self = Self {
        rows: 3,
        streams: 2,
        batch: 2,
        faults: 3,
        restarts: 1,
        in_flight: 2,
    };

    /// The configurations `ordo-model publish --config NAME` knows.
    pub const NAMED: [(&'static str, Self); 5] = [
        ("full", Self::FULL),
        ("faults", Self::FAULTS),
        ("restart", Self::RESTART),
        ("pipelined", Self::PIPELINED),
        ("wide", Self::WIDE),
    ];

    /// The configuration called `name` in [`PublishConfig::NAMED`].
    pub fn named(name: &str) -> Option<Self> {
        crate::by_name(&Self::NAMED, name)
    }

    /// The smallest configuration whose faults can expose `mutant`.
    pub fn exposing(mutant: PublishMutant) -> Self {
        let one = Self {
            rows: 1,
            streams: 1,
            batch: 1,
            faults: 1,
            restarts: 0,
            in_flight: 1,
        };
        match mutant {
            // One row, its reply lost, resent.
            PublishMutant::DedupAcceptsEqual => one,
            // One row, its XADD fails, resent.
            PublishMutant::RecordBeforeAppend => one,
            // One row published, a restart, a new row.
            PublishMutant::RestartKeepsId => Self {
                rows: 2,
                faults: 0,
                restarts: 1,
                ..one
            },
            // Two rows of one stream, the first one's call fails.
            PublishMutant::SkipAhead => Self { rows: 2, ..one },
            // Two rows of one stream in two calls out at once, the first
            // one's XADD fails.
            PublishMutant::NoGapCheck => Self {
                rows: 2,
                in_flight: 2,
                ..one
            },
        }
    }
}

impl fmt::Display for PublishConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rows × {} streams, batches of {}, {} calls in flight × faults (failed XADDs and timeouts \
             {}, restarts {}), late requests landing in any order",
            self.rows, self.streams, self.batch, self.in_flight, self.faults, self.restarts
        )
    }
}

mutants! {
    /// A seeded defect of publish deduplication: each is a hole the real
    /// protocol closes.
    pub enum PublishMutant, unknown UnknownPublishMutant ("publish mutant") {
        /// The script answers `dup` only when `s < last`, so a publication with
        /// `s == last` (resent after its reply was lost) is appended again.
        DedupAcceptsEqual = "dedup-accepts-equal",
        /// The sequence is recorded even when the XADD fails: the resend is
        /// taken for a duplicate, and the row is never appended.
        RecordBeforeAppend = "record-before-append",
        /// A restarted producer keeps its producer id, while its sequence
        /// starts again from 1: its new rows are taken for duplicates.
        RestartKeepsId = "restart-keeps-id",
        /// After a failure the processor goes on with later rows (of the same
        /// stream too) and sends the rows in doubt afterwards: a later row
        /// recorded first makes an earlier one look like a duplicate.
        SkipAhead = "skip-ahead",
        /// The script ignores `prev`: with two calls out, the second one's row
        /// lands while the first one's earlier row of the same stream failed,
        /// and the resent earlier row is taken for a duplicate.
        NoGapCheck = "no-gap-check",
    }
}

/// A row appears in its stream at most once.
pub const NO_DUPLICATE: &str = "a row appears in its stream at most once";
/// A producer's rows appear in each stream in sequence order.
pub const IN_ORDER: &str = "a producer's rows appear in their stream in sequence order";
/// A row the processor marks published (answered `ok` or `dup`) is in its
/// stream.
pub const NO_DROP: &str = "a row marked published is in its stream";
/// On every history that ends, every row of the running producer is marked
/// published and is in its stream.
pub const EVERY_ROW_PUBLISHED: &str =
    "once faults stop, every row of the running producer is published, in its stream";

/// One row of an in-memory outbox.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    /// The process start that committed it.
    pub incarnation: u8,
    /// Its sequence: its outbox row id (1, 2, … from the start).
    pub seq: u8,
    /// The stream it goes to.
    pub stream: u8,
    /// Marked published: a reply answered it `ok` or `dup`.
    pub published: bool,
    /// A failure left it in doubt (set by the `skip-ahead` mutant only).
    pub doubt: bool,
}

/// What a carried-out call answers.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reply {
    /// Every publication done (`ok` or `dup`).
    Done,
    /// The XADD of publication `n` failed: the ones before it are done,
    /// nothing after it was tried.
    Failed(u8),
    /// Publication `n`'s `prev` is not in its stream: the ones before it
    /// are done, nothing of it or after it was written.
    Gap(u8),
}

/// One call of the publish script.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    /// The producer id it carries.
    pub producer: u8,
    /// Its publications: rows, by index in [`PublishState::rows`], in order.
    pub rows: Vec<u8>,
    /// Each publication's `prev`: the sequence of the row before it in its
    /// stream when that row was in flight or earlier in the call, else 0.
    pub prevs: Vec<u8>,
    /// Carried out, with this reply on its way (`None`: not carried out).
    pub reply: Option<Reply>,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct PublishState {
    /// Every row committed, by every process start, in commit order.
    pub rows: Vec<Row>,
    /// The running process's start (0 for the first).
    pub incarnation: u8,
    /// The sequence of the running process's next row.
    pub next_seq: u8,
    /// The running processor's calls in flight, in the order it sent them.
    pub calls: Vec<Call>,
    /// Requests whose sender stopped waiting (a timeout or a restart), not
    /// carried out yet: each may land later, or never. Sorted.
    pub late: Vec<Call>,
    /// Each stream's entries: rows, by index in [`PublishState::rows`].
    pub streams: Vec<Vec<u8>>,
    /// Each stream's producer hash: `last[stream][producer id]`, the last
    /// appended sequence (0: no field).
    pub last: Vec<Vec<u8>>,
    /// Rows left to commit.
    pub commits: u8,
    /// Faults left.
    pub faults: u8,
    /// Restarts left.
    pub restarts: u8,
}

/// Which call Redis carries out.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Which {
    /// The running processor's, by index in [`PublishState::calls`].
    Current(usize),
    /// A late one, by index in [`PublishState::late`].
    Late(usize),
}

/// What can happen next.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The running process commits a row for this stream.
    Commit(u8),
    /// The processor sends its next call: these rows (a set of indices in
    /// [`PublishState::rows`]), in sequence order.
    Send(u16),
    /// Redis carries out a call; `failed_at`: the XADD of that publication
    /// fails (a fault), else every publication is done.
    Execute {
        /// The call.
        which: Which,
        /// The publication whose XADD fails.
        failed_at: Option<u8>,
    },
    /// The processor receives the reply of its first call in flight.
    Reply,
    /// The processor times out on a call in flight (by index in
    /// [`PublishState::calls`]): the request may still land, or its reply
    /// is lost.
    Timeout(usize),
    /// A late request is never carried out.
    Vanish(usize),
    /// The process restarts: a new producer id, an empty outbox.
    Restart,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Commit(stream) => write!(f, "the producer commits a row for stream {stream}"),
            Self::Send(rows) => {
                let rows: Vec<u32> = (0..16).filter(|i| rows & (1 << i) != 0).collect();
                write!(f, "the processor sends rows {rows:?} (each stream's together)")
            }
            Self::Execute { which, failed_at } => {
                match which {
                    Which::Current(i) => write!(f, "Redis carries out the processor's call {i}")?,
                    Which::Late(i) => write!(f, "Redis carries out late request {i}")?,
                }
                match failed_at {
                    Some(n) => write!(f, "; the XADD of publication {n} fails"),
                    None => Ok(()),
                }
            }
            Self::Reply => write!(f, "the processor receives the reply"),
            Self::Timeout(i) => write!(f, "the processor times out on its call {i}"),
            Self::Vanish(i) => write!(f, "late request {i} never lands"),
            Self::Restart => write!(f, "the process restarts"),
        }
    }
}

/// The publish deduplication model for one configuration and mutant.
#[derive(Clone, Debug)]
pub struct Publish {
    /// The configuration.
    pub config: PublishConfig,
    /// The seeded defect, if any.
    pub mutant: Option<PublishMutant>,
}

impl Publish {
    fn has(&self, mutant: PublishMutant) -> bool {
        self.mutant == Some(mutant)
    }

    /// The running process's producer id: new at every start.
    fn producer(&self, state: &PublishState) -> u8 {
        if self.has(PublishMutant::RestartKeepsId) {
            0
        } else {
            state.incarnation
        }
    }

    /// The rows of the running process neither marked published nor in a
    /// call in flight, in sequence order.
    fn unpublished(state: &PublishState) -> impl Iterator<Item = (usize, &Row)> {
        state.rows.iter().enumerate().filter(move |(i, r)| {
            r.incarnation == state.incarnation
                && !r.published
                && !state.calls.iter().any(|call| call.rows.contains(&(*i as u8)))
        })
    }

    /// The `prev` of each of `rows` (a call about to be sent): the sequence
    /// of the row before it in its stream when that row is in a call in
    /// flight or earlier in `rows`, else 0.
    fn prevs(state: &PublishState, rows: &[u8]) -> Vec<u8> {
        rows.iter()
            .enumerate()
            .map(|(at, &index)| {
                let row = state.rows[usize::from(index)];
                let before = (0..index).rev().find(|&i| {
                    let other = state.rows[usize::from(i)];
                    other.incarnation == row.incarnation && other.stream == row.stream
                });
                match before {
                    Some(before)
                        if rows[..at].contains(&before)
                            || state.calls.iter().any(|call| call.rows.contains(&before)) =>
                    {
                        state.rows[usize::from(before)].seq
                    }
                    _ => 0,
                }
            })
            .collect()
    }

    /// Every call the processor may send next, each a set of rows: up to
    /// `batch` rows, each stream's a prefix of its rows not known published
    /// (in sequence order). Which streams go, and how far, is free: the
    /// rule binds each stream, not the streams to each other.
    fn batches(&self, state: &PublishState, batches: &mut Vec<u16>) {
        let mut eligible: Vec<(usize, &Row)> = Self::unpublished(state).collect();
        // Skip-ahead: the rows in doubt wait until no other row is left.
        if self.has(PublishMutant::SkipAhead) && eligible.iter().any(|(_, r)| !r.doubt) {
            eligible.retain(|(_, r)| !r.doubt);
        }
        let per_stream: Vec<Vec<usize>> = (0..self.config.streams)
            .map(|stream| {
                eligible
                    .iter()
                    .filter(|(_, r)| r.stream == stream)
                    .map(|(i, _)| *i)
                    .collect()
            })
            .collect();
        // Every choice of a prefix length per stream.
        let mut lengths = vec![0usize; per_stream.len()];
        loop {
            let total: usize = lengths.iter().sum();
            if total > 0 && total <= usize::from(self.config.batch) {
                let mask = per_stream
                    .iter()
                    .zip(&lengths)
                    .flat_map(|(rows, &n)| &rows[..n])
                    .fold(0u16, |mask, &i| mask | 1 << i);
                batches.push(mask);
            }
            let Some(stream) = (0..lengths.len()).find(|&s| lengths[s] < per_stream[s].len()) else {
                break;
            };
            lengths[stream] += 1;
            for reset in &mut lengths[..stream] {
                *reset = 0;
            }
        }
    }

    /// Whether the XADD of `call`'s publication `n` would run: the script
    /// answers `dup` before any XADD for a sequence at or below the last.
    fn appends(&self, state: &PublishState, call: &Call, n: usize) -> bool {
        let row = state.rows[usize::from(call.rows[n])];
        let last = state.last[usize::from(row.stream)][usize::from(call.producer)];
        if self.has(PublishMutant::DedupAcceptsEqual) {
            row.seq >= last
        } else {
            row.seq > last
        }
    }

    /// The script: carries out `call`'s publications in order, the XADD of
    /// publication `failed_at` failing. `None` when that publication is a
    /// `dup` (it has no XADD to fail).
    fn execute(&self, state: &mut PublishState, call: &Call, failed_at: Option<u8>) -> Option<Reply> {
        for n in 0..call.rows.len() {
            let index = call.rows[n];
            let row = state.rows[usize::from(index)];
            let appends = self.appends(state, call, n);
            let last = state.last[usize::from(row.stream)][usize::from(call.producer)];
            if appends && last < call.prevs[n] && !self.has(PublishMutant::NoGapCheck) {
                // No XADD to fail.
                return failed_at.is_none().then_some(Reply::Gap(n as u8));
            }
            let last = &mut state.last[usize::from(row.stream)][usize::from(call.producer)];
            if failed_at == Some(n as u8) {
                if !appends {
                    return None;
                }
                if self.has(PublishMutant::RecordBeforeAppend) {
                    *last = row.seq;
                }
                return Some(Reply::Failed(n as u8));
            }
            if appends {
                state.streams[usize::from(row.stream)].push(index);
                *last = row.seq;
            }
        }
        failed_at.is_none().then_some(Reply::Done)
    }
}

impl Model for Publish {
    type State = PublishState;
    type Action = Action;

    fn init_states(&self) -> Vec<PublishState> {
        // A call's rows travel as a 16-bit set (`Action::Send`).
        assert!(self.config.rows <= 16, "at most 16 rows");
        let ids = usize::from(self.config.restarts) + 1;
        vec![PublishState {
            rows: Vec::new(),
            incarnation: 0,
            next_seq: 1,
            calls: Vec::new(),
            late: Vec::new(),
            streams: vec![Vec::new(); usize::from(self.config.streams)],
            last: vec![vec![0; ids]; usize::from(self.config.streams)],
            commits: self.config.rows,
            faults: self.config.faults,
            restarts: self.config.restarts,
        }]
    }

    fn actions(&self, state: &PublishState, actions: &mut Vec<Action>) {
        if state.commits > 0 {
            for stream in 0..self.config.streams {
                actions.push(Action::Commit(stream));
            }
        }
        if state.calls.len() < usize::from(self.config.in_flight) {
            let mut batches = Vec::new();
            self.batches(state, &mut batches);
            actions.extend(batches.into_iter().map(Action::Send));
        }
        for (i, call) in state.calls.iter().enumerate() {
            if call.reply.is_none() {
                actions.push(Action::Execute {
                    which: Which::Current(i),
                    failed_at: None,
                });
                if state.faults > 0 {
                    for n in 0..call.rows.len() {
                        actions.push(Action::Execute {
                            which: Which::Current(i),
                            failed_at: Some(n as u8),
                        });
                    }
                }
            }
            if state.faults > 0 {
                actions.push(Action::Timeout(i));
            }
        }
        if state.calls.first().is_some_and(|call| call.reply.is_some()) {
            actions.push(Action::Reply);
        }
        for (i, call) in state.late.iter().enumerate() {
            actions.push(Action::Execute {
                which: Which::Late(i),
                failed_at: None,
            });
            if state.faults > 0 {
                for n in 0..call.rows.len() {
                    actions.push(Action::Execute {
                        which: Which::Late(i),
                        failed_at: Some(n as u8),
                    });
                }
            }
            actions.push(Action::Vanish(i));
        }
        if state.restarts > 0 {
            actions.push(Action::Restart);
        }
    }

    fn next_state(&self, last: &PublishState, action: Action) -> Option<PublishState> {
        let mut state = last.clone();
        match action {
            Action::Commit(stream) => {
                state.commits -= 1;
                state.rows.push(Row {
                    incarnation: state.incarnation,
                    seq: state.next_seq,
                    stream,
                    published: false,
                    doubt: false,
                });
                state.next_seq += 1;
            }
            Action::Send(mask) => {
                let mut rows: Vec<u8> = (0..state.rows.len() as u8)
                    .filter(|i| mask & 1 << i != 0)
                    .collect();
                // Each stream's rows together, in commit order, the streams
                // in order of their first row (as the broker sends a
                // producer's batch).
                let stream_of = |i: u8| usize::from(state.rows[usize::from(i)].stream);
                let mut first = vec![usize::MAX; usize::from(self.config.streams)];
                for (n, &i) in rows.iter().enumerate() {
                    first[stream_of(i)] = first[stream_of(i)].min(n);
                }
                // Stable: each stream's rows keep their commit order.
                rows.sort_by_key(|&i| first[stream_of(i)]);
                // Skip-ahead: the rows in doubt, sent at last, are in doubt no
                // more.
                if rows.iter().any(|&i| state.rows[usize::from(i)].doubt) {
                    for row in &mut state.rows {
                        row.doubt = false;
                    }
                }
                let prevs = Self::prevs(&state, &rows);
                let call = Call {
                    producer: self.producer(&state),
                    rows,
                    prevs,
                    reply: None,
                };
                state.calls.push(call);
            }
            Action::Execute { which, failed_at } => {
                if failed_at.is_some() {
                    state.faults -= 1;
                }
                match which {
                    Which::Current(i) => {
                        let call = state.calls[i].clone();
                        let reply = self.execute(&mut state, &call, failed_at)?;
                        state.calls[i].reply = Some(reply);
                    }
                    Which::Late(i) => {
                        // Its reply goes to no one.
                        let call = state.late.remove(i);
                        self.execute(&mut state, &call, failed_at)?;
                    }
                }
            }
            Action::Reply => {
                let call = state.calls.remove(0);
                let done = match call.reply? {
                    Reply::Done => call.rows.len(),
                    Reply::Failed(n) | Reply::Gap(n) => usize::from(n),
                };
                for &row in &call.rows[..done] {
                    state.rows[usize::from(row)].published = true;
                }
                if self.has(PublishMutant::SkipAhead)
                    && let Some(&failed) = call.rows.get(done)
                {
                    state.rows[usize::from(failed)].doubt = true;
                }
            }
            Action::Timeout(i) => {
                state.faults -= 1;
                let call = state.calls.remove(i);
                if self.has(PublishMutant::SkipAhead) {
                    for &row in &call.rows {
                        state.rows[usize::from(row)].doubt = true;
                    }
                }
                // Carried out already: the reply is lost. Else the request
                // may land later.
                if call.reply.is_none() {
                    state.late.push(call);
                    state.late.sort_unstable();
                }
            }
            Action::Vanish(i) => {
                state.late.remove(i);
            }
            Action::Restart => {
                state.restarts -= 1;
                // A request in flight may still land; a reply is lost.
                for call in std::mem::take(&mut state.calls) {
                    if call.reply.is_none() {
                        state.late.push(call);
                    }
                }
                state.late.sort_unstable();
                state.incarnation += 1;
                state.next_seq = 1;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_DUPLICATE, |_, state: &PublishState| {
                let mut seen = vec![false; state.rows.len()];
                state.streams.iter().flatten().all(|&row| {
                    let first = !seen[usize::from(row)];
                    seen[usize::from(row)] = true;
                    first
                })
            }),
            Property::always(IN_ORDER, |_, state: &PublishState| {
                // Row indices follow commit order, and so sequence order
                // within one process start. (A row twice in a row is a
                // duplicate, not out of order.)
                state.streams.iter().all(|entries| {
                    entries.iter().enumerate().all(|(at, &row)| {
                        let incarnation = state.rows[usize::from(row)].incarnation;
                        entries[..at].iter().all(|&before| {
                            state.rows[usize::from(before)].incarnation != incarnation || before <= row
                        })
                    })
                })
            }),
            Property::always(NO_DROP, |_, state: &PublishState| {
                state.rows.iter().enumerate().all(|(i, row)| {
                    !row.published || state.streams[usize::from(row.stream)].contains(&(i as u8))
                })
            }),
            // Liveness, checked on every history that ends (faults used up,
            // nothing left to do). Once it holds it stays so: no action
            // unmarks a row, commits none after the last, or takes an entry
            // out of a stream.
            Property::eventually(EVERY_ROW_PUBLISHED, |_, state: &PublishState| {
                state.commits == 0
                    && state.rows.iter().enumerate().all(|(i, row)| {
                        row.incarnation != state.incarnation
                            || (row.published && state.streams[usize::from(row.stream)].contains(&(i as u8)))
                    })
            }),
        ]
    }
}

/// A property some history breaks, with that history.
pub type PublishViolation = Counterexample<Action, PublishState>;

/// The outcome of one exhaustive check of the publish deduplication model.
pub type PublishReport = Outcome<PublishConfig, PublishMutant, Action, PublishState>;

/// Explores every history of `config` (with `mutant` seeded) breadth-first,
/// so each counterexample is a shortest one.
pub fn check_publish(config: PublishConfig, mutant: Option<PublishMutant>) -> PublishReport {
    check_publish_with(config, mutant, HasDiscoveries::All)
}

/// Like [`check_publish`], but stops exploring once every property of
/// `wanted` is broken (any property at all when `wanted` is empty), or every
/// history is explored (see [`crate::check_until_broken`]).
pub fn check_publish_until_broken(
    config: PublishConfig,
    mutant: Option<PublishMutant>,
    wanted: &[&'static str],
) -> PublishReport {
    check_publish_with(config, mutant, crate::until_broken(wanted))
}

fn check_publish_with(
    config: PublishConfig,
    mutant: Option<PublishMutant>,
    finish: HasDiscoveries,
) -> PublishReport {
    explore(Publish { config, mutant }, config, mutant, finish)
}
