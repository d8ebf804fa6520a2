//! The endpoint as a pipeline of parts, each a plain type driven by the caller's clock: the
//! throttled mode's rate, the overloaded mode's line and fixed number of workers, and the
//! defences in front of them (`defence/`, asked in their declared order), and the work (its
//! latency, sampled once, when a worker is the request's). The modes are configurations of it
//! (`Stages::of`). It also keeps the keys in line or in work, so a repeat of a request that is
//! still waiting is told so at once.

use std::collections::{HashSet, VecDeque};

use rand::{Rng, RngExt};

use super::defence::{Armed, Defences, Dropped, Line, Waiting};
use super::{DownstreamSettings, Gcra, Mode};

/// What stands between a request and its work, as the endpoint's settings configure it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stages {
    /// A rate every request must fit (the throttled mode's), or none.
    pub rate: Option<Rate>,
    /// How many requests are worked at once (the overloaded mode's workers), or no limit.
    pub workers: Option<u32>,
    /// How many more wait for a worker.
    pub line: u32,
    /// The defences in front of the line and the workers (none on a mode without a queue).
    pub defences: Defences,
    /// How long a request's work takes, sampled in `[min, max]`.
    pub latency_ms: [u64; 2],
    /// The `Retry-After` a shed request is sent.
    pub retry_after_s: Option<u64>,
}

/// A rate limit: `rate_per_s` sustained, bursts of `burst` (kept with GCRA).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub rate_per_s: f64,
    pub burst: u32,
}

impl Stages {
    /// The pipeline a mode is: throttled is a rate alone; overloaded is a fixed number of
    /// workers with a line, and its defences; the others let every request straight on.
    pub fn of(settings: &DownstreamSettings) -> Stages {
        let (rate, workers) = match settings.mode {
            Mode::Throttled => (Some(Rate { rate_per_s: settings.rate_per_s, burst: settings.burst }), None),
            Mode::Overloaded => (None, Some(settings.capacity)),
            _ => (None, None),
        };
        let defences = if settings.mode.has_queue() { settings.defences } else { Defences::default() };
        Stages {
            rate,
            workers,
            line: settings.queue,
            defences,
            latency_ms: settings.latency_ms,
            retry_after_s: settings.retry_after_s,
        }
    }

    fn workers(&self) -> u32 {
        self.workers.unwrap_or(u32::MAX)
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

/// What a request waiting in line is told when it leaves the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// A worker is its, with this work to do.
    Work(Work),
    /// It is dropped.
    Dropped(Dropped),
}

/// A request waiting in line, as its caller holds it (the pipeline keeps no runtime: the
/// caller's channel says when a worker is its).
pub trait Waiter {
    /// Tells the request its turn; `false` when it stopped waiting (then a worker it was
    /// handed goes to the next).
    fn hand_over(self, turn: Turn) -> bool;
}

/// What a request says of itself that the pipeline may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// How long its client waits for the answer from its arrival, ms.
    pub timeout_ms: Option<u64>,
    /// How many attempts of this request its client made before (0: a first attempt).
    pub previous_attempts: Option<u32>,
}

/// What a worker going free set in motion: how many requests were handed a worker, and the
/// keys of those dropped on the way (each answered 503 by its waiter).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub handed: u32,
    pub dropped: Vec<(String, Dropped)>,
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
    /// Over the throttled mode's rate: 429.
    Throttled { retry_after_s: u64 },
    /// No worker free and no room in line: 503 at once.
    Shed { retry_after_s: Option<u64> },
    /// A request with this key is in line or in work: 409 at once.
    Busy,
    /// Dropped by a defence without its work being done: 503 at once.
    Dropped(Dropped),
}

#[derive(Debug)]
struct Place<W> {
    waiter: W,
    key: String,
    waiting: Waiting,
}

/// The pipeline's state: the throttled mode's rate, the workers busy, the line, the keys in
/// line or in work, and the defences in force.
#[derive(Debug)]
pub struct Pipeline<W> {
    throttle: Gcra,
    in_work: u32,
    line: VecDeque<Place<W>>,
    keys: HashSet<String>,
    /// When the line was last seen empty, ms.
    empty_at_ms: u64,
    /// Requests dropped from the line as another arrived, until `take_dropped`.
    dropped: Vec<(String, Dropped)>,
    defences: Armed,
}

