//! The endpoint's own defences against overload, one file each: a small type behind the one
//! trait `Defence`, pure and fed `now_ms`, citing the source whose rule it follows. The
//! pipeline (`pipeline.rs`) asks the defences in force at the points of a request's way
//! (as it arrives, as it would take a place in flight, with the line full, as a worker takes
//! the next, as it leaves) in one order, declared once below (`defences!`). Their settings are
//! one wire object, `Defences` (`"defences"` in `PUT /api/labs/{lab}/downstream`); they act on
//! the line in front of the workers, so only a mode with a queue (`Mode::has_queue`) takes them.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::domain::DropCause;

pub use admission_control::AdmissionControlSettings;
pub use limit::{AimdSettings, Gradient2Settings, LimitSettings};

use super::pipeline::Work;

/// One defence: what it says at each point of a request's way. Every point but `arm` has a
/// default that lets the request on, so a defence writes only the points it acts at.
pub trait Defence: fmt::Debug {
    /// The defence the settings turn on, keeping what `kept` learnt where the settings allow;
    /// none when they leave it off.
    fn arm(defences: &Defences, kept: Option<Self>) -> Option<Self>
    where
        Self: Sized;

    /// The field of `defences` that turns it on, as the 422s name it.
    fn field() -> &'static str
    where
        Self: Sized;

    /// How a settings-change flag names it with its parameters ("CoDel 80 ms / 500 ms"), when
    /// the settings turn it on.
    fn flag(defences: &Defences) -> Option<String>
    where
        Self: Sized;

    /// The first of its parameters out of range, as `(field under defences, detail)`.
    fn invalid(_defences: &Defences) -> Option<(String, String)>
    where
        Self: Sized,
    {
        None
    }

    /// A request arrives at `now_ms`, before the endpoint looks at its key: refuse it?
    fn filter(&mut self, _now_ms: u64, _rng: &mut dyn Rng) -> Option<Dropped> {
        None
    }

    /// A new request would take a place in flight (in line or in work): refuse it?
    fn refuse_entry(&mut self) -> Option<Dropped> {
        None
    }

    /// A request with `key` took a place in flight at `now_ms`.
    fn entered(&mut self, _key: &str, _now_ms: u64) {}

    /// With the line full, which requests waiting may give their place to `arriving` (the
    /// newest of them does), and the drop that is for it.
    fn gives_way(&self, _arriving: &Waiting) -> Option<GivesWay> {
        None
    }

    /// Whether a free worker takes the newest in line now, not the one that waited longest.
    fn newest_first(&self, _line: Line, _now_ms: u64) -> bool {
        false
    }

    /// A request is about to begin `work` at `now_ms` (as it comes to a free worker, or at its
    /// turn in line): drop it instead?
    fn before_work(&self, _request: &Waiting, _work: Work, _line: Line, _now_ms: u64) -> Option<Dropped> {
        None
    }

    /// The request with `key` is out of flight at `now_ms`; `dropped` when its client gave up
    /// or it ran out of time.
    fn left(&mut self, _key: &str, _now_ms: u64, _dropped: bool) {}

    /// Whether it hears the answers to the requests its filter let through.
    fn hears_answers(&self) -> bool {
        false
    }

    /// A request its filter let through was answered at `now_ms` (`success`: under 500).
    fn answered(&mut self, _now_ms: u64, _success: bool) {}

    /// The limit on requests in flight it keeps now, if it keeps one.
    fn limit(&self) -> Option<u32> {
        None
    }
}

