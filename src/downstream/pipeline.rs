//! The endpoint as a pipeline of parts, each a plain type driven by the caller's clock:
//! admission (the throttled mode's rate limit), the line's discipline (first in, first out),
//! the concurrency limit (the overloaded mode's fixed number of workers) and the work (its
//! latency, sampled once, when a worker is the request's). The modes are configurations of it
//! (`Stages::of`). It also keeps the keys in line or in work, so a repeat of a request that is
//! still waiting is told so at once.

use std::collections::{HashSet, VecDeque};

use rand::{Rng, RngExt};

use super::{DownstreamSettings, Gcra, Mode};

/// What stands between a request and its work, as the endpoint's settings configure it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stages {
    /// A rate every request must fit (the throttled mode's), or none.
    pub admission: Option<Rate>,
    /// How many requests are worked at once (the overloaded mode's workers), or no limit.
    pub limit: Option<Limit>,
    /// How many more wait for a worker, and in what order.
    pub line: Line,
    /// How long a request's work takes, sampled in `[min, max]`.
    pub latency_ms: [u64; 2],
    /// The `Retry-After` a shed request is sent.
    pub retry_after_s: u64,
}

/// A rate limit: `rate_per_s` sustained, bursts of `burst` (kept with GCRA).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub rate_per_s: f64,
    pub burst: u32,
}

/// The concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A fixed number of workers.
    Fixed(u32),
}

impl Limit {
    fn workers(self) -> u32 {
        match self {
            Limit::Fixed(n) => n,
        }
    }
}

/// The line in front of the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    pub size: u32,
    pub discipline: Discipline,
}

/// Which waiting request a free worker takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    /// The one that waited longest.
    Fifo,
}

impl Stages {
    /// The pipeline a mode is: throttled is admission alone; overloaded is a fixed limit with
    /// a FIFO line; the others let every request straight on.
    pub fn of(settings: &DownstreamSettings) -> Stages {
        let (admission, limit) = match settings.mode {
            Mode::Throttled => (Some(Rate { rate_per_s: settings.rate_per_s, burst: settings.burst }), None),
            Mode::Overloaded => (None, Some(Limit::Fixed(settings.capacity))),
            _ => (None, None),
        };
        Stages {
            admission,
            limit,
            line: Line { size: settings.queue, discipline: Discipline::Fifo },
            latency_ms: settings.latency_ms,
            retry_after_s: settings.retry_after_s,
        }
    }

    fn workers(&self) -> u32 {
        self.limit.map_or(u32::MAX, Limit::workers)
    }

    fn work(&self, rng: &mut impl Rng) -> Work {
        let [min, max] = self.latency_ms;
        Work { latency_ms: rng.random_range(min..=max) }
    }
}

/// A worker's hold on one request: how long its work takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub latency_ms: u64,
}

/// A request waiting in line, as its caller holds it (the pipeline keeps no runtime: the
/// caller's channel says when a worker is its).
pub trait Waiter {
    /// Hands a worker over, with the work to do; `false` when the request stopped waiting,
    /// and the worker goes to the next.
    fn hand_over(self, work: Work) -> bool;
}

/// How a request gets past the pipeline; `T` is the caller's end of its place in line.
#[derive(Debug)]
pub enum Passage<T> {
    /// Straight on, with no limit to hold it.
    Open,
    /// A worker is this request's: do the work, then give it back with `Pipeline::leave`.
    Work(Work),
    /// Wait in line: a worker is this request's when `T` says so.
    Queued(T),
    /// Over the admission rate: 429.
    Throttled { retry_after_s: u64 },
    /// No worker free and no room in line: 503 at once.
    Shed { retry_after_s: u64 },
    /// A request with this key is in line or in work: 409 at once.
    Busy,
}

#[derive(Debug)]
struct Place<W> {
    waiter: W,
    key: String,
}

/// The pipeline's state: the admission's rate, the workers busy, the line, and the keys in
/// line or in work.
#[derive(Debug)]
pub struct Pipeline<W> {
    throttle: Gcra,
    in_work: u32,
    line: VecDeque<Place<W>>,
    keys: HashSet<String>,
}