impl<W> Default for Pipeline<W> {
    fn default() -> Self {
        Pipeline {
            throttle: Gcra::default(),
            in_work: 0,
            line: VecDeque::new(),
            keys: HashSet::new(),
            empty_at_ms: 0,
            dropped: Vec::new(),
            defences: Armed::default(),
        }
    }
}

impl<W: Waiter> Pipeline<W> {
    /// A request with `key` arrives at `now_ms`; `place` makes its place in line (the waiter
    /// the pipeline keeps, and the caller's end), called only when it must wait.
    pub fn pass<T>(
        &mut self,
        stages: &Stages,
        (key, hints): (&str, Hints),
        now_ms: u64,
        rng: &mut impl Rng,
        place: impl FnOnce() -> (W, T),
    ) -> Passage<T> {
        if let Some(Rate { rate_per_s, burst }) = stages.rate
            && let Err(wait_ms) = self.throttle.check(rate_per_s, burst, now_ms)
        {
            // Whole seconds until it would be allowed, at least 1 (RFC 9110 §10.2.3).
            return Passage::Throttled { retry_after_s: wait_ms.div_ceil(1000).max(1) };
        }
        let Some(workers) = stages.workers else { return Passage::Open };
        if let Some(dropped) = self.defences.first(|defence| defence.filter(now_ms, rng)) {
            return Passage::Dropped(dropped);
        }
        if self.keys.contains(key) {
            return Passage::Busy;
        }
        self.note_empty(now_ms);
        if let Some(dropped) = self.defences.first(|defence| defence.refuse_entry()) {
            return Passage::Dropped(dropped);
        }
        let waiting = Waiting {
            since_ms: now_ms,
            gives_up_ms: hints.timeout_ms.map(|ms| now_ms.saturating_add(ms)),
            retry: hints.previous_attempts.is_some_and(|n| n > 0),
        };
        let passage = if self.in_work < workers {
            let (work, line) = (stages.work(rng), self.line_now());
            if let Some(dropped) =
                self.defences.first(|defence| defence.before_work(&waiting, work, line, now_ms))
            {
                // Out of time as it came: in flight for no time, and left as its drop says.
                self.defences.tell(|defence| defence.entered(key, now_ms));
                self.defences.tell(|defence| defence.left(key, now_ms, dropped.said().timed_out));
                return Passage::Dropped(dropped);
            }
            self.in_work += 1;
            Passage::Work(work)
        } else if self.line.len() < stages.line as usize || self.make_room_for(&waiting, now_ms) {
            let (waiter, turn) = place();
            self.line.push_back(Place { waiter, key: key.to_owned(), waiting });
            Passage::Queued(turn)
        } else {
            // Refused before its handler: the defences hear nothing (`onIgnore`).
            return Passage::Shed { retry_after_s: stages.retry_after_s };
        };
        self.keys.insert(key.to_owned());
        self.defences.tell(|defence| defence.entered(key, now_ms));
        passage
    }

    /// The settings changed: the defences are armed afresh, each keeping what it may.
    pub fn retune(&mut self, stages: &Stages) {
        self.defences.retune(&stages.defences);
    }

    /// Whether a defence hears the answers to the requests its filter let through.
    pub fn hears_answers(&self) -> bool {
        self.defences.any(|defence| defence.hears_answers())
    }

    /// A request the filters let through was answered at `now_ms` (`success`: under 500).
    pub fn answered(&mut self, now_ms: u64, success: bool) {
        self.defences.tell(|defence| defence.answered(now_ms, success));
    }

    /// The request with `key` is out of flight at `now_ms` (`dropped` when its client gave up
    /// or it ran out of time).
    fn landed(&mut self, key: &str, now_ms: u64, dropped: bool) {
        self.defences.tell(|defence| defence.left(key, now_ms, dropped));
    }

    /// The adaptive limit now, if there is one.
    pub fn adaptive_limit(&self) -> Option<u32> {
        self.defences.ask(|defence| defence.limit())
    }

    /// With the line full, a defence may have a waiting request give its place to one
    /// arriving: the newest it names is answered 503 at once.
    fn make_room_for(&mut self, arriving: &Waiting, now_ms: u64) -> bool {
        let Some((gives_way, dropped)) = self.defences.ask(|defence| defence.gives_way(arriving)) else {
            return false;
        };
        let Some(at) = self.line.iter().rposition(|place| gives_way(&place.waiting)) else { return false };
        let Place { waiter, key, .. } = self.line.remove(at).expect("found");
        waiter.hand_over(Turn::Dropped(dropped));
        self.keys.remove(&key);
        // Answered 503 by the endpoint: a sample like any answer's (`onSuccess`).
        self.landed(&key, now_ms, false);
        self.dropped.push((key, dropped));
        true
    }

