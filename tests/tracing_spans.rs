//! Feature `tracing`: spans entered in an actor belong to it across parks and migration,
//! and runtime events reach the subscriber. A recording layer keeps, per span, the parent
//! the registry gave it (the span current on its thread when it was created) and, per
//! thread, the enter/exit order.
#![cfg(feature = "tracing")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

#[derive(Default)]
struct Record {
    /// span name -> parent span name (None: a root).
    parents: HashMap<String, Option<String>>,
    /// Messages of `smarm` events, with their level.
    events: Vec<(tracing::Level, String)>,
}

struct Recorder(Arc<Mutex<Record>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let parent = span.parent().map(|p| p.name().to_string());
        let _ = attrs;
        self.0.lock().unwrap().parents.insert(span.name().to_string(), parent);
    }
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target().starts_with("smarm") {
            struct Msg(String);
            impl tracing::field::Visit for Msg {
                fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    if f.name() == "message" {
                        self.0 = format!("{v:?}");
                    }
                }
            }
            let mut m = Msg(String::new());
            event.record(&mut m);
            self.0.lock().unwrap().events.push((*event.metadata().level(), m.0));
        }
    }
}

/// The process-wide subscriber (scheduler threads need a global one), installed once.
fn record() -> Arc<Mutex<Record>> {
    static REC: OnceLock<Arc<Mutex<Record>>> = OnceLock::new();
    REC.get_or_init(|| {
        let rec = Arc::new(Mutex::new(Record::default()));
        tracing_subscriber::registry().with(Recorder(rec.clone())).init();
        rec
    })
    .clone()
}

fn parent_of(rec: &Mutex<Record>, name: &str) -> Option<String> {
    rec.lock().unwrap().parents.get(name).cloned().unwrap_or_else(|| panic!("no span {name}"))
}

#[test]
fn spans_follow_actors_across_parks_and_threads() {
    let rec = record();
    for threads in [1, 2] {
        smarm::Runtime::builder()
            .threads(threads)
            .build()
            .unwrap()
            .run(move || {
                let (a_tx, a_rx) = smarm::channel::channel::<()>();
                let (b_tx, b_rx) = smarm::channel::channel::<()>();
                let (done_tx, done_rx) = smarm::channel::channel::<()>();
                // A enters its span and parks inside it; B then runs (on the same thread at
                // 1T) and makes spans: they must not nest under A's.
                let a = smarm::spawn(move || {
                    let span = tracing::info_span!("a_outer", t = threads);
                    let _g = span.enter();
                    a_rx.recv().unwrap(); // parked with a_outer entered
                    for _ in 0..50 {
                        smarm::yield_now(); // migrates at 2T when the other thread steals
                    }
                    let inner = tracing::info_span!("a_inner", t = threads);
                    inner.in_scope(|| assert_eq!(tracing::Span::current().metadata().unwrap().name(), "a_inner"));
                    assert_eq!(tracing::Span::current().metadata().unwrap().name(), "a_outer");
                });
                let b = smarm::spawn(move || {
                    b_rx.recv().unwrap();
                    let span = tracing::info_span!("b_root", t = threads);
                    let _g = span.enter();
                    done_rx.recv().unwrap(); // parked inside b_root
                    let inner = tracing::info_span!("b_inner", t = threads);
                    drop(inner);
                });
                // Let A park inside its span first.
                while smarm::info::process_info(a.pid()).and_then(|p| p.parked_on()).is_none() {
                    smarm::yield_now();
                }
                b_tx.send(()).unwrap();
                while smarm::info::process_info(b.pid()).and_then(|p| p.parked_on()).is_none() {
                    smarm::yield_now();
                }
                a_tx.send(()).unwrap();
                a.join().unwrap();
                done_tx.send(()).unwrap();
                b.join().unwrap();
                // The root itself: no actor's span leaked onto this thread.
                assert!(tracing::Span::current().is_none(), "{:?}", tracing::Span::current());
            })
            .unwrap();
        assert_eq!(parent_of(&rec, "b_root"), None, "b_root nested in another actor's span");
        assert_eq!(parent_of(&rec, "b_inner").as_deref(), Some("b_root"));
        assert_eq!(parent_of(&rec, "a_inner").as_deref(), Some("a_outer"));
        rec.lock().unwrap().parents.clear();
    }
}

#[test]
fn runtime_events_are_reported() {
    let rec = record();
    smarm::Runtime::builder()
        .quiet_panics(true)
        .build()
        .unwrap()
        .run(|| {
            let h = smarm::spawn(|| panic!("kaboom"));
            assert!(h.join().is_err());
        })
        .unwrap();
    let events = rec.lock().unwrap().events.clone();
    assert!(events.iter().any(|(l, m)| *l == tracing::Level::TRACE && m == "actor spawned"), "{events:?}");
    assert!(events.iter().any(|(l, m)| *l == tracing::Level::ERROR && m == "actor panicked"), "{events:?}");
}

#[test]
fn supervisor_reports_are_events() {
    use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};
    let rec = record();
    smarm::Runtime::builder()
        .quiet_panics(true)
        .build()
        .unwrap()
        .run(|| {
            let (tx, rx) = smarm::channel::channel::<smarm::Pid>();
            let spec = ChildSpec::worker("flaky", move || {
                let tx = tx.clone();
                Ok(smarm::spawn_link(move || {
                    tx.send(smarm::current_pid()).unwrap();
                    smarm::recv_signal();
                })
                .pid())
            });
            let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
            let first = rx.recv().unwrap();
            smarm::exit(first, smarm::DownReason::Custom("boom".into()));
            let second = rx.recv().unwrap();
            assert_ne!(first, second);
            sup.stop().unwrap();
        })
        .unwrap();
    let events = rec.lock().unwrap().events.clone();
    assert!(events.iter().any(|(l, m)| *l == tracing::Level::ERROR && m == "child terminated"), "{events:?}");
    assert!(events.iter().any(|(l, m)| *l == tracing::Level::INFO && m == "child restarted"), "{events:?}");
}
