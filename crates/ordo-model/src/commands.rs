//! The command reply protocol as a state machine: a sender sends a command
//! with its own id to a partition and waits for its outcome, the owner of
//! the partition runs it once, records the outcome and pushes it back.
//!
//! The lease/fence protocol under it is [`crate::protocol`]'s and is
//! modelled abstractly here: an owner holds the partition under a
//! generation (its fencing token), a crash or a stall makes the lease
//! expire, and another owner (or the same process, started again) acquires
//! it at a higher generation and reclaims the entry the earlier owner left
//! pending. What the model looks at is what the command protocol adds on
//! top (one command id `I`, its entries in the partition's stream, the
//! outcome record `outcome(I)`, the senders' reply lists):
//!
//! - **Sending.** The caller gave its own id (a retry of the call carries
//!   the same one), so a send first GETs `outcome(I)` and returns it at
//!   once when present; else it publishes the command with message-id
//!   dedup (`publish.lua`: an id appended within the window is not appended
//!   again; the window outlasts the retries here). Then it waits: for a
//!   reply pushed to its instance's reply list, and it polls `outcome(I)`;
//!   the first of the two it sees is what it returns.
//! - **Resending.** A sender may time out (it gives up, returning no
//!   outcome) and the call is sent again with the same id, from the same
//!   instance or from another one. A resend from another instance has no
//!   reply coming to its own list unless its publish appended an entry: it
//!   polls.
//! - **Running.** The owner reads entries in order (fenced by its lease).
//!   An entry read for the first time runs the handler; the run's result
//!   differs per run (the owner's generation). The owner then writes
//!   `outcome(I)` with SET NX (the first outcome wins), RPUSHes to the
//!   entry's reply list the value the record holds after the SET NX (its
//!   own result only when its SET NX wrote it), and acknowledges the entry
//!   (fenced: a stale owner's acknowledgement is refused). An entry it
//!   reclaims (pending: delivered to an earlier owner that crashed or
//!   stalled) is first looked up: when `outcome(I)` is present the owner
//!   pushes it and acknowledges without running.
//! - **Faults.** An owner crashes at any step (and starts again at once,
//!   with no lease: its lease stays until it expires), or stalls past its
//!   lease and, woken, goes on with the entry it had (its GET, run, SET NX
//!   and push are not fenced, its acknowledgement is); a reply push is
//!   lost (the sender still polls); a sender times out and the call is
//!   resent.
//!
//! The properties: every sender returns the first outcome recorded for
//! `I`; an owner that reads the entry after its outcome was recorded does
//! not run it; the command runs more than once only after an owner lost it
//! (crash or lease expiry) between reading it and recording its outcome; a
//! resend appends no second entry; and, on every history that ends, every
//! sender that did not give up returned an outcome and every entry is
//! acknowledged.
//!
//! Not modelled: the outcome record's TTL and the dedup window running out
//! (both are assumed to outlast the retries of a call), commands without a
//! caller's id (a fresh id is never resent), several commands (each id has
//! its own record and entries; the stream's order is the lease protocol's
//! concern), and Redis losing writes.

use std::fmt;

use stateright::{HasDiscoveries, Model, Property};

use crate::explore::{Counterexample, Outcome, explore};
use crate::mutant::mutants;

/// What is explored: owners × resends × faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandsConfig {
    /// Owner processes that may hold the partition.
    pub owners: u8,
    /// Sender timeouts, each followed by a resend with the same id (from
    /// the same instance or another).
    pub resends: u8,
    /// Owner crashes (SIGKILL, then a start with no lease).
    pub crashes: u8,
    /// Owner stalls past the lease (SIGSTOP, then SIGCONT).
    pub stalls: u8,
    /// Reply pushes lost on their way (the sender never sees them).
    pub lost_pushes: u8,
}

impl CommandsConfig {
    /// Every fault at once: 2 owners, a resend, a crash, a stall and a
    /// lost push (the default of `ordo-model commands`, and the test
    /// suite's).
    pub const FULL: Self = Self {
        owners: 2,
        resends: 1,
        crashes: 1,
        stalls: 1,
        lost_pushes: 1,
    };

    /// A stale owner: 2 owners and a stall.
    pub const STALL: Self = Self {
        owners: 2,
        resends: 0,
        crashes: 0,
        stalls: 1,
        lost_pushes: 0,
    };