    /// The requests dropped from the line as others arrived, since the last call.
    pub fn take_dropped(&mut self) -> Vec<(String, Dropped)> {
        std::mem::take(&mut self.dropped)
    }

    /// A worker's work is done at `now_ms`: it goes to the next in line, or becomes free.
    /// With fewer workers allowed than busy (the limit was just lowered), it is retired
    /// instead.
    pub fn leave(&mut self, stages: &Stages, now_ms: u64, rng: &mut impl Rng) -> Moved {
        let mut moved = Moved::default();
        if self.in_work <= stages.workers() && self.hand_over_next(stages, now_ms, rng, &mut moved) {
            moved.handed = 1;
            return moved;
        }
        self.in_work = self.in_work.saturating_sub(1);
        moved
    }

    /// Lets waiting requests through after the limit was raised or the mode changed.
    pub fn let_waiting_on(&mut self, stages: &Stages, now_ms: u64, rng: &mut impl Rng) -> Moved {
        let mut moved = Moved::default();
        while self.in_work < stages.workers() && self.hand_over_next(stages, now_ms, rng, &mut moved) {
            self.in_work += 1;
            moved.handed += 1;
        }
        moved
    }

    /// The request with `key` is out of line and work for good at `now_ms`: a repeat may come
    /// in; `gone` when its client had given up before its answer.
    pub fn release(&mut self, key: &str, now_ms: u64, gone: bool) {
        self.keys.remove(key);
        self.landed(key, now_ms, gone);
    }

    /// Hands a worker to the next request in line that still waits and may still be worked,
    /// dropping on the way those its defences say to.
    fn hand_over_next(
        &mut self,
        stages: &Stages,
        now_ms: u64,
        rng: &mut impl Rng,
        moved: &mut Moved,
    ) -> bool {
        // The line as it stands before any leaves it, for all the defences ask of it.
        let line = self.line_now();
        let newest_first = self.defences.any(|defence| defence.newest_first(line, now_ms));
        loop {
            let next = if newest_first { self.line.pop_back() } else { self.line.pop_front() };
            let Some(Place { waiter, key, waiting }) = next else { break };
            self.note_empty(now_ms);
            let work = stages.work(rng);
            let dropped = self.defences.first(|defence| defence.before_work(&waiting, work, line, now_ms));
            let handed = match dropped {
                Some(dropped) => {
                    let waited = waiter.hand_over(Turn::Dropped(dropped));
                    moved.dropped.push((key.clone(), dropped));
                    // A drop for lack of time, or a client gone, is a drop; else an answer.
                    self.landed(&key, now_ms, dropped.said().timed_out || !waited);
                    false
                }
                None => {
                    let waited = waiter.hand_over(Turn::Work(work));
                    if !waited {
                        // Its client hung up while it waited (`onCancel`).
                        self.landed(&key, now_ms, true);
                    }
                    waited
                }
            };
            if handed {
                return true;
            }
            self.keys.remove(&key);
        }
        false
    }

    fn note_empty(&mut self, now_ms: u64) {
        if self.line.is_empty() {
            self.empty_at_ms = now_ms;
        }
    }

    fn line_now(&self) -> Line {
        Line { waiting: self.line.len(), empty_at_ms: self.empty_at_ms }
    }