/// The declared order: one line for each defence (its `Kind`, and its file and state, which
/// the line declares); every point of a request's way asks the defences in force in the order
/// of these lines, and the first that refuses or drops decides. Why this order:
/// admission control is an HTTP filter in front of the service, so it comes first; the
/// adaptive limit stands in front of the line, so it refuses before a place is taken; retries
/// first makes room in a full line; LIFO picks the end of the line a free worker takes; at a
/// request's turn CoDel comes before the deadline, so a request that waited past CoDel's limit
/// is dropped as a queue timeout whatever its client's patience; the deadline is last, on the
/// work about to begin.
macro_rules! defences {
    ($($(#[$doc:meta])* $kind:ident => $module:ident::$state:ident,)*) => {
        $(mod $module;)*

        /// Which defence: one for each file.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Kind {
            $($(#[$doc])* $kind,)*
        }

        impl Kind {
            /// Every defence, in the declared order.
            pub const ORDER: [Kind; [$(Kind::$kind),*].len()] = [$(Kind::$kind),*];

            /// The field of `defences` that turns it on.
            pub fn field(self) -> &'static str {
                match self {
                    $(Kind::$kind => <$module::$state as Defence>::field(),)*
                }
            }
        }

        /// The defences in force, each with its own state.
        #[derive(Debug, Default)]
        pub struct Armed {
            $($module: Option<$module::$state>,)*
        }

        impl Armed {
            fn get(&mut self, kind: Kind) -> Option<&mut dyn Defence> {
                match kind {
                    $(Kind::$kind => self.$module.as_mut().map(|d| d as &mut dyn Defence),)*
                }
            }

            fn peek(&self, kind: Kind) -> Option<&dyn Defence> {
                match kind {
                    $(Kind::$kind => self.$module.as_ref().map(|d| d as &dyn Defence),)*
                }
            }

            /// The settings changed: each defence armed from them, keeping what it may keep.
            pub fn retune(&mut self, defences: &Defences) {
                $(self.$module = <$module::$state as Defence>::arm(defences, self.$module.take());)*
            }
        }

        impl Defences {
            /// The first defence these settings turn on, in the declared order.
            pub fn first_on(&self) -> Option<Kind> {
                $(if <$module::$state as Defence>::arm(self, None).is_some() {
                    return Some(Kind::$kind);
                })*
                None
            }

            /// Each defence these settings turn on, as a settings-change flag names it, in the
            /// declared order.
            pub fn flags(&self) -> Vec<String> {
                let mut said = Vec::new();
                $(said.extend(<$module::$state as Defence>::flag(self));)*
                said
            }

            /// The first parameter out of range, as `(field under defences, detail)`, in the
            /// declared order.
            pub fn invalid(&self) -> Option<(String, String)> {
                $(if let Some(refused) = <$module::$state as Defence>::invalid(self) {
                    return Some(refused);
                })*
                None
            }
        }
    };
}

defences! {
    /// Envoy's admission control filter.
    AdmissionControl => admission_control::AdmissionControl,
    /// Netflix's adaptive concurrency limit (AIMD, Gradient2).
    Limit => limit::Limit,
    /// Retries give their place in a full line to first attempts (gRFC A6's header).
    RetriesFirst => retries_first::RetriesFirst,
    /// LIFO and adaptive LIFO ("Fail at Scale").
    Lifo => lifo::Lifo,
    /// HAProxy's fixed queue timeout, before CoDel's moving one.
    QueueTimeout => queue_timeout::QueueTimeout,
    /// CoDel's queue timeouts ("Fail at Scale").
    Codel => codel::Codel,
    /// The deadline drop (Amazon Builders' Library).
    Deadline => deadline::Deadline,
}

impl Armed {
    /// The first defence in force, in the declared order, that `asks` says drops.
    pub fn first(&mut self, mut asks: impl FnMut(&mut dyn Defence) -> Option<Dropped>) -> Option<Dropped> {
        Kind::ORDER.into_iter().find_map(|kind| self.get(kind).and_then(&mut asks))
    }

    /// The first answer, in the declared order, of a defence in force that gives one.
    pub fn ask<T>(&self, asks: impl Fn(&dyn Defence) -> Option<T>) -> Option<T> {
        Kind::ORDER.into_iter().find_map(|kind| self.peek(kind).and_then(&asks))
    }

    /// Tells every defence in force, in the declared order.
    pub fn tell(&mut self, mut tells: impl FnMut(&mut dyn Defence)) {
        for kind in Kind::ORDER {
            if let Some(defence) = self.get(kind) {
                tells(defence);
            }
        }
    }

    /// Whether any defence in force says so.
    pub fn any(&self, says: impl Fn(&dyn Defence) -> bool) -> bool {
        self.ask(|defence| says(defence).then_some(())).is_some()
    }
}

/// Which requests waiting may give their place (the newest of them does), and the drop that is
/// for it.
pub type GivesWay = (fn(&Waiting) -> bool, Dropped);

/// What a request waiting in line says of itself that a defence may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    /// When it came into line (or to its worker), ms.
    pub since_ms: u64,
    /// When its client gives up, if it said.
    pub gives_up_ms: Option<u64>,
    /// Its client said it is a retry.
    pub retry: bool,
}

/// The line as a defence reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// Requests waiting in it.
    pub waiting: usize,
    /// When it was last seen empty, ms.
    pub empty_at_ms: u64,
}

/// A request dropped by a defence without its work being done (503 at once), with the words
/// and counts its defence wrote once, beside its rule.
#[derive(Debug, Clone, Copy)]
pub struct Dropped {
    /// The defence that dropped it.
    pub by: Kind,
    said: &'static Said,
}

/// What a drop is, as its defence says it.
#[derive(Debug)]
pub struct Said {
    /// The lab's event's words.
    pub event: &'static str,
    /// The answer's `detail` (problem+json).
    pub answer: &'static str,
    /// Where the load bins count it.
    pub counted: DropCause,
    /// Whether the adaptive limit hears it as a drop (Netflix's interceptor: a request that ran
    /// out of time is a drop, `DEADLINE_EXCEEDED`); else as an answer.
    pub timed_out: bool,
}

