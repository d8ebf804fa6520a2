//! Load as the downstream measured it, per 100 ms of lab time: the requests that arrived,
//! how each was answered (2xx, 503, 429, or never, because its client had given up), the work
//! done for clients that were already gone, and the most requests in process at once. A retry
//! storm shows as a spike here; a breaker or a retry budget as its absence.
//!
//! A lab can run for an hour of steady traffic, so the history is kept at two resolutions:
//! the last five minutes in bins of 100 ms, and older activity summed into bins of 10 s
//! (`width_ms`), up to an hour of them. Memory and the snapshot then stop growing with the
//! run's length after five minutes but for one small bin per 10 s.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

/// The width of one bin, in ms of lab time.
pub const BIN_MS: u64 = 100;
/// Fine bins cover this much of the newest activity, in ms of lab time; older bins are summed
/// into coarse ones.
pub const FINE_FOR_MS: u64 = 5 * 60 * 1000;
/// The width of a coarse bin, in ms of lab time.
pub const COARSE_BIN_MS: u64 = 10_000;
/// Bins kept: five minutes of fine bins (and the 10 s until they are next summed), and an hour
/// of coarse ones.
const MAX_BINS: usize = ((FINE_FOR_MS + COARSE_BIN_MS) / BIN_MS) as usize + 360;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct LoadBin {
    /// The bin's start, ms of lab time.
    pub t_ms: u64,
    /// The bin's width, ms of lab time: `bin_ms` (100), or 10,000 for activity older than five
    /// minutes, summed. Left out when it is 100.
    #[serde(skip_serializing_if = "is_fine")]
    #[schema(default = 100)]
    pub width_ms: u64,
    /// Requests that reached the downstream in this bin; the bins add up to `requests`.
    pub requests: u64,
    /// Of those: answered 2xx.
    pub ok: u64,
    /// Answered 503.
    pub unavailable: u64,
    /// Answered 429.
    pub throttled: u64,
    /// Never answered: the client gave up (timed out) first.
    pub timed_out: u64,
    /// Answered with another status (400, 409, 422, ...).
    pub other: u64,
    /// Work finished in this bin for a client that had already given up.
    pub wasted: u64,
    /// The most requests in process at once during this bin.
    pub peak_in_process: u64,
    /// New messages created in this bin (a burst's, or steady traffic's): the offered load.
    pub offered: u64,
    /// Messages the client delivered in this bin: the goodput.
    pub delivered: u64,
    /// Arrivals of steady traffic refused at the source in this bin (the lab owed too many).
    pub refused: u64,
    /// Attempts and retries the client's own protections stopped in this bin, by the
    /// protection's `kind` (`breaker`, `retry_budget`, `token_bucket`, ...): none reached the
    /// downstream. Left out when none did.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub suppressed: BTreeMap<String, u64>,
    /// Each protection's level in this bin, by its `kind`, as the first attempt that ended in
    /// the bin left it: the tokens in a bucket, the retries left in a budget's window (with
    /// many clients, the mean over those that hold one each). Left out when none was noted.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub levels: BTreeMap<String, f64>,
    /// Requests the endpoint dropped in this bin, without doing their work, because their
    /// client would have given up before it finished (the deadline defence).
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_deadline: u64,
    /// Requests dropped in this bin after waiting in line longer than CoDel allows.
    #[serde(skip_serializing_if = "is_zero")]
    pub timed_out_in_queue: u64,
    /// Retries shed from a full line in this bin to make room for first attempts.
    #[serde(skip_serializing_if = "is_zero")]
    pub retries_shed: u64,
    /// Requests refused in this bin as they came, over the endpoint's adaptive concurrency
    /// limit.
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_by_limit: u64,
    /// Requests refused in this bin as they came, by admission control's draw.
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_by_admission: u64,
    /// The endpoint's adaptive concurrency limit in this bin, as last noted in it (at an
    /// arrival or a request's leaving); left out without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The endpoint's line was served newest first at an arrival in this bin (LIFO, or
    /// adaptive LIFO over a standing queue); left out when it was not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lifo: bool,
    /// Requests in this bin whose hint headers (`X-Request-Timeout-Ms`) did not parse: counted
    /// and ignored.
    #[serde(skip_serializing_if = "is_zero")]
    pub ignored_hints: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_fine(width_ms: &u64) -> bool {
    *width_ms == BIN_MS
}

impl Default for LoadBin {
    fn default() -> Self {
        LoadBin {
            t_ms: 0,
            width_ms: BIN_MS,
            requests: 0,
            ok: 0,
            unavailable: 0,
            throttled: 0,
            timed_out: 0,
            other: 0,
            wasted: 0,
            peak_in_process: 0,
            offered: 0,
            delivered: 0,
            refused: 0,
            suppressed: BTreeMap::new(),
            levels: BTreeMap::new(),
            dropped_deadline: 0,
            timed_out_in_queue: 0,
            retries_shed: 0,
            refused_by_limit: 0,
            refused_by_admission: 0,
            limit: None,
            lifo: false,
            ignored_hints: 0,
        }
    }
}

/// A bin as the lab holds it, in 24 bytes: its start (in units of 100 ms, 13 years of lab time
/// in 32 bits), the counts every busy bin has in 8 bits each, its width as a code, and what few
/// bins have apart, boxed, only when some is there: the protections' counts and levels, the
/// defences' drops, an odd width read from the store, and the upper bits of a count that outgrew
/// its lower 8 (a fine bin past 255 requests, or 2,550 a second). A count is 32 bits in all and
/// saturates there (a 10 s bin would need 400 million requests a second). A `LoadBin` is 216
/// bytes; a busy lab holds 3,000 fine bins (five minutes, all but the last 20 s of them packed
/// in `Block`s) and up to 360 coarse ones, and at 10 messages a second no count of a fine bin
/// needs the box.
/// (A bin with its start was 40 bytes; two servers of 100 busy labs side by side differed by
/// about 1.6 MiB after five minutes, less than the 5 MiB the sizes promise: BENCHMARKS.md,
/// "Session 23".)
#[derive(Debug, Clone, Default, PartialEq)]
struct Bin {
    /// The bin's start, in units of `BIN_MS` (a start between two of them, from a row written
    /// by hand, is held at the one before).
    at: u32,
    /// The lower 8 bits of each count, by the `Count` indices.
    low: [u8; COUNTS],
    /// The bin's width: `FINE`, `COARSE`, or `ODD` (then in the box).
    width: u8,
    rare: Option<Box<Rare>>,
}

/// `Bin::width`'s codes.
const FINE: u8 = 0;
const COARSE: u8 = 1;
const ODD: u8 = 2;

/// Where a bin that starts at `t_ms` is held: its start in units of `BIN_MS`.
fn at(t_ms: u64) -> u32 {
    u32::try_from(t_ms / BIN_MS).unwrap_or(u32::MAX)
}

/// The counts every bin has, as indices into `Bin::low` (and `Rare::high`).
#[derive(Debug, Clone, Copy)]
enum Count {
    Requests,
    Ok,
    Unavailable,
    Throttled,
    TimedOut,
    Other,
    Wasted,
    PeakInProcess,
    Offered,
    Delivered,
    Refused,
}

const COUNTS: usize = Count::Refused as usize + 1;

/// The parts of a bin that few bins have.
#[derive(Debug, Clone, Default, PartialEq)]
struct Rare {
    /// Each count's bits above its lower 8, by the `Count` indices.
    high: [u32; COUNTS],
    /// The width of a bin read back from the store that is neither fine nor coarse.
    width_ms: u64,
    suppressed: BTreeMap<String, u64>,
    levels: BTreeMap<String, f64>,
    dropped_deadline: u64,
    timed_out_in_queue: u64,
    retries_shed: u64,
    refused_by_limit: u64,
    refused_by_admission: u64,
    limit: Option<u32>,
    lifo: bool,
    ignored_hints: u64,
}

impl Bin {
    fn new(width_ms: u64, peak_in_process: u64) -> Self {
        let mut bin = Bin::default();
        bin.set_width(width_ms);
        bin.set(Count::PeakInProcess, peak_in_process);
        bin
    }

    fn t_ms(&self) -> u64 {
        u64::from(self.at) * BIN_MS
    }

    fn width_ms(&self) -> u64 {
        match self.width {
            FINE => BIN_MS,
            COARSE => COARSE_BIN_MS,
            _ => self.rare.as_ref().map_or(BIN_MS, |rare| rare.width_ms),
        }
    }

    fn set_width(&mut self, width_ms: u64) {
        self.width = match width_ms {
            BIN_MS => FINE,
            COARSE_BIN_MS => COARSE,
            _ => {
                self.rare().width_ms = width_ms;
                ODD
            }
        };
    }

    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Default::default)
    }

    fn get(&self, count: Count) -> u64 {
        let high = self.rare.as_ref().map_or(0, |rare| rare.high[count as usize]);
        u64::from(high) << 8 | u64::from(self.low[count as usize])
    }

    /// Sets a count, saturating at 32 bits; its upper bits go in the box only when it has some.
    fn set(&mut self, count: Count, n: u64) {
        let n = n.min(u64::from(u32::MAX));
        self.low[count as usize] = n as u8;
        let high = (n >> 8) as u32;
        if high != 0 || self.rare.is_some() {
            self.rare().high[count as usize] = high;
        }
    }

    /// Adds `n` to a count, saturating.
    fn add(&mut self, count: Count, n: u64) {
        self.set(count, self.get(count).saturating_add(n));
    }

    /// Raises a count to `n` if it is lower (a peak).
    fn raise(&mut self, count: Count, n: u64) {
        if n > self.get(count) {
            self.set(count, n);
        }
    }

    /// The bin as the store, the snapshot and the events show it.
    fn shown(&self) -> LoadBin {
        let rare = self.rare.as_deref().cloned().unwrap_or_default();
        LoadBin {
            t_ms: self.t_ms(),
            width_ms: self.width_ms(),
            requests: self.get(Count::Requests),
            ok: self.get(Count::Ok),
            unavailable: self.get(Count::Unavailable),
            throttled: self.get(Count::Throttled),
            timed_out: self.get(Count::TimedOut),
            other: self.get(Count::Other),
            wasted: self.get(Count::Wasted),
            peak_in_process: self.get(Count::PeakInProcess),
            offered: self.get(Count::Offered),
            delivered: self.get(Count::Delivered),
            refused: self.get(Count::Refused),
            suppressed: rare.suppressed,
            levels: rare.levels,
            dropped_deadline: rare.dropped_deadline,
            timed_out_in_queue: rare.timed_out_in_queue,
            retries_shed: rare.retries_shed,
            refused_by_limit: rare.refused_by_limit,
            refused_by_admission: rare.refused_by_admission,
            limit: rare.limit,
            lifo: rare.lifo,
            ignored_hints: rare.ignored_hints,
        }
    }

    /// A bin as the store kept it.
    fn held(bin: LoadBin) -> Self {
        let mut held = Bin::new(bin.width_ms, 0);
        held.at = at(bin.t_ms);
        held.absorb(&bin);
        held
    }

    /// Adds `other`'s counts into this bin (the peak is the higher of the two).
    fn absorb(&mut self, other: &LoadBin) {
        self.add(Count::Requests, other.requests);
        self.add(Count::Ok, other.ok);
        self.add(Count::Unavailable, other.unavailable);
        self.add(Count::Throttled, other.throttled);
        self.add(Count::TimedOut, other.timed_out);
        self.add(Count::Other, other.other);
        self.add(Count::Wasted, other.wasted);
        self.raise(Count::PeakInProcess, other.peak_in_process);
        self.add(Count::Offered, other.offered);
        self.add(Count::Delivered, other.delivered);
        self.add(Count::Refused, other.refused);
        let rare_counts = [
            other.dropped_deadline,
            other.timed_out_in_queue,
            other.retries_shed,
            other.refused_by_limit,
            other.refused_by_admission,
            other.ignored_hints,
        ];
        let rare_marks = other.limit.is_some() || other.lifo;
        if other.suppressed.is_empty() && other.levels.is_empty() && rare_counts == [0; 6] && !rare_marks {
            return;
        }
        let rare = self.rare();
        for (kind, count) in &other.suppressed {
            *rare.suppressed.entry(kind.clone()).or_default() += count;
        }
        // Summed in order, so the later bin's level is the one that stays.
        rare.levels.extend(other.levels.iter().map(|(kind, level)| (kind.clone(), *level)));
        rare.dropped_deadline += other.dropped_deadline;
        rare.timed_out_in_queue += other.timed_out_in_queue;
        rare.retries_shed += other.retries_shed;
        rare.refused_by_limit += other.refused_by_limit;
        rare.refused_by_admission += other.refused_by_admission;
        rare.limit = other.limit.or(rare.limit);
        rare.lifo |= other.lifo;
        rare.ignored_hints += other.ignored_hints;
    }
}