    /// Whether the line is being served newest first now.
    pub fn lifo(&self, now_ms: u64) -> bool {
        let line = self.line_now();
        self.defences.any(|defence| defence.newest_first(line, now_ms))
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
    use crate::domain::DropCause;
    use crate::downstream::defence::{Kind, Said};
    use crate::downstream::{AimdSettings, Defences, Discipline, LimitSettings};

    /// A drop by `kind`, to compare with (drops compare by the defence that dropped them).
    fn by(kind: Kind) -> Dropped {
        static ANY: Said = Said { event: "", answer: "", counted: DropCause::Deadline, timed_out: false };
        Dropped::new(kind, &ANY)
    }

    /// A pipeline with `stages`' defences armed, as the endpoint makes it.
    fn armed(stages: &Stages) -> Pipeline<Place> {
        let mut pipe = Pipeline::default();
        pipe.retune(stages);
        pipe
    }

    /// A place in line that records the turn it was told; one that stopped waiting refuses.
    struct Place(Rc<Cell<Option<Turn>>>, bool);

    impl Waiter for Place {
        fn hand_over(self, turn: Turn) -> bool {
            if self.1 {
                self.0.set(Some(turn));
            }
            self.1
        }
    }

    type Told = Rc<Cell<Option<Turn>>>;

    fn place(waiting: bool) -> impl FnOnce() -> (Place, Told) {
        move || {
            let turn = Rc::new(Cell::new(None));
            (Place(turn.clone(), waiting), turn)
        }
    }

    fn overloaded(capacity: u32, queue: u32) -> Stages {
        defended(capacity, queue, Defences::default())
    }

    fn defended(capacity: u32, queue: u32, defences: Defences) -> Stages {
        Stages::of(&DownstreamSettings {
            mode: Mode::Overloaded,
            capacity,
            queue,
            latency_ms: [100, 300],
            defences,
            ..Default::default()
        })
    }

    fn plain(key: &str) -> (&str, Hints) {
        (key, Hints::default())
    }

    fn worked(told: &Told) -> bool {
        matches!(told.get(), Some(Turn::Work(_)))
    }

    #[test]
    fn the_overloaded_mode_works_capacity_queues_in_order_and_sheds_the_rest() {
        let (stages, mut rng) = (overloaded(2, 3), StdRng::seed_from_u64(1));
        let mut pipe = Pipeline::default();
        let mut pass = |pipe: &mut Pipeline<Place>, key: &str, waiting: bool| {
            pipe.pass(&stages, plain(key), 0, &mut rng, place(waiting))
        };
        let Passage::Work(work) = pass(&mut pipe, "a", true) else { panic!("a worker") };
        assert!((100..=300).contains(&work.latency_ms), "{work:?}");
        assert!(matches!(pass(&mut pipe, "b", true), Passage::Work(_)));
        assert!(matches!(pass(&mut pipe, "a", true), Passage::Busy), "a key in work is busy");
        let Passage::Queued(first) = pass(&mut pipe, "c", true) else { panic!("queued") };
        let Passage::Queued(gone) = pass(&mut pipe, "d", false) else { panic!("queued") };
        let Passage::Queued(second) = pass(&mut pipe, "e", true) else { panic!("queued") };
        assert!(matches!(pass(&mut pipe, "c", true), Passage::Busy), "a key in line is busy");
        assert!(matches!(pass(&mut pipe, "f", true), Passage::Shed { retry_after_s: Some(1) }));
        let mut rng = StdRng::seed_from_u64(2);
        assert_eq!(pipe.leave(&stages, 10, &mut rng).handed, 1);
        assert!(worked(&first) && second.get().is_none(), "the first in line gets the worker");
        assert_eq!(pipe.in_work(), 2);
        assert_eq!(pipe.leave(&stages, 20, &mut rng).handed, 1);
        assert!(gone.get().is_none() && worked(&second), "one that stopped waiting is passed over");
        let again = pipe.pass(&stages, plain("d"), 20, &mut rng, place(true));
        assert!(matches!(again, Passage::Queued(_)), "the key of one that stopped waiting is free again");
        pipe.release("a", 20, false);
        let again = pipe.pass(&stages, plain("a"), 20, &mut rng, place(true));
        assert!(matches!(again, Passage::Queued(_)), "a released key comes in as new");
    }

    #[test]
    fn a_raised_limit_lets_the_line_in_and_a_lowered_one_retires_workers() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut pipe = Pipeline::default();
        let one = overloaded(1, 2);
        assert!(matches!(pipe.pass(&one, plain("a"), 0, &mut rng, place(true)), Passage::Work(_)));
        let Passage::Queued(waiting) = pipe.pass(&one, plain("b"), 0, &mut rng, place(true)) else {
            panic!()
        };
        assert_eq!(pipe.let_waiting_on(&overloaded(2, 2), 5, &mut rng).handed, 1);
        assert!(worked(&waiting));
        assert_eq!(pipe.in_work(), 2);
        assert_eq!(pipe.leave(&one, 10, &mut rng), Moved::default(), "one worker too many: retired");
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
        let mut at =
            |pipe: &mut Pipeline<Place>, now| pipe.pass(&throttled, plain("k"), now, &mut rng, place(true));
        assert!(matches!(at(&mut pipe, 1_000), Passage::Open));
        assert!(matches!(at(&mut pipe, 1_000), Passage::Open), "the same key is not held");
        assert!(matches!(at(&mut pipe, 1_000), Passage::Throttled { retry_after_s: 1 }));
        assert!(matches!(at(&mut pipe, 1_100), Passage::Open), "one interval later, on the caller's clock");
        let healthy = Stages::of(&DownstreamSettings::default());
        let mut rng = StdRng::seed_from_u64(5);
        assert!(matches!(pipe.pass(&healthy, plain("k"), 1_100, &mut rng, place(true)), Passage::Open));
    }