impl<W> Default for Pipeline<W> {
    fn default() -> Self {
        Pipeline { throttle: Gcra::default(), in_work: 0, line: VecDeque::new(), keys: HashSet::new() }
    }
}

impl<W: Waiter> Pipeline<W> {
    /// A request with `key` arrives at `now_ms`; `place` makes its place in line (the waiter
    /// the pipeline keeps, and the caller's end), called only when it must wait.
    pub fn pass<T>(
        &mut self,
        stages: &Stages,
        key: &str,
        now_ms: u64,
        rng: &mut impl Rng,
        place: impl FnOnce() -> (W, T),
    ) -> Passage<T> {
        if let Some(Rate { rate_per_s, burst }) = stages.admission
            && let Err(wait_ms) = self.throttle.check(rate_per_s, burst, now_ms)
        {
            // Whole seconds until it would be allowed, at least 1 (RFC 9110 §10.2.3).
            return Passage::Throttled { retry_after_s: wait_ms.div_ceil(1000).max(1) };
        }
        let Some(limit) = stages.limit else { return Passage::Open };
        if self.keys.contains(key) {
            return Passage::Busy;
        }
        if self.in_work < limit.workers() {
            self.in_work += 1;
            self.keys.insert(key.to_owned());
            Passage::Work(stages.work(rng))
        } else if self.line.len() < stages.line.size as usize {
            let (waiter, turn) = place();
            self.line.push_back(Place { waiter, key: key.to_owned() });
            self.keys.insert(key.to_owned());
            Passage::Queued(turn)
        } else {
            Passage::Shed { retry_after_s: stages.retry_after_s }
        }
    }

    /// A worker's work is done: it goes to the next in line, or becomes free. With fewer
    /// workers allowed than busy (the limit was just lowered), it is retired instead. Returns
    /// how many requests were handed a worker (0 or 1).
    pub fn leave(&mut self, stages: &Stages, rng: &mut impl Rng) -> u32 {
        if self.in_work <= stages.workers() && self.hand_over_next(stages, rng) {
            return 1;
        }
        self.in_work = self.in_work.saturating_sub(1);
        0
    }

    /// Lets waiting requests through after the limit was raised or the mode changed; returns
    /// how many were handed a worker.
    pub fn admit_waiting(&mut self, stages: &Stages, rng: &mut impl Rng) -> u32 {
        let mut handed = 0;
        while self.in_work < stages.workers() && self.hand_over_next(stages, rng) {
            self.in_work += 1;
            handed += 1;
        }
        handed
    }

    /// The request with `key` is out of line and work for good: a repeat may come in.
    pub fn release(&mut self, key: &str) {
        self.keys.remove(key);
    }

    /// Hands a worker to the next request in line that still waits.
    fn hand_over_next(&mut self, stages: &Stages, rng: &mut impl Rng) -> bool {
        while let Some(Place { waiter, key }) = self.line.pop_front() {
            if waiter.hand_over(stages.work(rng)) {
                return true;
            }
            self.keys.remove(&key);
        }
        false
    }

    pub fn in_work(&self) -> u32 {
        self.in_work
    }