/// Why the endpoint dropped a request without its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    Deadline,
    TimedOutInQueue,
    RetryShed,
    OverLimit,
    Admission,
}

/// How a request that reached the downstream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Status(u16),
    /// The client hung up before an answer was ready.
    TimedOut,
}

/// Fine bins are packed (`Block`) once their 10 s span ended this long ago, in lab ms: a bin
/// still changes while the requests that arrived in it are answered, and one changed after it
/// was packed unpacks its block for good.
const PACK_AFTER_MS: u64 = 20_000;
/// The fine bins a block can hold: those of one coarse bin's span.
const SLOTS: u32 = (COARSE_BIN_MS / BIN_MS) as u32;
/// In a packed bin's first byte: its counts are those of the bin before it in the block.
const SAME: u8 = 0x80;

/// The fine bins of one 10 s span, packed into bytes. A busy lab holds five minutes of fine
/// bins, 3,000, and at 24 bytes each they were the largest thing it held after its settled
/// messages. Packed, a bin is one byte (its slot in the span, and whether its counts are the
/// previous bin's, as they mostly are under steady traffic) and, when they are not, a 16-bit
/// mask of its counts that are not zero, then each of those in a byte. Only a fine bin with
/// nothing in the box packs (every count below 256, none of the rare parts); a span with any
/// other bin stays whole.
#[derive(Debug)]
struct Block {
    /// The span's first slot, in units of `BIN_MS` (a multiple of `SLOTS`).
    first: u32,
    /// How many bins it holds.
    count: u8,
    bytes: Box<[u8]>,
}