    /// One worker busy from 0 ms, and `keys` in line behind it, arriving at the given ms.
    fn busy_with_line(
        stages: &Stages,
        keys: &[(&str, u64, Option<u64>)],
        rng: &mut StdRng,
    ) -> (Pipeline<Place>, Vec<Told>) {
        let mut pipe = armed(stages);
        assert!(matches!(pipe.pass(stages, plain("busy"), 0, rng, place(true)), Passage::Work(_)));
        let told = keys
            .iter()
            .map(|&(key, at, timeout_ms)| {
                match pipe.pass(
                    stages,
                    (key, Hints { timeout_ms, ..Default::default() }),
                    at,
                    rng,
                    place(true),
                ) {
                    Passage::Queued(told) => told,
                    other => panic!("{key} not queued: {other:?}"),
                }
            })
            .collect();
        (pipe, told)
    }

    #[test]
    fn the_deadline_drops_work_whose_client_will_have_given_up_and_only_that() {
        let mut rng = StdRng::seed_from_u64(6);
        let stages = defended(1, 4, Defences { deadline: true, ..Default::default() });
        // Work takes 100-300 ms; the clients wait 1,000 ms from their arrival, one says nothing.
        let line = [("early", 0, Some(1_000)), ("silent", 10, None), ("late", 900, Some(1_000))];
        let (mut pipe, told) = busy_with_line(&stages, &line, &mut rng);
        // At 650 ms "early" has 350 ms left, more than any work takes: worked.
        assert_eq!(pipe.leave(&stages, 650, &mut rng).handed, 1);
        assert!(worked(&told[0]));
        // At 1,000 ms: "silent" said nothing and is worked; "late" has 900 ms left.
        assert!(pipe.leave(&stages, 1_000, &mut rng).dropped.is_empty());
        assert!(worked(&told[1]));
        // At 1,850 ms "late" has 50 ms left: no work of 100-300 ms fits.
        let at = 1_850;
        let moved = pipe.leave(&stages, at, &mut rng);
        assert_eq!(moved.dropped, vec![("late".to_owned(), by(Kind::Deadline))]);
        assert_eq!(told[2].get(), Some(Turn::Dropped(by(Kind::Deadline))));
        assert_eq!((moved.handed, pipe.in_work()), (0, 0), "the worker is free");
        let mut waiting = |timeout_ms| {
            let hints = Hints { timeout_ms: Some(timeout_ms), ..Default::default() };
            pipe.pass(&stages, ("late", hints), at, &mut rng, place(true))
        };
        assert!(
            matches!(waiting(50), Passage::Dropped(d) if d.by == Kind::Deadline),
            "50 ms is too short for any work"
        );
        let plenty = waiting(400);
        assert!(matches!(plenty, Passage::Work(_)), "the dropped key was let go");
    }