    pub fn waiting(&self) -> usize {
        self.line.len()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    /// A place in line that records the work it was handed; one that stopped waiting refuses.
    struct Place(Rc<Cell<Option<Work>>>, bool);

    impl Waiter for Place {
        fn hand_over(self, work: Work) -> bool {
            if self.1 {
                self.0.set(Some(work));
            }
            self.1
        }
    }

    fn place(waiting: bool) -> impl FnOnce() -> (Place, Rc<Cell<Option<Work>>>) {
        move || {
            let turn = Rc::new(Cell::new(None));
            (Place(turn.clone(), waiting), turn)
        }
    }

    fn overloaded(capacity: u32, queue: u32) -> Stages {
        Stages::of(&DownstreamSettings {
            mode: Mode::Overloaded,
            capacity,
            queue,
            latency_ms: [100, 300],
            ..Default::default()
        })
    }

    #[test]
    fn the_overloaded_mode_works_capacity_queues_in_order_and_sheds_the_rest() {
        let (stages, mut rng) = (overloaded(2, 3), StdRng::seed_from_u64(1));
        let mut pipe = Pipeline::default();
        let mut pass = |pipe: &mut Pipeline<Place>, key: &str, waiting: bool| {
            pipe.pass(&stages, key, 0, &mut rng, place(waiting))
        };
        let Passage::Work(work) = pass(&mut pipe, "a", true) else { panic!("a worker") };
        assert!((100..=300).contains(&work.latency_ms), "{work:?}");
        assert!(matches!(pass(&mut pipe, "b", true), Passage::Work(_)));
        assert!(matches!(pass(&mut pipe, "a", true), Passage::Busy), "a key in work is busy");
        let Passage::Queued(first) = pass(&mut pipe, "c", true) else { panic!("queued") };
        let Passage::Queued(gone) = pass(&mut pipe, "d", false) else { panic!("queued") };
        let Passage::Queued(second) = pass(&mut pipe, "e", true) else { panic!("queued") };
        assert!(matches!(pass(&mut pipe, "c", true), Passage::Busy), "a key in line is busy");
        assert!(matches!(pass(&mut pipe, "f", true), Passage::Shed { retry_after_s: 1 }));
        let mut rng = StdRng::seed_from_u64(2);
        assert_eq!(pipe.leave(&stages, &mut rng), 1);
        assert!(first.get().is_some() && second.get().is_none(), "the first in line gets the worker");
        assert_eq!(pipe.in_work(), 2);
        assert_eq!(pipe.leave(&stages, &mut rng), 1);
        assert!(gone.get().is_none() && second.get().is_some(), "one that stopped waiting is passed over");
        assert!(
            matches!(pipe.pass(&stages, "d", 0, &mut rng, place(true)), Passage::Queued(_)),
            "the key of one that stopped waiting is free again"
        );
        pipe.release("a");
        assert!(
            matches!(pipe.pass(&stages, "a", 0, &mut rng, place(true)), Passage::Queued(_)),
            "a released key comes in as new"
        );
    }

    #[test]
    fn a_raised_limit_lets_the_line_in_and_a_lowered_one_retires_workers() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut pipe = Pipeline::default();
        let one = overloaded(1, 2);
        assert!(matches!(pipe.pass(&one, "a", 0, &mut rng, place(true)), Passage::Work(_)));
        let Passage::Queued(waiting) = pipe.pass(&one, "b", 0, &mut rng, place(true)) else { panic!() };
        assert_eq!(pipe.admit_waiting(&overloaded(2, 2), &mut rng), 1);
        assert!(waiting.get().is_some());
        assert_eq!(pipe.in_work(), 2);
        assert_eq!(pipe.leave(&one, &mut rng), 0, "one worker too many: retired");
        assert_eq!(pipe.in_work(), 1);
    }

    #[test]
    fn the_throttled_mode_is_admission_alone() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut pipe: Pipeline<Place> = Pipeline::default();
        let throttled = Stages::of(&DownstreamSettings {
            mode: Mode::Throttled,
            rate_per_s: 10.0,
            burst: 2,
            ..Default::default()
        });
        let at = |pipe: &mut Pipeline<Place>, now, rng: &mut StdRng| {
            pipe.pass(&throttled, "k", now, rng, place(true))
        };
        assert!(matches!(at(&mut pipe, 1_000, &mut rng), Passage::Open));
        assert!(matches!(at(&mut pipe, 1_000, &mut rng), Passage::Open), "the same key is not held");
        assert!(matches!(at(&mut pipe, 1_000, &mut rng), Passage::Throttled { retry_after_s: 1 }));
        assert!(
            matches!(at(&mut pipe, 1_100, &mut rng), Passage::Open),
            "one interval later, on the caller's clock"
        );
        let healthy = Stages::of(&DownstreamSettings::default());
        assert!(matches!(pipe.pass(&healthy, "k", 1_100, &mut rng, place(true)), Passage::Open));
    }
}
