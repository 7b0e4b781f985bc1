//! Site profiling: where the time of a request goes, by named regions of code.
//!
//! `let _s = smarm::profile::site("db_query");` opens a site until the guard is dropped. Per
//! site name the runtime keeps the count, the total time inside and, when the runtime counts
//! CPU time (`Builder::cpu_time(true)`), how much of it the actor was running and how much it
//! was parked (or waiting for a thread). Sites nest; time is attributed to the innermost:
//! an outer site's figures exclude the time of the sites opened inside it (its *own* time).
//!
//! Times are read with a serialising `lfence; rdtsc` at entry and exit, so the instructions
//! of the site cannot drift across the reading. Nothing is measured or stored for code that
//! does not open a site. The cost of one entry/exit pair is measured by
//! `cargo bench --bench profile_site` (outputs/history.md).
//!
//! The stack of open sites belongs to the actor (an actor-local value), so it follows the
//! actor across parks and threads. On a plain thread sites are measured too (without CPU
//! time), without nesting.
//!
//! ```
//! use std::time::Duration;
//! smarm::Runtime::builder().cpu_time(true).build().unwrap().run(|| {
//!     {
//!         let _s = smarm::profile::site("doc_example_query");
//!         smarm::sleep(Duration::from_millis(2)); // parked inside the site
//!     }
//!     let s = smarm::profile::sites().into_iter().find(|s| s.name == "doc_example_query").unwrap();
//!     assert_eq!(s.count, 1);
//!     assert!(s.parked.unwrap() > s.running.unwrap());
//! }).unwrap();
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

/// One site's counters. Sites are few and live for the process: each is leaked once.
struct SiteCell {
    name: &'static str,
    count: AtomicU64,
    /// TSC ticks inside the site, its nested sites excluded.
    own: AtomicU64,
    /// Of `own`, the ticks the actor ran (with `Builder::cpu_time`).
    running: AtomicU64,
    /// Entries made where CPU time was counted (running/parked are reported for those).
    timed: AtomicU64,
    /// `own` of the timed entries.
    timed_own: AtomicU64,
}

/// The process-wide table of sites, by the name's address (a site name is a literal, so a
/// call site always passes the same address; equal names at other addresses are merged by
/// [`cell`]'s slow path). Hashing the address, not the text, keeps the lookup short.
static SITES: RwLock<Option<HashMap<usize, &'static SiteCell, BuildHasherDefault<AddrHasher>>>> = RwLock::new(None);

/// Hashes an address: one multiplication (addresses are distinct, not adversarial).
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