    /// A crashed owner: 2 owners and a crash.
    pub const CRASH: Self = Self {
        owners: 2,
        resends: 0,
        crashes: 1,
        stalls: 0,
        lost_pushes: 0,
    };

    /// Resends and lost pushes around a stalled owner: 2 owners, 2 resends,
    /// a stall and a lost push.
    pub const RESEND: Self = Self {
        owners: 2,
        resends: 2,
        crashes: 0,
        stalls: 1,
        lost_pushes: 1,
    };

    /// Two of every fault: 2 owners, 2 resends, 2 crashes, 2 stalls, 2
    /// lost pushes (too large for the test suite).
    pub const WIDE: Self = Self {
        owners: 2,
        resends: 2,
        crashes: 2,
        stalls: 2,
        lost_pushes: 2,
    };

    /// The configurations `ordo-model commands --config NAME` knows.
    pub const NAMED: [(&'static str, Self); 5] = [
        ("full", Self::FULL),
        ("stall", Self::STALL),
        ("crash", Self::CRASH),
        ("resend", Self::RESEND),
        ("wide", Self::WIDE),
    ];

    /// The configuration called `name` in [`CommandsConfig::NAMED`].
    pub fn named(name: &str) -> Option<Self> {
        crate::by_name(&Self::NAMED, name)
    }

    /// The smallest configuration whose faults can expose `mutant`.
    pub fn exposing(mutant: CommandsMutant) -> Self {
        match mutant {
            // A stale owner's SET NX (or push) lands after the next
            // owner's.
            CommandsMutant::OutcomeOverwrite | CommandsMutant::PushOwnOutcome => Self::STALL,
            // An owner crashes after recording, before acknowledging.
            CommandsMutant::RerunReclaimed => Self::CRASH,
            // One owner, one resend while the first is pending (from the
            // other instance: the reply goes to the first one's).
            CommandsMutant::ResendWithoutDedup | CommandsMutant::WaitWithoutPolling => Self {
                owners: 1,
                resends: 1,
                crashes: 0,
                stalls: 0,
                lost_pushes: 0,
            },
        }
    }
}

impl fmt::Display for CommandsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "1 command × {} owners × faults (sender timeouts and resends {}, owner crashes {}, stalls {}, \
             lost reply pushes {})",
            self.owners, self.resends, self.crashes, self.stalls, self.lost_pushes
        )
    }
}

mutants! {
    /// A seeded defect of the command reply protocol: each is a hole the
    /// real protocol closes.
    pub enum CommandsMutant, unknown UnknownCommandsMutant ("commands mutant") {
        /// The outcome record is written with a plain SET, not SET NX: a later
        /// run's outcome replaces the first.
        OutcomeOverwrite = "outcome-overwrite",
        /// A reclaimed entry is run without first looking up its outcome record.
        RerunReclaimed = "rerun-reclaimed",
        /// The owner pushes its own run's result even when its SET NX failed
        /// (another run's outcome was recorded first).
        PushOwnOutcome = "push-own-outcome",
        /// The publish appends the command again though its id was appended
        /// within the window.
        ResendWithoutDedup = "resend-without-dedup",
        /// The sender waits only for a reply push and never polls the outcome
        /// record: a push that is lost, or that goes to the instance of an
        /// earlier send (the resend was deduplicated), never reaches it.
        WaitWithoutPolling = "wait-without-polling",
    }
}

/// Every sender returns the first outcome recorded for the command.
pub const ONE_OUTCOME: &str = "every sender returns the first outcome recorded";
/// An owner that reads the entry once its outcome is recorded does not run
/// it (an owner already past its read when the outcome was recorded may).
pub const RECORDED_NEVER_RERUN: &str =
    "an owner that reads a command after its outcome is recorded does not run it";
/// The command runs more than once only after an owner lost it (a crash, or
/// its lease expired while it stalled) between reading it and recording
/// its outcome.
pub const RERUN_ONLY_AFTER_LOSS: &str =
    "a command runs again only after an owner lost it before recording its outcome";
/// A resend appends no second entry for the command's id.
pub const DEDUP: &str = "a resend appends no second entry";
/// On every history that ends, every sender that did not give up returned
/// an outcome, and every entry is acknowledged.
pub const EVERY_SENDER_ANSWERED: &str =
    "once faults stop, every waiting sender returns an outcome and the entry is acknowledged";