impl Block {
    fn packs(bin: &Bin) -> bool {
        bin.width == FINE && bin.rare.is_none()
    }

    /// `bins` (in order, each in the span that starts at `first`, each one that `packs`).
    fn pack(first: u32, bins: &[Bin]) -> Block {
        let mut bytes = Vec::with_capacity(bins.len() * 2);
        let mut previous: Option<&[u8; COUNTS]> = None;
        for bin in bins {
            let slot = (bin.at - first) as u8;
            if previous == Some(&bin.low) {
                bytes.push(slot | SAME);
                continue;
            }
            bytes.push(slot);
            let mask = bin.low.iter().enumerate().fold(0u16, |mask, (i, n)| mask | u16::from(*n != 0) << i);
            bytes.extend(mask.to_le_bytes());
            bytes.extend(bin.low.iter().filter(|n| **n != 0));
            previous = Some(&bin.low);
        }
        Block { first, count: bins.len() as u8, bytes: bytes.into_boxed_slice() }
    }

    /// The bins, in order.
    fn bins(&self) -> impl Iterator<Item = Bin> + '_ {
        let (mut bytes, mut low) = (self.bytes.iter().copied(), [0u8; COUNTS]);
        std::iter::from_fn(move || {
            let head = bytes.next()?;
            if head & SAME == 0 {
                let mask = u16::from_le_bytes([bytes.next()?, bytes.next()?]);
                for (i, n) in low.iter_mut().enumerate() {
                    *n = if mask & 1 << i != 0 { bytes.next().unwrap_or(0) } else { 0 };
                }
            }
            Some(Bin { at: self.first + u32::from(head & !SAME), low, width: FINE, rare: None })
        })
    }

    fn get(&self, at: u32) -> Option<Bin> {
        self.bins().find(|bin| bin.at == at)
    }
}

/// The bins by start: nearly every bin is added after the newest, and old ones leave from the
/// front, so a sorted deque does what a B-tree would at 24 bytes a bin against the tree's 121
/// (its nodes' keys, links and the room they keep). Fine bins older than `PACK_AFTER_MS` are
/// packed in blocks (`Block`), in a deque of their own; no whole bin falls in a block's span.
#[derive(Debug, Default)]
struct Bins {
    whole: VecDeque<Bin>,
    packed: VecDeque<Block>,
    /// The bins in `packed`.
    in_blocks: usize,
}