fn cell(name: &'static str) -> &'static SiteCell {
    let key = name.as_ptr() as usize;
    if let Some(c) = SITES.read().as_ref().and_then(|m| m.get(&key)) {
        return c;
    }
    cell_slow(name)
}

/// First use of a name at this address: the cell of an equal name, or a new one.
#[cold]
fn cell_slow(name: &'static str) -> &'static SiteCell {
    let key = name.as_ptr() as usize;
    let mut w = SITES.write();
    let map = w.get_or_insert_with(Default::default);
    if let Some(same) = map.values().find(|c| c.name == name).copied() {
        map.insert(key, same);
        return same;
    }
    map.entry(key).or_insert_with(|| {
        Box::leak(Box::new(SiteCell {
            name,
            count: AtomicU64::new(0),
            own: AtomicU64::new(0),
            running: AtomicU64::new(0),
            timed: AtomicU64::new(0),
            timed_own: AtomicU64::new(0),
        }))
    })
}

/// An open site of the running actor.
struct Open {
    cell: &'static SiteCell,
    t0: u64,
    /// The actor's CPU ticks at entry (None: not counted).
    cpu0: Option<u64>,
    /// Total and CPU ticks of the sites nested in this one (excluded from its own).
    child_total: u64,
    child_cpu: u64,
}

/// The running actor's open sites, innermost last.
#[derive(Default)]
struct Stack(RefCell<Vec<Open>>);

crate::actor_local! {
    /// The open sites of the running actor.
    static OPEN: Stack = Stack::default();
}

/// A serialising TSC read: `lfence` keeps earlier instructions from completing after it.
#[inline(always)]
fn tsc() -> u64 {
    // SAFETY: lfence and rdtsc exist on every x86_64 CPU and have no memory effects.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        let t = core::arch::x86_64::_rdtsc();
        core::arch::x86_64::_mm_lfence();
        t
    }
}

/// An open profiling site; closed when dropped. See the module doc.
#[must_use = "the site closes when this guard is dropped"]
pub struct Site {
    /// Index in the actor's stack (None: a plain thread's site, measured alone).
    depth: Option<usize>,
    /// For a plain thread's site.
    alone: Option<(&'static SiteCell, u64)>,
    /// Not `Send`: a site belongs to the actor (or thread) that opened it.
    _not_send: PhantomData<*const ()>,
}

/// Opens the site `name` until the returned guard is dropped (see the module doc).
pub fn site(name: &'static str) -> Site {
    let c = cell(name);
    let t0 = tsc();
    let cpu0 = crate::runtime::current_cpu_ticks(t0);
    match OPEN.try_with(|s| {
        let mut v = s.0.borrow_mut();
        v.push(Open { cell: c, t0, cpu0, child_total: 0, child_cpu: 0 });
        v.len() - 1
    }) {
        Ok(depth) => Site { depth: Some(depth), alone: None, _not_send: PhantomData },
        Err(_) => Site { depth: None, alone: Some((c, t0)), _not_send: PhantomData },
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let t1 = tsc();
        if let Some((c, t0)) = self.alone {
            c.count.fetch_add(1, Ordering::Relaxed);
            c.own.fetch_add(t1.saturating_sub(t0), Ordering::Relaxed);
            return;
        }
        let cpu1 = crate::runtime::current_cpu_ticks(t1);
        let Some(depth) = self.depth else { return };
        let _ = OPEN.try_with(|s| {
            let mut v = s.0.borrow_mut();
            // Guards dropped out of order (one moved out and kept): close the inner ones too.
            while v.len() > depth + 1 {
                v.pop();
            }
            let Some(open) = v.pop() else { return };
            let total = t1.saturating_sub(open.t0);
            let own = total.saturating_sub(open.child_total);
            let cpu = match (open.cpu0, cpu1) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            };
            let c = open.cell;
            // Relaxed (all): statistics, read as reports.
            c.count.fetch_add(1, Ordering::Relaxed);
            c.own.fetch_add(own, Ordering::Relaxed);
            if let Some(cpu) = cpu {
                c.timed.fetch_add(1, Ordering::Relaxed);
                c.timed_own.fetch_add(own, Ordering::Relaxed);
                c.running.fetch_add(cpu.saturating_sub(open.child_cpu).min(own), Ordering::Relaxed);
            }
            if let Some(parent) = v.last_mut() {
                parent.child_total += total;
                parent.child_cpu += cpu.unwrap_or(0);
            }
        });
    }
}

/// One site's figures, as [`sites`] reports them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SiteStats {
    /// The site's name.
    pub name: &'static str,
    /// Times it was entered (and left).
    pub count: u64,
    /// Time inside it, nested sites excluded.
    pub total: Duration,
    /// Of `total`, the time the actor was running (None unless the runtime counts CPU time,
    /// `Builder::cpu_time`; then over the entries made with it).
    pub running: Option<Duration>,
    /// Of `total`, the time the actor was parked or waiting for a thread (as `running`).
    pub parked: Option<Duration>,
}

/// Every site entered so far in this process, busiest (by total time) first.
pub fn sites() -> Vec<SiteStats> {
    let d = crate::context::tsc_duration;
    let mut v: Vec<SiteStats> = SITES
        .read()
        .as_ref()
        .map(|m| {
            let mut cells: Vec<&'static SiteCell> = m.values().copied().collect();
            cells.sort_by_key(|c| *c as *const SiteCell as usize);
            cells.dedup_by_key(|c| *c as *const SiteCell as usize);
            cells
                .into_iter()
                .map(|c| {
                    // Relaxed (all): reports.
                    let timed = c.timed.load(Ordering::Relaxed) > 0;
                    let (timed_own, running) = (c.timed_own.load(Ordering::Relaxed), c.running.load(Ordering::Relaxed));
                    SiteStats {
                        name: c.name,
                        count: c.count.load(Ordering::Relaxed),
                        total: d(c.own.load(Ordering::Relaxed)),
                        running: timed.then(|| d(running)),
                        parked: timed.then(|| d(timed_own.saturating_sub(running))),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by(|a, b| b.total.cmp(&a.total).then(a.name.cmp(b.name)));
    v
}