/// One entry of the command in the partition's stream.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Entry {
    /// The sender instance whose reply list the outcome goes to.
    pub reply_to: u8,
    /// The generation of the owner it was last delivered to (`None`: not
    /// read yet); delivered and not acknowledged is pending.
    pub delivered: Option<u8>,
    /// Acknowledged (`XACK`).
    pub acked: bool,
}

/// Where a sender is in its call.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Call {
    /// About to GET the outcome record.
    Get,
    /// The record was absent: about to publish.
    Publish,
    /// Published (or deduplicated): waiting for a reply or a poll.
    Waiting,
    /// Returned this outcome.
    Returned(u8),
    /// Timed out: returned an error, the call is sent again.
    GaveUp,
}

/// One send of the command (the first, or a resend after a timeout).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Sender {
    /// The instance it runs on: the reply list it waits on.
    pub instance: u8,
    /// Where it is.
    pub call: Call,
}

/// What an owner does next with the entry it read.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Step {
    /// GET the outcome record (a reclaimed entry).
    Lookup,
    /// Run the handler.
    Run,
    /// SET NX the outcome record with the run's result.
    Record(u8),
    /// RPUSH this outcome to the entry's reply list.
    Push(u8),
    /// Acknowledge the entry (fenced).
    Ack,
}

/// An owner's work on one entry.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Work {
    /// The entry, by position in the stream.
    pub entry: u8,
    /// Its next step.
    pub step: Step,
    /// The outcome was recorded when the owner read the entry (a history
    /// variable).
    pub read_after_record: bool,
}

/// One owner process.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Owner {
    /// Paused (SIGSTOP).
    pub stalled: bool,
    /// The generation it holds the partition under, as far as it knows.
    pub lease: Option<u8>,
    /// The entry it works on.
    pub work: Option<Work>,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct CommandsState {
    /// The partition's lease: the owner holding it and its generation.
    pub lease: Option<(u8, u8)>,
    /// The generation counter (acquisitions so far).
    pub generation: u8,
    /// The command's entries in the stream, in order.
    pub stream: Vec<Entry>,
    /// The outcome record `outcome(I)`.
    pub outcome: Option<u8>,
    /// The first outcome ever recorded (a history variable).
    pub first_recorded: Option<u8>,
    /// Each sender instance's reply list, oldest first.
    pub replies: [Vec<u8>; 2],
    /// The owner processes.
    pub owners: Vec<Owner>,
    /// The sends of the command, the first first.
    pub senders: Vec<Sender>,
    /// Handler runs of the command (a history variable).
    pub runs: u8,
    /// Times an owner lost the entry between reading it and recording its
    /// outcome (a history variable).
    pub lost_mid_run: u8,
    /// An owner ran the command after reading it with its outcome recorded
    /// (a history variable).
    pub rerun_after_record: bool,
    /// Resends left.
    pub resends: u8,
    /// Crashes left.
    pub crashes: u8,
    /// Stalls left.
    pub stalls: u8,
    /// Lost pushes left.
    pub lost_pushes: u8,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// Sender `s` GETs the outcome record.
    Get(usize),
    /// Sender `s` publishes the command (deduplicated by its id).
    Publish(usize),
    /// Sender `s` pops the oldest reply of its instance's list.
    Pop(usize),
    /// Sender `s` polls the outcome record and finds it.
    Poll(usize),
    /// Sender `s` times out; the call is sent again with the same id, from
    /// the same instance or from the other one.
    Resend {
        /// The sender that times out.
        sender: usize,
        /// The resend comes from the other instance.
        elsewhere: bool,
    },
    /// Owner `p` acquires the free lease at the next generation.
    Acquire(usize),
    /// Owner `p` reads the next entry (fenced): a pending one it reclaims,
    /// or a new one.
    Read(usize),
    /// Owner `p` takes the next step of its entry (the step it is at).
    Step(usize, Step),
    /// Owner `p`'s push is lost on its way.
    LosePush(usize),
    /// Owner `p`'s heartbeat finds its lease gone: it stops.
    Drop(usize),
    /// The lease expires (its holder is stalled or crashed).
    Expire,
    /// SIGKILL of owner `p`, which starts again at once with no lease.
    Crash(usize),
    /// SIGSTOP of owner `p`.
    Stall(usize),
    /// SIGCONT of owner `p`.
    Resume(usize),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Get(s) => write!(f, "sender {s} GETs outcome(I)"),
            Self::Publish(s) => write!(f, "sender {s} publishes the command"),
            Self::Pop(s) => write!(f, "sender {s} pops a reply"),
            Self::Poll(s) => write!(f, "sender {s} polls outcome(I) and finds it"),
            Self::Resend { sender, elsewhere } => write!(
                f,
                "sender {sender} times out; the call is resent from {} instance",
                if *elsewhere { "the other" } else { "the same" }
            ),
            Self::Acquire(p) => write!(f, "owner {p} acquires the lease"),
            Self::Read(p) => write!(f, "owner {p} reads the next entry"),
            Self::Step(p, Step::Lookup) => write!(f, "owner {p} GETs outcome(I)"),
            Self::Step(p, Step::Run) => write!(f, "owner {p} runs the handler"),
            Self::Step(p, Step::Record(result)) => {
                write!(f, "owner {p} records outcome(I) = {result} (SET NX)")
            }
            Self::Step(p, Step::Push(outcome)) => write!(f, "owner {p} pushes outcome {outcome}"),
            Self::Step(p, Step::Ack) => write!(f, "owner {p} acknowledges the entry"),
            Self::LosePush(p) => write!(f, "owner {p}'s reply push is lost"),
            Self::Drop(p) => write!(f, "owner {p} finds its lease gone and stops"),
            Self::Expire => write!(f, "the lease expires"),
            Self::Crash(p) => write!(f, "owner {p} crashes and starts again"),
            Self::Stall(p) => write!(f, "owner {p} stalls"),
            Self::Resume(p) => write!(f, "owner {p} resumes"),
        }
    }
}

