//! What every model's check shares: the breadth-first exploration of a
//! [`Model`], stopping when asked, and its outcome with a shortest
//! counterexample per broken property.

use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// A property some history breaks, with that history.
#[derive(Debug, Clone)]
pub struct Counterexample<A, S> {
    /// The property.
    pub property: &'static str,
    /// The actions from the initial state to the violating one.
    pub trace: Vec<A>,
    /// The violating state.
    pub state: S,
}

/// The outcome of one exhaustive check of a model of configuration `C`
/// with mutants `M`.
#[derive(Debug, Clone)]
pub struct Outcome<C, M, A, S> {
    /// Distinct states explored.
    pub states: usize,
    /// The deepest history explored.
    pub max_depth: usize,
    /// What was explored.
    pub config: C,
    /// The seeded defect, if any.
    pub mutant: Option<M>,
    /// Properties broken, each with a shortest counterexample.
    pub violations: Vec<Counterexample<A, S>>,
    /// How long the check took.
    pub elapsed: Duration,
}

/// Explores every history of `model` breadth-first (so each counterexample
/// is a shortest one) until `finish`.
pub(crate) fn explore<Md, C, M>(
    model: Md,
    config: C,
    mutant: Option<M>,
    finish: HasDiscoveries,
) -> Outcome<C, M, Md::Action, Md::State>
where
    Md: Model + Clone + Send + Sync + 'static,
    Md::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync,
    Md::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync,
{
    let started = Instant::now();
    let properties = model.properties();
    let checker = model.clone().checker().finish_when(finish).spawn_bfs().join();
    let mut discoveries = checker.discoveries();
    let violations = properties
        .into_iter()
        .filter_map(|property| {
            let mut steps = discoveries.remove(property.name)?.into_vec();
            // The checker keeps the last history it visited that breaks an
            // invariant, which may go on past the break: cut it at the
            // first state that breaks it.
            if property.expectation == Expectation::Always
                && let Some(at) = steps
                    .iter()
                    .position(|(state, _)| !(property.condition)(&model, state))
            {
                steps.truncate(at + 1);
            }
            let (state, _) = steps.pop()?;
            Some(Counterexample {
                property: property.name,
                trace: steps.into_iter().filter_map(|(_, action)| action).collect(),
                state,
            })
        })
        .collect();
    Outcome {
        states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        config,
        mutant,
        violations,
        elapsed: started.elapsed(),
    }
}