impl Bins {
    fn at(&self, t_ms: u64) -> Result<usize, usize> {
        self.whole.binary_search_by_key(&at(t_ms), |bin| bin.at)
    }

    /// The block whose span holds the bin at `t_ms`.
    fn block(&self, t_ms: u64) -> Option<usize> {
        let at = at(t_ms);
        self.packed.binary_search_by_key(&(at - at % SLOTS), |block| block.first).ok()
    }

    fn get(&self, t_ms: &u64) -> Option<Cow<'_, Bin>> {
        match self.at(*t_ms) {
            Ok(i) => Some(Cow::Borrowed(&self.whole[i])),
            Err(_) => self.packed[self.block(*t_ms)?].get(at(*t_ms)).map(Cow::Owned),
        }
    }

    fn contains_key(&self, t_ms: &u64) -> bool {
        self.get(t_ms).is_some()
    }

    fn len(&self) -> usize {
        self.whole.len() + self.in_blocks
    }

    /// Every bin, in order; a packed one unpacked as it is read.
    fn iter(&self) -> impl Iterator<Item = Cow<'_, Bin>> {
        let mut whole = self.whole.iter().peekable();
        let mut packed = self.packed.iter().flat_map(Block::bins).peekable();
        std::iter::from_fn(move || match (whole.peek(), packed.peek()) {
            (Some(w), Some(p)) if p.at < w.at => packed.next().map(Cow::Owned),
            (Some(_), _) => whole.next().map(Cow::Borrowed),
            (None, _) => packed.next().map(Cow::Owned),
        })
    }

    fn pop_first(&mut self) -> Option<Bin> {
        if let Some(block) = self.packed.front()
            && self.whole.front().is_none_or(|bin| block.first < bin.at)
        {
            self.unpack(0);
        }
        self.whole.pop_front()
    }

    /// The bin at `t_ms`, made by `new` when there is none. A bin in a block unpacks the block.
    fn get_or_insert_with(&mut self, t_ms: u64, new: impl FnOnce() -> Bin) -> &mut Bin {
        if let Some(block) = self.block(t_ms) {
            self.unpack(block);
        }
        let i = match self.at(t_ms) {
            Ok(i) => i,
            Err(i) => {
                // Grown by an eighth, not doubled: a busy lab holds its newest bins whole for as
                // long as it runs, and a doubled deque would keep room for twice as many.
                if self.whole.len() == self.whole.capacity() {
                    self.whole.reserve_exact((self.whole.len() / 8).max(64));
                }
                self.whole.insert(i, Bin { at: at(t_ms), ..new() });
                i
            }
        };
        &mut self.whole[i]
    }

    /// Puts block `i`'s bins back among the whole ones.
    fn unpack(&mut self, i: usize) {
        let Some(block) = self.packed.remove(i) else { return };
        self.in_blocks -= usize::from(block.count);
        let from = self.whole.partition_point(|bin| bin.at < block.first);
        let after = self.whole.split_off(from);
        self.whole.extend(block.bins());
        self.whole.extend(after);
    }

    /// Packs the whole fine bins of each span that starts in `from..until` (units of `BIN_MS`)
    /// where all of them pack.
    fn pack(&mut self, from: u32, until: u32) {
        let mut i = self.whole.partition_point(|bin| bin.at < from);
        while let Some(first) =
            self.whole.get(i).map(|bin| bin.at - bin.at % SLOTS).filter(|first| *first < until)
        {
            let end = i + self.whole.range(i..).take_while(|bin| bin.at < first + SLOTS).count();
            if self.whole.range(i..end).all(Block::packs) {
                let bins: Vec<Bin> = self.whole.drain(i..end).collect();
                let block = Block::pack(first, &bins);
                self.in_blocks += bins.len();
                let at = self.packed.partition_point(|block| block.first < first);
                self.packed.insert(at, block);
            } else {
                i = end;
            }
        }
    }

    /// Takes out the fine bins that start in `from..until` (units of `BIN_MS`), in order.
    fn take_fine(&mut self, from: u32, until: u32) -> Vec<Bin> {
        let mut taken = Vec::new();
        while let Some(block) = self.packed.front().filter(|block| block.first < until) {
            if block.first < from || block.first + SLOTS > until {
                // A span the range cuts (bins read back from the store at an odd width).
                self.unpack(0);
                continue;
            }
            taken.extend(block.bins());
            self.in_blocks -= usize::from(block.count);
            self.packed.pop_front();
        }
        let lo = self.whole.partition_point(|bin| bin.at < from);
        let hi = self.whole.partition_point(|bin| bin.at < until);
        let (fine, other): (Vec<Bin>, Vec<Bin>) = self.whole.drain(lo..hi).partition(|bin| bin.width == FINE);
        for (n, bin) in other.into_iter().enumerate() {
            self.whole.insert(lo + n, bin);
        }
        taken.extend(fine);
        taken.sort_by_key(|bin| bin.at);
        taken
    }

    fn clear(&mut self) {
        // A reset lab gives the room back, as an empty one has none.
        *self = Bins::default();
    }
}

impl FromIterator<Bin> for Bins {
    fn from_iter<I: IntoIterator<Item = Bin>>(iter: I) -> Self {
        let mut bins: Vec<Bin> = iter.into_iter().collect();
        bins.sort_by_key(|bin| bin.at);
        bins.dedup_by_key(|bin| bin.at);
        Bins { whole: bins.into(), ..Default::default() }
    }
}