    #[test]
    fn codel_limits_the_wait_to_its_target_only_while_a_standing_queue_exists() {
        let mut rng = StdRng::seed_from_u64(7);
        let codel = Defences {
            queue: Discipline::Codel,
            codel_target_ms: 100,
            codel_interval_ms: 1_000,
            ..Default::default()
        };
        let stages = defended(1, 10, codel);
        let line = [("a", 0, None), ("b", 50, None), ("c", 800, None), ("d", 1_150, None)];
        let (mut pipe, told) = busy_with_line(&stages, &line, &mut rng);
        // At 900 ms the line has not been empty for 900 ms < N: waits up to N (1,000 ms) pass.
        assert_eq!(pipe.leave(&stages, 900, &mut rng).handed, 1);
        assert!(worked(&told[0]), "waited 900 ms, under N");
        // At 1,200 ms the line has been busy since 0 ms: a standing queue, waits over M (100 ms)
        // are dropped in order until one fits.
        let moved = pipe.leave(&stages, 1_200, &mut rng);
        let timed_out = |k: &str| (k.to_owned(), by(Kind::Codel));
        assert_eq!(moved.dropped, vec![timed_out("b"), timed_out("c")]);
        assert_eq!(moved.handed, 1);
        assert!(worked(&told[3]), "waited 50 ms, under M");
        assert!(pipe.lifo(1_200).eq(&false), "CoDel serves in order");
        // The line emptied at 1,200 ms: no standing queue, the limit is N again.
        let Passage::Queued(e) = pipe.pass(&stages, plain("e"), 1_300, &mut rng, place(true)) else {
            panic!()
        };
        assert_eq!(pipe.leave(&stages, 2_100, &mut rng).handed, 1);
        assert!(worked(&e), "waited 800 ms with the line empty 900 ms before: under N");
    }

    #[test]
    fn the_declared_order_decides_which_defence_drops_a_request_past_two() {
        let mut rng = StdRng::seed_from_u64(13);
        let both = Defences { queue: Discipline::Codel, deadline: true, ..Default::default() };
        let stages = defended(1, 4, both);
        // Waits 1,200 ms in a line standing since 0 (past CoDel's 25 ms) and its client gives
        // up at 1,000 ms (past its deadline): CoDel is asked first.
        let (mut pipe, told) = busy_with_line(&stages, &[("late", 0, Some(1_000))], &mut rng);
        let moved = pipe.leave(&stages, 1_200, &mut rng);
        assert_eq!(moved.dropped, vec![("late".to_owned(), by(Kind::Codel))]);
        assert_eq!(told[0].get(), Some(Turn::Dropped(by(Kind::Codel))));
        let at = |kind| Kind::ORDER.iter().position(|&k| k == kind);
        assert!(at(Kind::Codel) < at(Kind::Deadline), "{:?}", Kind::ORDER);
    }

    #[test]
    fn adaptive_lifo_serves_the_newest_while_a_standing_queue_exists() {
        let mut rng = StdRng::seed_from_u64(8);
        let lifo =
            Defences { queue: Discipline::AdaptiveLifo, codel_interval_ms: 1_000, ..Default::default() };
        let stages = defended(1, 10, lifo);
        let line = [("a", 0, None), ("b", 100, None), ("c", 200, None), ("d", 1_100, None)];
        let (mut pipe, told) = busy_with_line(&stages, &line, &mut rng);
        assert!(!pipe.lifo(500), "no standing queue yet");
        assert_eq!(pipe.leave(&stages, 500, &mut rng).handed, 1);
        assert!(worked(&told[0]), "in order while the queue is young");
        assert!(pipe.lifo(1_200));
        assert_eq!(pipe.leave(&stages, 1_200, &mut rng).handed, 1);
        assert!(worked(&told[3]) && told[1].get().is_none(), "the newest first once it stands");
        assert_eq!(pipe.leave(&stages, 1_300, &mut rng).handed, 1);
        assert!(worked(&told[2]) && told[1].get().is_none());
        assert!(pipe.leave(&stages, 1_400, &mut rng).dropped.is_empty(), "nothing is dropped");
        assert!(worked(&told[1]));
        let plain_lifo = defended(1, 10, Defences { queue: Discipline::Lifo, ..Default::default() });
        assert!(armed(&plain_lifo).lifo(0), "LIFO is always newest first");
    }