/// The command reply model for one configuration and mutant.
#[derive(Clone, Debug)]
pub struct Commands {
    /// The configuration.
    pub config: CommandsConfig,
    /// The seeded defect, if any.
    pub mutant: Option<CommandsMutant>,
}

impl Commands {
    fn has(&self, mutant: CommandsMutant) -> bool {
        self.mutant == Some(mutant)
    }

    /// Whether owner `p` holds the partition's lease as it believes.
    fn holds(state: &CommandsState, p: usize) -> bool {
        let owner = &state.owners[p];
        owner.lease.is_some() && state.lease == owner.lease.map(|g| (p as u8, g))
    }

    /// The next entry owner `p` may read: the first not acknowledged and
    /// not delivered to its own generation (pending entries of earlier
    /// owners come first in the stream).
    fn next_entry(state: &CommandsState, p: usize) -> Option<u8> {
        let generation = state.owners[p].lease?;
        state
            .stream
            .iter()
            .position(|e| !e.acked && e.delivered != Some(generation))
            .map(|e| e as u8)
    }

    /// Whether owner `p` holds an entry it has read and not yet recorded
    /// (or found recorded): losing it there may make the command run again.
    fn mid_run(owner: &Owner) -> bool {
        owner
            .work
            .is_some_and(|w| matches!(w.step, Step::Lookup | Step::Run | Step::Record(_)))
    }

    /// Owner `p`'s next step on its entry.
    fn step(&self, state: &mut CommandsState, p: usize) {
        let holds = Self::holds(state, p);
        let owner = &mut state.owners[p];
        let (Some(generation), Some(work)) = (owner.lease, owner.work.as_mut()) else {
            return;
        };
        let entry = usize::from(work.entry);
        match work.step {
            Step::Lookup => {
                work.step = match state.outcome {
                    Some(recorded) => Step::Push(recorded),
                    None => Step::Run,
                };
            }
            Step::Run => {
                state.runs += 1;
                if work.read_after_record {
                    state.rerun_after_record = true;
                }
                // The run's result: its owner's generation (one run per
                // owner and entry).
                work.step = Step::Record(generation);
            }
            Step::Record(result) => {
                let pushed = match state.outcome {
                    None => {
                        state.outcome = Some(result);
                        state.first_recorded.get_or_insert(result);
                        result
                    }
                    Some(_) if self.has(CommandsMutant::OutcomeOverwrite) => {
                        state.outcome = Some(result);
                        result
                    }
                    Some(_) if self.has(CommandsMutant::PushOwnOutcome) => result,
                    // SET NX failed: the recorded outcome is what is pushed.
                    Some(recorded) => recorded,
                };
                work.step = Step::Push(pushed);
            }
            Step::Push(outcome) => {
                let reply_to = state.stream[entry].reply_to;
                state.replies[usize::from(reply_to)].push(outcome);
                work.step = Step::Ack;
            }
            Step::Ack => {
                // Fenced: a stale owner's acknowledgement is refused, and it
                // learns its lease is gone.
                if holds {
                    state.stream[entry].acked = true;
                    owner.work = None;
                } else {
                    owner.work = None;
                    owner.lease = None;
                }
            }
        }
    }
}