#[derive(Debug, Default)]
pub struct Load {
    bins: Bins,
    /// Bins changed since the last `take_changed`.
    changed: BTreeSet<u64>,
    /// Bins changed since the store last took them.
    unsaved: BTreeSet<u64>,
    /// Bins before this were dropped (past `MAX_BINS`) since the store last heard.
    dropped_before: Option<u64>,
    /// Fine bins in this range of starts were summed into coarse ones since the store last
    /// heard: their rows go, but for the coarse bins' own (at multiples of `COARSE_BIN_MS`).
    coarsened: Option<(u64, u64)>,
    /// Every bin that starts before this is coarse.
    fine_from_ms: u64,
    /// The fine bins of the spans before this were packed, or left whole for good.
    pack_from_ms: u64,
    in_process: u64,
}

/// The bins changed since the store last took them: rows to write, a cutoff below which rows
/// go (bins dropped to keep the last hour), and a range whose fine rows go (summed into the
/// coarse bins among `bins`).
#[derive(Debug, Default, Clone)]
pub struct BinChanges {
    pub bins: Vec<LoadBin>,
    pub dropped_before: Option<u64>,
    pub coarsened: Option<(u64, u64)>,
}

impl Load {
    /// Bins as the store kept them.
    pub fn restore(bins: Vec<LoadBin>) -> Self {
        let fine_from_ms = bins
            .iter()
            .filter(|bin| bin.width_ms > BIN_MS)
            .map(|bin| bin.t_ms + bin.width_ms)
            .max()
            .unwrap_or(0);
        Load { bins: bins.into_iter().map(Bin::held).collect(), fine_from_ms, ..Default::default() }
    }

    /// The bins changed since the last call, for the store.
    pub fn take_unsaved(&mut self) -> BinChanges {
        let unsaved = std::mem::take(&mut self.unsaved);
        BinChanges {
            bins: unsaved.iter().filter_map(|t| Some(self.bins.get(t)?.shown())).collect(),
            dropped_before: self.dropped_before.take(),
            coarsened: self.coarsened.take(),
        }
    }

    /// The store could not keep these: they go with the next commit.
    pub fn mark_unsaved(&mut self, changes: BinChanges) {
        self.unsaved.extend(changes.bins.iter().map(|bin| bin.t_ms));
        self.dropped_before = self.dropped_before.max(changes.dropped_before);
        self.coarsened = widen(self.coarsened, changes.coarsened);
    }

    /// A request reached the downstream at `now_ms`; returns the bin it is counted in.
    pub fn arrive(&mut self, now_ms: u64) -> u64 {
        let t_ms = self.t_ms(now_ms);
        self.bin(now_ms).add(Count::Requests, 1);
        t_ms
    }

    /// How the request that arrived in bin `arrived_t_ms` was answered.
    pub fn answer(&mut self, arrived_t_ms: u64, answer: Answer) {
        let count = match answer {
            Answer::Status(200..=299) => Count::Ok,
            Answer::Status(503) => Count::Unavailable,
            Answer::Status(429) => Count::Throttled,
            Answer::Status(_) => Count::Other,
            Answer::TimedOut => Count::TimedOut,
        };
        self.bin(arrived_t_ms).add(count, 1);
    }

    /// Work was finished at `now_ms` for a client that had already given up.
    pub fn wasted(&mut self, now_ms: u64) {
        self.bin(now_ms).add(Count::Wasted, 1);
    }

    /// A request was dropped at `now_ms` without its work, for `cause`.
    pub fn dropped(&mut self, now_ms: u64, cause: DropCause) {
        let rare = self.bin(now_ms).rare();
        match cause {
            DropCause::Deadline => rare.dropped_deadline += 1,
            DropCause::TimedOutInQueue => rare.timed_out_in_queue += 1,
            DropCause::RetryShed => rare.retries_shed += 1,
            DropCause::OverLimit => rare.refused_by_limit += 1,
            DropCause::Admission => rare.refused_by_admission += 1,
        }
    }

    /// The endpoint's line was served newest first at `now_ms`.
    pub fn lifo(&mut self, now_ms: u64) {
        self.bin(now_ms).rare().lifo = true;
    }

    /// The endpoint's adaptive limit at `now_ms`.
    pub fn limit(&mut self, now_ms: u64, limit: u32) {
        self.bin(now_ms).rare().limit = Some(limit);
    }

    /// A request's hint header did not parse and was ignored.
    pub fn ignored_hint(&mut self, now_ms: u64) {
        self.bin(now_ms).rare().ignored_hints += 1;
    }

    /// `count` new messages were created at `now_ms`.
    pub fn offered(&mut self, now_ms: u64, count: u64) {
        if count > 0 {
            self.bin(now_ms).add(Count::Offered, count);
        }
    }

    /// A message was delivered at `now_ms`.
    pub fn delivered(&mut self, now_ms: u64) {
        self.bin(now_ms).add(Count::Delivered, 1);
    }

    /// `count` arrivals were refused at the source at `now_ms`.
    pub fn refused(&mut self, now_ms: u64, count: u64) {
        if count > 0 {
            self.bin(now_ms).add(Count::Refused, count);
        }
    }

    /// The client's protection `kind` stopped an attempt or a retry at `now_ms`.
    pub fn suppressed(&mut self, now_ms: u64, kind: &str) {
        *self.bin(now_ms).rare().suppressed.entry(kind.to_owned()).or_default() += 1;
    }

    /// Whether the bin of `now_ms` has no protection's level yet.
    pub fn levels_due(&self, now_ms: u64) -> bool {
        let t_ms = now_ms - now_ms % BIN_MS;
        self.bins.get(&t_ms).is_none_or(|bin| bin.rare.as_ref().is_none_or(|rare| rare.levels.is_empty()))
    }

