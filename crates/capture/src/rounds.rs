//! The one interleaved-rounds engine: configurations of one command measured
//! in rounds — every configuration once per round, so that drift in the
//! machine's state hits them alike — used by validate (A/B pairs), bench (the
//! suites), rank (every mapping) and size (every budget).
//!
//! Invariants: round 0, when asked for, is an untimed warm-up (memory the host
//! took back is slow once); before every timed run the footprint measured in
//! the warm-up round (its 4 KB faults, at most half of what is available) is
//! touched and freed, so each run starts on memory the host backs; with
//! rotation the order moves by one place per round, so no configuration
//! always follows the same other one. Rounds go on while `more` says so, at
//! least `min` and at most `max` timed rounds.

use anyhow::Result;
use hugetune_host::machine::{self, warm_memory};

/// How the rounds go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rounds {
    /// Timed rounds at least and at most (`more` decides in between).
    pub min: usize,
    pub max: usize,
    /// Round 0 is an untimed warm-up of every configuration.
    pub warm_up: bool,
    /// The order moves by one place per round (else configuration 0 first).
    pub rotate: bool,
    /// Touch the footprint of the warm-up's `footprint_of` run before each timed run.
    pub warm_memory: bool,
    pub footprint_of: usize,
}

impl Rounds {
    /// `n` timed rounds after a warm-up, rotated, warming memory before each run
    /// with the footprint of configuration 0.
    pub fn fixed(n: usize) -> Rounds {
        Rounds {
            min: n,
            max: n,
            warm_up: true,
            rotate: true,
            warm_memory: true,
            footprint_of: 0,
        }
    }
}

/// One run to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub config: usize,
    /// 0: the warm-up round.
    pub round: usize,
}

impl Step {
    pub fn timed(&self) -> bool {
        self.round > 0
    }
}

/// What a run said: its 4 KB faults (the footprint, when the warm-up run of
/// `footprint_of` gives them), nothing to say (`Done`: no footprint wanted, or
/// the run failed), or that the measurement must stop now (a run that broke
/// the program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    Faults(u64),
    Done,
    Stop,
}

/// The order of the configurations in `round`.
pub fn order(n: usize, round: usize, rotate: bool) -> Vec<usize> {
    if rotate {
        (0..n).map(|k| (k + round) % n.max(1)).collect()
    } else {
        (0..n).collect()
    }
}

/// The memory to touch before a timed run: the footprint of a run that took
/// `minor_faults` 4 KB faults, plus a quarter, at most half of what is available.
pub fn footprint_bytes(minor_faults: u64) -> u64 {
    let cap = machine::mem_available_kb().unwrap_or(0) * 1024 / 2;
    (minor_faults * 4096 * 5 / 4).min(cap)
}

/// Runs `n` configurations in rounds (module doc): `one` makes a run and keeps
/// what it wants of it; `more(rounds_done)` is asked after each timed round
/// from `min` on. Returns the timed rounds run (a `Ran::Stop` ends the current
/// round and the measurement).
pub fn run(
    n: usize,
    r: &Rounds,
    mut one: impl FnMut(Step) -> Result<Ran>,
    mut more: impl FnMut(usize) -> bool,
) -> Result<usize> {
    let mut warm = 0u64;
    let mut round = if r.warm_up { 0 } else { 1 };
    loop {
        for config in order(n, round, r.rotate) {
            if round > 0 && r.warm_memory {
                warm_memory(warm);
            }
            match one(Step { config, round })? {
                Ran::Faults(f) if round == 0 && config == r.footprint_of => {
                    warm = footprint_bytes(f)
                }
                Ran::Stop => return Ok(round),
                _ => {}
            }
        }
        if round >= r.min && (round >= r.max || !more(round)) {
            return Ok(round);
        }
        round += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_rotate_by_one_place_per_round() {
        assert_eq!(order(3, 0, true), vec![0, 1, 2]);
        assert_eq!(order(3, 1, true), vec![1, 2, 0]);
        assert_eq!(order(3, 5, true), vec![2, 0, 1]);
        assert_eq!(order(3, 5, false), vec![0, 1, 2]);
        assert!(order(0, 3, true).is_empty());
    }

    #[test]
    fn warm_up_then_timed_rounds_until_more_says_no() {
        let mut seen = Vec::new();
        let r = Rounds {
            min: 2,
            max: 5,
            warm_up: true,
            rotate: true,
            warm_memory: false,
            footprint_of: 0,
        };
        let n = run(
            2,
            &r,
            |s| {
                seen.push((s.round, s.config));
                Ok(Ran::Faults(10))
            },
            |done| done < 3,
        )
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            seen,
            vec![
                (0, 0),
                (0, 1),
                (1, 1),
                (1, 0),
                (2, 0),
                (2, 1),
                (3, 1),
                (3, 0)
            ]
        );
        // Without a warm-up, fixed order, stopped by a run.
        let mut seen = Vec::new();
        let r = Rounds {
            min: 1,
            max: 10,
            warm_up: false,
            rotate: false,
            warm_memory: false,
            footprint_of: 0,
        };
        let n = run(
            2,
            &r,
            |s| {
                seen.push((s.round, s.config));
                Ok(if s.round == 2 && s.config == 1 {
                    Ran::Stop
                } else {
                    Ran::Faults(0)
                })
            },
            |_| true,
        )
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, vec![(1, 0), (1, 1), (2, 0), (2, 1)]);
        assert_eq!(
            run(1, &Rounds::fixed(2), |_| Ok(Ran::Done), |_| true).unwrap(),
            2
        );
    }
}