impl Model for Commands {
    type State = CommandsState;
    type Action = Action;

    fn init_states(&self) -> Vec<CommandsState> {
        vec![CommandsState {
            lease: None,
            generation: 0,
            stream: Vec::new(),
            outcome: None,
            first_recorded: None,
            replies: [Vec::new(), Vec::new()],
            owners: vec![
                Owner {
                    stalled: false,
                    lease: None,
                    work: None,
                };
                usize::from(self.config.owners)
            ],
            senders: vec![Sender {
                instance: 0,
                call: Call::Get,
            }],
            runs: 0,
            lost_mid_run: 0,
            rerun_after_record: false,
            resends: self.config.resends,
            crashes: self.config.crashes,
            stalls: self.config.stalls,
            lost_pushes: self.config.lost_pushes,
        }]
    }

    fn actions(&self, state: &CommandsState, actions: &mut Vec<Action>) {
        for (s, sender) in state.senders.iter().enumerate() {
            match sender.call {
                Call::Get => actions.push(Action::Get(s)),
                Call::Publish => actions.push(Action::Publish(s)),
                Call::Waiting => {
                    if !state.replies[usize::from(sender.instance)].is_empty() {
                        actions.push(Action::Pop(s));
                    }
                    // A poll that finds nothing changes nothing: only the
                    // one that finds the record is an action.
                    if state.outcome.is_some() && !self.has(CommandsMutant::WaitWithoutPolling) {
                        actions.push(Action::Poll(s));
                    }
                    if state.resends > 0 {
                        actions.push(Action::Resend {
                            sender: s,
                            elsewhere: false,
                        });
                        actions.push(Action::Resend {
                            sender: s,
                            elsewhere: true,
                        });
                    }
                }
                Call::Returned(_) | Call::GaveUp => {}
            }
        }
        let unacked = state.stream.iter().any(|e| !e.acked);
        for (p, owner) in state.owners.iter().enumerate() {
            if owner.stalled {
                actions.push(Action::Resume(p));
                continue;
            }
            match (owner.lease, owner.work) {
                // Abstraction of discovery: an owner acquires when the
                // lease is free and there is work.
                (None, _) if state.lease.is_none() && unacked => actions.push(Action::Acquire(p)),
                (None, _) => {}
                (Some(_), None) if !Self::holds(state, p) => actions.push(Action::Drop(p)),
                (Some(_), None) => {
                    if Self::next_entry(state, p).is_some() {
                        actions.push(Action::Read(p));
                    }
                }
                (Some(_), Some(work)) => {
                    actions.push(Action::Step(p, work.step));
                    if matches!(work.step, Step::Push(_)) && state.lost_pushes > 0 {
                        actions.push(Action::LosePush(p));
                    }
                }
            }
            if state.crashes > 0 {
                actions.push(Action::Crash(p));
            }
            // A stall matters only to an owner holding the lease.
            if state.stalls > 0 && Self::holds(state, p) {
                actions.push(Action::Stall(p));
            }
        }
        if let Some((holder, generation)) = state.lease {
            let owner = &state.owners[usize::from(holder)];
            // A live holder keeps renewing its lease.
            if owner.stalled || owner.lease != Some(generation) {
                actions.push(Action::Expire);
            }
        }
    }