    /// Notes each protection's level at `now_ms`.
    pub fn levels(&mut self, now_ms: u64, levels: impl IntoIterator<Item = (&'static str, f64)>) {
        let rare = self.bin(now_ms).rare();
        rare.levels.extend(levels.into_iter().map(|(kind, level)| (kind.to_owned(), level)));
    }

    pub fn work_started(&mut self, now_ms: u64) {
        self.in_process += 1;
        let in_process = self.in_process;
        self.bin(now_ms).raise(Count::PeakInProcess, in_process);
    }

    pub fn work_finished(&mut self) {
        self.in_process = self.in_process.saturating_sub(1);
    }

    pub fn bins(&self) -> Vec<LoadBin> {
        self.bins.iter().map(|bin| bin.shown()).collect()
    }

    /// Whether a bin changed since the last `take_changed` (the next `load` event's).
    pub fn has_changed(&self) -> bool {
        !self.changed.is_empty()
    }

    /// The bins changed since the last call, whole.
    pub fn take_changed(&mut self) -> Vec<LoadBin> {
        let changed = std::mem::take(&mut self.changed);
        changed.iter().filter_map(|t| Some(self.bins.get(t)?.shown())).collect()
    }

    /// Forgets everything measured (a reset); work still in process stays counted.
    pub fn clear(&mut self) {
        self.bins.clear();
        self.changed.clear();
        self.unsaved.clear();
        self.dropped_before = None;
        self.coarsened = None;
        self.fine_from_ms = 0;
        self.pack_from_ms = 0;
    }

    /// The start and width of the bin `at_ms` falls in. An answer can come for a request that
    /// arrived in a bin since summed: it joins the sum.
    fn place(&self, at_ms: u64) -> (u64, u64) {
        if at_ms < self.fine_from_ms {
            (at_ms - at_ms % COARSE_BIN_MS, COARSE_BIN_MS)
        } else {
            (at_ms - at_ms % BIN_MS, BIN_MS)
        }
    }

    /// The start of the bin `at_ms` is counted in, once older bins are summed.
    fn t_ms(&mut self, at_ms: u64) -> u64 {
        self.coarsen_before(at_ms);
        self.place(at_ms).0
    }

    /// Sums the fine bins older than five minutes before `at_ms`.
    fn coarsen_before(&mut self, at_ms: u64) {
        let fine_from = at_ms.saturating_sub(FINE_FOR_MS);
        let fine_from = fine_from - fine_from % COARSE_BIN_MS;
        if fine_from > self.fine_from_ms {
            self.coarsen(fine_from);
        }
    }

    /// Packs the fine bins of the spans that ended `PACK_AFTER_MS` before `at_ms`.
    fn pack_before(&mut self, at_ms: u64) {
        let until = at_ms.saturating_sub(PACK_AFTER_MS);
        let until = until - until % COARSE_BIN_MS;
        if until > self.pack_from_ms {
            let from = self.pack_from_ms.max(self.fine_from_ms);
            self.pack_from_ms = until;
            self.bins.pack(at(from), at(until));
        }
    }

    fn bin(&mut self, at_ms: u64) -> &mut Bin {
        self.coarsen_before(at_ms);
        self.pack_before(at_ms);
        let (t_ms, width_ms) = self.place(at_ms);
        self.changed.insert(t_ms);
        self.unsaved.insert(t_ms);
        if self.bins.len() >= MAX_BINS
            && !self.bins.contains_key(&t_ms)
            && let Some(dropped) = self.bins.pop_first()
        {
            self.dropped_before = self.dropped_before.max(Some(dropped.t_ms() + 1));
        }
        let in_process = self.in_process;
        self.bins.get_or_insert_with(t_ms, || Bin::new(width_ms, in_process))
    }

    /// Sums the fine bins that start before `until_ms` (a multiple of `COARSE_BIN_MS`) into one
    /// bin per `COARSE_BIN_MS`.
    fn coarsen(&mut self, until_ms: u64) {
        let from = self.fine_from_ms;
        self.fine_from_ms = until_ms;
        let fine = self.bins.take_fine(at(from), at(until_ms));
        if fine.is_empty() {
            return;
        }
        for bin in fine {
            let t = bin.t_ms();
            self.changed.remove(&t);
            self.unsaved.remove(&t);
            let start = t - t % COARSE_BIN_MS;
            let coarse = self.bins.get_or_insert_with(start, || Bin::new(COARSE_BIN_MS, 0));
            coarse.set_width(COARSE_BIN_MS);
            coarse.absorb(&bin.shown());
            self.changed.insert(start);
            self.unsaved.insert(start);
        }
        self.coarsened = widen(self.coarsened, Some((from, until_ms)));
    }
}

/// The smallest range that holds both.
fn widen(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
        (one, None) | (None, one) => one,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bin_is_held_compactly_and_shown_as_it_was_counted() {
        assert_eq!(std::mem::size_of::<Bin>(), 24, "a bin with its start");
        let whole = LoadBin {
            t_ms: 40_000,
            width_ms: COARSE_BIN_MS,
            requests: 9,
            ok: 1,
            unavailable: 2,
            throttled: 3,
            timed_out: 4,
            other: 5,
            wasted: 6,
            peak_in_process: 7,
            offered: 8,
            delivered: 10,
            refused: 11,
            suppressed: BTreeMap::from([("breaker".to_owned(), 12)]),
            levels: BTreeMap::from([("token_bucket".to_owned(), 0.5)]),
            dropped_deadline: 13,
            timed_out_in_queue: 14,
            retries_shed: 15,
            refused_by_limit: 17,
            refused_by_admission: 18,
            limit: Some(19),
            lifo: true,
            ignored_hints: 16,
        };
        assert_eq!(Bin::held(whole.clone()).shown(), whole, "every field as stored");
        let plain = LoadBin { t_ms: 100, requests: 1, ok: 1, ..Default::default() };
        let held = Bin::held(plain.clone());
        assert!(held.rare.is_none(), "a bin with none of the rare counts holds no room for them");
        assert_eq!(held.shown(), plain);
        let limited = LoadBin { t_ms: 200, limit: Some(4), ..Default::default() };
        assert_eq!(Bin::held(limited.clone()).shown(), limited, "a limit alone is kept");
        let mut full = Bin::new(BIN_MS, 0);
        full.add(Count::Requests, u64::MAX);
        full.add(Count::Requests, 1);
        assert_eq!(full.shown().requests, u64::from(u32::MAX), "a count saturates");
        // A width the lab does not make, from a row written by hand, reads back as it was.
        let odd = LoadBin { t_ms: 30_000, width_ms: 1_000, requests: 2, ..Default::default() };
        assert_eq!(Bin::held(odd.clone()).shown(), odd);
    }

    #[test]
    fn a_count_past_eight_bits_keeps_its_upper_bits_in_the_box_and_reads_whole() {
        let mut load = Load::default();
        for _ in 0..255 {
            load.arrive(1_000);
        }
        load.offered(1_000, 3);
        assert!(load.bins.get(&1_000).unwrap().rare.is_none(), "255 fits the bin's own 8 bits");
        load.arrive(1_050);
        load.offered(1_000, 70_000);
        let bin = load.bins.get(&1_000).unwrap();
        assert!(bin.rare.is_some(), "256 needs the box");
        let shown = bin.shown();
        assert_eq!((shown.t_ms, shown.requests, shown.offered, shown.ok), (1_000, 256, 70_003, 0));
        // A bin read back from the store, summed into a coarse one, keeps the whole count.
        let stored = LoadBin {
            t_ms: 0,
            width_ms: COARSE_BIN_MS,
            requests: 200_000,
            peak_in_process: 70_000,
            ..Default::default()
        };
        let mut held = Bin::held(stored.clone());
        assert_eq!(held.shown(), stored);
        held.absorb(&LoadBin { requests: 5, peak_in_process: 3, ..Default::default() });
        assert_eq!(
            (held.shown().requests, held.shown().peak_in_process),
            (200_005, 70_000),
            "a peak is the higher"
        );
    }

    #[test]
    fn requests_are_binned_by_arrival_and_answers_join_their_bin() {
        let mut load = Load::default();
        let first = load.arrive(42);
        let second = load.arrive(150);
        load.work_started(150);
        load.answer(first, Answer::Status(503));
        load.answer(second, Answer::TimedOut);
        load.wasted(260);
        load.work_finished();
        let bins = load.bins();
        assert_eq!(
            bins.iter().map(|b| (b.t_ms, b.requests)).collect::<Vec<_>>(),
            [(0, 1), (100, 1), (200, 0)]
        );
        assert_eq!((bins[0].unavailable, bins[1].timed_out, bins[1].peak_in_process), (1, 1, 1));
        assert_eq!(bins[2].wasted, 1);
        assert_eq!(load.take_changed().len(), 3);
        assert!(load.take_changed().is_empty(), "taken once");
    }

    #[test]
    fn fine_bins_are_packed_past_twenty_seconds_and_read_back_as_they_were() {
        use rand::rngs::StdRng;
        use rand::{RngExt, SeedableRng};
        let mut rng = StdRng::seed_from_u64(7);
        // A coarse bin, then 60 s of fine bins: some slots empty, most alike, the rest of any
        // counts below 256, and one bin in the span at 30 s with a rare part (that span stays
        // whole).
        let mut bins = vec![Bin::held(LoadBin {
            t_ms: 0,
            width_ms: COARSE_BIN_MS,
            requests: 900,
            ..Default::default()
        })];
        let mut low = [1u8; COUNTS];
        for slot in (100..700).filter(|slot| slot % 7 != 3) {
            if rng.random_range(0..4) == 0 {
                low = std::array::from_fn(|_| {
                    if rng.random_range(0..3) == 0 { 0 } else { rng.random_range(1..=255) }
                });
            }
            bins.push(Bin { at: slot, low, width: FINE, rare: None });
        }
        let mut limited = Bin { at: 345, ..Default::default() };
        limited.rare().limit = Some(3);
        bins.retain(|bin| bin.at != 345);
        bins.push(limited);
        let mut held: Bins = bins.into_iter().collect();
        let before: Vec<LoadBin> = held.iter().map(|bin| bin.shown()).collect();
        held.pack(at(10_000), at(70_000));
        assert_eq!(
            held.packed.iter().map(|block| block.first).collect::<Vec<_>>(),
            [100, 200, 400, 500, 600]
        );
        assert_eq!(
            (held.whole.len(), held.len()),
            (1 + 86, before.len()),
            "the coarse bin and the span at 30 s"
        );
        let after: Vec<LoadBin> = held.iter().map(|bin| bin.shown()).collect();
        assert_eq!(after, before, "every bin reads back as it was, in order");
        let bytes: usize = held.packed.iter().map(|block| block.bytes.len()).sum();
        assert!(bytes < 8 * held.in_blocks, "{bytes} bytes for {} bins", held.in_blocks);
        assert_eq!(
            held.get(&41_000).map(|bin| bin.shown()),
            before.iter().find(|b| b.t_ms == 41_000).cloned()
        );
        assert!(held.get(&40_200).is_none() && !held.contains_key(&40_200), "an empty slot");

        // A bin changed after it was packed unpacks its block, and only that one.
        let wasted = held.get(&52_300).unwrap().get(Count::Wasted);
        held.get_or_insert_with(52_300, Bin::default).add(Count::Wasted, 2);
        assert_eq!(held.packed.iter().map(|block| block.first).collect::<Vec<_>>(), [100, 200, 400, 600]);
        assert_eq!(held.get(&52_300).unwrap().get(Count::Wasted), wasted + 2);
        assert_eq!(held.len(), before.len());

        // Summing takes the packed bins and the whole ones alike, in order.
        let taken = held.take_fine(at(10_000), at(30_000));
        assert_eq!(taken.len(), before.iter().filter(|b| (10_000..30_000).contains(&b.t_ms)).count());
        assert!(taken.windows(2).all(|pair| pair[0].at < pair[1].at));
        assert_eq!(held.packed.front().map(|block| block.first), Some(400));
        assert_eq!(held.pop_first().map(|bin| bin.t_ms()), Some(0), "the coarse bin is the oldest");
        assert_eq!(held.pop_first().map(|bin| bin.t_ms()), Some(30_000));
    }

    #[test]
    fn steady_load_holds_its_fine_bins_packed_in_a_few_bytes_each() {
        let mut load = Load::default();
        steady(&mut load, FINE_FOR_MS + 60_000);
        let (whole, blocks) = (load.bins.whole.len(), load.bins.in_blocks);
        let bytes: usize = load.bins.packed.iter().map(|block| block.bytes.len()).sum();
        // Coarse bins for the first minute, 20 to 30 s of fine bins whole, the rest packed.
        assert!((5 + 200..=5 + 300).contains(&whole), "{whole} whole");
        assert_eq!(whole + blocks, 5 + 3_100, "{blocks} packed");
        assert!(bytes <= 2 * blocks, "{bytes} bytes for {blocks} bins");
    }

    /// One request every 50 ms for `until_ms`, each answered 200, and a message offered each.
    fn steady(load: &mut Load, until_ms: u64) {
        for at in (0..until_ms).step_by(50) {
            let bin = load.arrive(at);
            load.answer(bin, Answer::Status(200));
            load.offered(at, 1);
        }
    }

    #[test]
    fn activity_older_than_five_minutes_is_summed_into_ten_second_bins() {
        let mut load = Load::default();
        let until = FINE_FOR_MS + 60_000; // six minutes
        steady(&mut load, until);
        let bins = load.bins();
        let total: u64 = bins.iter().map(|b| b.requests).sum();
        assert_eq!(total, until / 50, "no request is lost in the sums");
        assert_eq!(bins.iter().map(|b| b.offered).sum::<u64>(), until / 50);
        let (coarse, fine): (Vec<&LoadBin>, Vec<&LoadBin>) =
            bins.iter().partition(|b| b.width_ms == COARSE_BIN_MS);
        // The newest bin is at 359,950 ms: five minutes before it, rounded down to 10 s, is 50 s.
        assert_eq!(
            coarse.iter().map(|b| b.t_ms).collect::<Vec<_>>(),
            (0..50_000).step_by(10_000).collect::<Vec<_>>()
        );
        assert!(coarse.iter().all(|b| b.requests == 200 && b.ok == 200), "{coarse:?}");
        assert!(fine.iter().all(|b| b.width_ms == BIN_MS && b.t_ms >= 50_000 && b.requests == 2));
        assert_eq!(fine.len() as u64, (until - 50_000) / BIN_MS);

        // The store hears of the range whose fine rows go, with the coarse rows to write.
        let changes = load.take_unsaved();
        assert_eq!(changes.coarsened, Some((0, 50_000)));
        assert_eq!(changes.bins.iter().filter(|b| b.width_ms == COARSE_BIN_MS).count(), 5);
        assert!(load.take_unsaved().coarsened.is_none(), "taken once");

        // An answer for a request that arrived in a summed bin joins the sum.
        load.answer(12_345, Answer::Status(503));
        assert_eq!(load.bins().iter().find(|b| b.t_ms == 10_000).unwrap().unavailable, 1);

        // Read back, the summed bins stay summed and the rest carry on as before.
        let mut restored = Load::restore(load.bins());
        restored.arrive(until - 10);
        assert_eq!(restored.bins().iter().filter(|b| b.width_ms == COARSE_BIN_MS).count(), 5);
        assert!(restored.take_unsaved().coarsened.is_none(), "nothing new to sum yet");
        // 100 ms later the newest bin is five minutes past 60 s: the next 10 s are summed.
        restored.arrive(until + 100);
        assert_eq!(restored.bins().iter().filter(|b| b.width_ms == COARSE_BIN_MS).count(), 6);
        assert_eq!(restored.take_unsaved().coarsened, Some((50_000, 60_000)));
    }

    #[test]
    fn an_hour_of_steady_load_is_held_in_a_few_thousand_bins() {
        let mut load = Load::default();
        steady(&mut load, 60 * 60 * 1000);
        let bins = load.bins();
        assert!(bins.len() <= MAX_BINS, "{} bins", bins.len());
        // Five minutes of fine bins, and up to 10 s more until the next sum.
        let fine = bins.iter().filter(|b| b.width_ms == BIN_MS).count() as u64;
        assert!((FINE_FOR_MS / BIN_MS..=(FINE_FOR_MS + COARSE_BIN_MS) / BIN_MS).contains(&fine), "{fine}");
        assert_eq!(bins.iter().map(|b| b.requests).sum::<u64>(), 72_000);
        // A fine bin is written without its width; a coarse one with it.
        let json = serde_json::to_value(&bins).unwrap();
        assert!(
            json[0]["width_ms"] == 10_000
                && json.as_array().unwrap().last().unwrap().get("width_ms").is_none()
        );
    }
}