impl Dropped {
    /// A drop by `by`, in `said`'s words.
    pub const fn new(by: Kind, said: &'static Said) -> Dropped {
        Dropped { by, said }
    }

    pub fn said(self) -> &'static Said {
        self.said
    }
}

impl PartialEq for Dropped {
    fn eq(&self, other: &Self) -> bool {
        self.by == other.by
    }
}

impl Eq for Dropped {}

/// Which waiting request a free worker takes, and which are dropped first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Discipline {
    /// The one that waited longest.
    #[default]
    Fifo,
    /// The newest.
    Lifo,
    /// The one that waited longest, but the newest while a standing queue exists (the line
    /// has not been empty for `codel_interval_ms`): Maurer, "Fail at Scale", ACM Queue 2015.
    AdaptiveLifo,
    /// The one that waited longest, after dropping every one that waited too long: while a
    /// standing queue exists, `codel_target_ms`, else `codel_interval_ms` (ibid.).
    Codel,
}

/// The endpoint's defences against overload, each with its source's rule (see its file). The
/// default is none of them: a FIFO line that works every request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Defences {
    /// Drop, without doing it, a request whose client will have given up before its work
    /// could finish (the client says how long it waits in `X-Request-Timeout-Ms`).
    pub deadline: bool,
    /// The line's discipline: `fifo`, `lifo`, `adaptive_lifo` or `codel`.
    pub queue: Discipline,
    /// CoDel's M: the longest wait in line while a standing queue exists. Facebook's M = 5 ms
    /// and N = 100 ms are for work of a few ms; the lab's takes 60-240 ms, so both are scaled
    /// by 5, keeping their ratio: 25 ms.
    pub codel_target_ms: u64,
    /// CoDel's N: how long the line must stay busy to count as a standing queue (and the
    /// longest wait else): Facebook's 100 ms scaled by 5, 500 ms, as long as the metastable
    /// set-up's clients wait, so a wait it allows outside a standing queue is never cut short
    /// of one its client still waits for. (HBase, whose calls also take long, moved both to
    /// 100 ms; with M = N the lab's healthy runs dropped work on any stall of the machine.)
    pub codel_interval_ms: u64,
    /// With the line full, a first attempt takes the place of the newest retry waiting (the
    /// client marks retries in `X-Previous-Attempts`).
    pub retries_first: bool,
    /// With `retries_first`, a retry shed from the line is told not to retry: its 503 carries
    /// `X-Retry-Pushback-Ms: -1`, the lab's name for gRPC's `grpc-retry-pushback-ms`, whose
    /// negative value asks the client not to retry at all (gRFC A6, "Pushback").
    pub pushback: bool,
    /// An adaptive limit on the requests in flight (in line and in work), Netflix's
    /// concurrency-limits: `{"kind": "fixed"}` (none: the workers and the line alone),
    /// `{"kind": "aimd", ...}` or `{"kind": "gradient2", ...}`; over it, 503 at once.
    pub limit: LimitSettings,
    /// Envoy's admission control: null (off), or its parameters (`{}` for Envoy's defaults, the
    /// window scaled); refused requests get 503 at once.
    #[serde(deserialize_with = "crate::invalid::object::or_null")]
    pub admission: Option<AdmissionControlSettings>,
    /// HAProxy's `timeout queue`: null (off, HAProxy's default), or the longest wait in line,
    /// ms; a request that waited longer is dropped (503) at its turn. Left out when off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_timeout_ms: Option<u64>,
}

impl Default for Defences {
    fn default() -> Self {
        Defences {
            deadline: false,
            queue: Discipline::Fifo,
            codel_target_ms: 25,
            codel_interval_ms: 500,
            retries_first: false,
            pushback: false,
            limit: LimitSettings::Fixed,
            admission: None,
            queue_timeout_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each defence names itself on a settings-change flag, with its parameters, in the declared
    /// order; none is named while off.
    #[test]
    fn every_defence_on_names_itself_on_the_flag_in_the_declared_order() {
        assert_eq!(Defences::default().flags(), Vec::<String>::new());
        let on = Defences {
            deadline: true,
            queue: Discipline::Codel,
            codel_target_ms: 80,
            retries_first: true,
            pushback: true,
            limit: LimitSettings::Aimd(AimdSettings::default()),
            admission: Some(AdmissionControlSettings::default()),
            queue_timeout_ms: Some(300),
            ..Defences::default()
        };
        assert_eq!(
            on.flags(),
            [
                "admission control under 95 % success",
                "AIMD limit 2-20",
                "retries shed first, told not to retry",
                "queue timeout 300 ms",
                "CoDel 80 ms / 500 ms",
                "deadline drop",
            ]
        );
        let lifo = Defences { queue: Discipline::AdaptiveLifo, ..Defences::default() };
        assert_eq!(lifo.flags(), ["adaptive LIFO after 500 ms"]);
    }
}