    fn next_state(&self, last: &CommandsState, action: Action) -> Option<CommandsState> {
        let mut state = last.clone();
        match action {
            Action::Get(s) => {
                state.senders[s].call = match state.outcome {
                    Some(outcome) => Call::Returned(outcome),
                    None => Call::Publish,
                };
            }
            Action::Publish(s) => {
                // `publish.lua`'s dedup: the id was appended within the
                // window (one id here: any entry at all).
                if state.stream.is_empty() || self.has(CommandsMutant::ResendWithoutDedup) {
                    state.stream.push(Entry {
                        reply_to: state.senders[s].instance,
                        delivered: None,
                        acked: false,
                    });
                }
                state.senders[s].call = Call::Waiting;
            }
            Action::Pop(s) => {
                let instance = usize::from(state.senders[s].instance);
                let reply = state.replies[instance].remove(0);
                state.senders[s].call = Call::Returned(reply);
            }
            Action::Poll(s) => {
                state.senders[s].call = Call::Returned(state.outcome?);
            }
            Action::Resend { sender, elsewhere } => {
                state.resends -= 1;
                let instance = state.senders[sender].instance;
                state.senders[sender].call = Call::GaveUp;
                state.senders.push(Sender {
                    instance: if elsewhere { 1 - instance } else { instance },
                    call: Call::Get,
                });
            }
            Action::Acquire(p) => {
                state.generation += 1;
                state.lease = Some((p as u8, state.generation));
                state.owners[p].lease = Some(state.generation);
            }
            Action::Read(p) => {
                let entry = Self::next_entry(&state, p)?;
                let generation = state.owners[p].lease?;
                let delivered = &mut state.stream[usize::from(entry)].delivered;
                let reclaimed = delivered.is_some();
                *delivered = Some(generation);
                let step = if reclaimed && !self.has(CommandsMutant::RerunReclaimed) {
                    Step::Lookup
                } else {
                    Step::Run
                };
                state.owners[p].work = Some(Work {
                    entry,
                    step,
                    read_after_record: state.outcome.is_some(),
                });
            }
            Action::Step(p, _) => self.step(&mut state, p),
            Action::LosePush(p) => {
                state.lost_pushes -= 1;
                let work = state.owners[p].work.as_mut()?;
                work.step = Step::Ack;
            }
            Action::Drop(p) => {
                state.owners[p].lease = None;
            }
            Action::Expire => {
                let (holder, _) = state.lease.take()?;
                let owner = &state.owners[usize::from(holder)];
                // A stalled holder loses the entry it had not recorded (a
                // crashed one was counted when it crashed).
                if owner.stalled && Self::mid_run(owner) {
                    state.lost_mid_run += 1;
                }
            }
            Action::Crash(p) => {
                state.crashes -= 1;
                if Self::holds(&state, p) && Self::mid_run(&state.owners[p]) {
                    state.lost_mid_run += 1;
                }
                state.owners[p] = Owner {
                    stalled: false,
                    lease: None,
                    work: None,
                };
            }
            Action::Stall(p) => {
                state.stalls -= 1;
                state.owners[p].stalled = true;
            }
            Action::Resume(p) => {
                state.owners[p].stalled = false;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_OUTCOME, |_, state: &CommandsState| {
                state.senders.iter().all(|s| match s.call {
                    Call::Returned(outcome) => state.first_recorded == Some(outcome),
                    _ => true,
                })
            }),
            Property::always(RECORDED_NEVER_RERUN, |_, state: &CommandsState| {
                !state.rerun_after_record
            }),
            Property::always(RERUN_ONLY_AFTER_LOSS, |_, state: &CommandsState| {
                state.runs <= 1 + state.lost_mid_run
            }),
            Property::always(DEDUP, |_, state: &CommandsState| state.stream.len() <= 1),
            // Liveness, checked on every history that ends (faults used up,
            // nothing left to do).
            Property::eventually(EVERY_SENDER_ANSWERED, |_, state: &CommandsState| {
                state
                    .senders
                    .iter()
                    .all(|s| matches!(s.call, Call::Returned(_) | Call::GaveUp))
                    && state.stream.iter().all(|e| e.acked)
            }),
        ]
    }
}

/// A property some history breaks, with that history.
pub type CommandsViolation = Counterexample<Action, CommandsState>;

/// The outcome of one exhaustive check of the command reply model.
pub type CommandsReport = Outcome<CommandsConfig, CommandsMutant, Action, CommandsState>;

/// Explores every history of `config` (with `mutant` seeded) breadth-first,
/// so each counterexample is a shortest one.
pub fn check_commands(config: CommandsConfig, mutant: Option<CommandsMutant>) -> CommandsReport {
    check_commands_with(config, mutant, HasDiscoveries::All)
}

/// Like [`check_commands`], but stops exploring once every property of
/// `wanted` is broken (any property at all when `wanted` is empty), or every
/// history is explored (see [`crate::check_until_broken`]).
pub fn check_commands_until_broken(
    config: CommandsConfig,
    mutant: Option<CommandsMutant>,
    wanted: &[&'static str],
) -> CommandsReport {
    check_commands_with(config, mutant, crate::until_broken(wanted))
}

fn check_commands_with(
    config: CommandsConfig,
    mutant: Option<CommandsMutant>,
    finish: HasDiscoveries,
) -> CommandsReport {
    explore(Commands { config, mutant }, config, mutant, finish)
}