    #[test]
    fn retries_first_sheds_the_newest_retry_from_a_full_line_for_a_first_attempt() {
        let mut rng = StdRng::seed_from_u64(9);
        let stages = defended(1, 2, Defences { retries_first: true, ..Default::default() });
        let mut pipe = armed(&stages);
        let hints = |previous| Hints { previous_attempts: Some(previous), ..Default::default() };
        let mut pass = |pipe: &mut Pipeline<Place>, key: &str, previous| {
            pipe.pass(&stages, (key, hints(previous)), 0, &mut rng, place(true))
        };
        assert!(matches!(pass(&mut pipe, "busy", 0), Passage::Work(_)));
        let Passage::Queued(older) = pass(&mut pipe, "older-retry", 1) else { panic!() };
        let Passage::Queued(newer) = pass(&mut pipe, "newer-retry", 3) else { panic!() };
        assert!(
            matches!(pass(&mut pipe, "another-retry", 1), Passage::Shed { .. }),
            "a retry takes no one's place"
        );
        let Passage::Queued(first) = pass(&mut pipe, "first", 0) else {
            panic!("a first attempt gets a place")
        };
        assert_eq!(newer.get(), Some(Turn::Dropped(by(Kind::RetriesFirst))), "the newest retry gave it up");
        assert_eq!(older.get(), None);
        assert_eq!(pipe.take_dropped(), vec![("newer-retry".to_owned(), by(Kind::RetriesFirst))]);
        assert!(pipe.take_dropped().is_empty());
        let Passage::Queued(_) = pass(&mut pipe, "second", 0) else { panic!() };
        assert_eq!(older.get(), Some(Turn::Dropped(by(Kind::RetriesFirst))));
        assert!(matches!(pass(&mut pipe, "third", 0), Passage::Shed { .. }), "no retry left to shed");
        assert!(matches!(pass(&mut pipe, "newer-retry", 0), Passage::Shed { .. }), "its key is free again");
        let mut rng = StdRng::seed_from_u64(10);
        assert_eq!(pipe.leave(&stages, 300, &mut rng).handed, 1);
        assert!(worked(&first), "first attempts keep their order");
        let fifo = overloaded(1, 2);
        let mut plain_pipe = Pipeline::default();
        let mut rng = StdRng::seed_from_u64(11);
        for (key, previous) in [("a", 0), ("b", 1), ("c", 1)] {
            plain_pipe.pass(&fifo, (key, hints(previous)), 0, &mut rng, place(true));
        }
        let off = plain_pipe.pass(&fifo, ("d", hints(0)), 0, &mut rng, place(true));
        assert!(matches!(off, Passage::Shed { .. }), "off, a full line sheds whoever comes");
    }

    #[test]
    fn the_adaptive_limit_refuses_over_it_at_once_and_learns_as_requests_leave() {
        let mut rng = StdRng::seed_from_u64(12);
        let aimd = AimdSettings { initial_limit: 2, min_limit: 2, max_limit: 4, ..Default::default() };
        let stages = defended(1, 10, Defences { limit: LimitSettings::Aimd(aimd), ..Default::default() });
        let mut pipe = Pipeline::default();
        pipe.retune(&stages);
        assert!(matches!(pipe.pass(&stages, plain("a"), 0, &mut rng, place(true)), Passage::Work(_)));
        let Passage::Queued(b) = pipe.pass(&stages, plain("b"), 0, &mut rng, place(true)) else { panic!() };
        let over = pipe.pass(&stages, plain("c"), 0, &mut rng, place(true));
        assert!(
            matches!(over, Passage::Dropped(d) if d.by == Kind::Limit),
            "a third in flight is over 2: {over:?}"
        );
        assert_eq!(pipe.waiting(), 1, "refused before the line");
        // "a" is answered after 150 ms with 1 in flight as it came: 1 × 2 >= 2, the limit grows.
        assert_eq!(pipe.leave(&stages, 150, &mut rng).handed, 1);
        assert!(worked(&b));
        pipe.release("a", 150, false);
        assert_eq!(pipe.adaptive_limit(), Some(3));
        let Passage::Queued(c) = pipe.pass(&stages, plain("c"), 160, &mut rng, place(false)) else {
            panic!()
        };
        let Passage::Queued(_) = pipe.pass(&stages, plain("d"), 160, &mut rng, place(true)) else { panic!() };
        assert!(matches!(pipe.pass(&stages, plain("e"), 160, &mut rng, place(true)), Passage::Dropped(_)));
        pipe.release("b", 1_000, false);
        assert_eq!(pipe.adaptive_limit(), Some(4), "1 s in flight is not over the timeout: 2 × 2 >= 3, + 1");
        assert_eq!(pipe.leave(&stages, 1_300, &mut rng).handed, 1);
        assert_eq!(c.get(), None);
        assert_eq!(pipe.adaptive_limit(), Some(3), "a client gone is a drop: 4 × 0.9");
        pipe.release("d", 2_400, false);
        assert_eq!(pipe.adaptive_limit(), Some(2), "2,240 ms in flight is over the 1 s timeout");
        let fixed = defended(1, 10, Defences::default());
        pipe.retune(&fixed);
        assert_eq!(pipe.adaptive_limit(), None);
    }
}
