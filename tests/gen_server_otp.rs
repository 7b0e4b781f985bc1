//! gen_server: the OTP features of issue 13 (timeouts and continues in callback results,
//! the callback context, `send_request` and request id collections, named casts and
//! calls with a timeout, typed requests, typed start errors).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use smarm::channel::{channel, Sender};
use smarm::gen_server::{
    self, CallError, CallResult, Caller, Ctx, Flow, GenServer, Handles, Info, InitResult, NoResponse, ReplyTo,
    ReqIdCollection, ServerRef, StartError, StartOpts, Then,
};
use smarm::{DownReason, Runtime};

fn one_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    Runtime::builder().threads(1).build().unwrap().run(f).unwrap()
}

type Log = Arc<Mutex<Vec<String>>>;

fn log(l: &Log, s: impl Into<String>) {
    l.lock().unwrap().push(s.into());
}

fn taken(l: &Log) -> Vec<String> {
    l.lock().unwrap().clone()
}

/// What a call or cast asks the server to do after it.
#[derive(Debug, Clone)]
enum After {
    Nothing,
    Timeout(Duration),
    Continue(u32),
}

fn then(a: After) -> Option<Then<u32>> {
    match a {
        After::Nothing => None,
        After::Timeout(d) => Some(Then::Timeout(d)),
        After::Continue(c) => Some(Then::Continue(c)),
    }
}

/// Logs every callback; what follows each is given with the request.
struct Logger {
    log: Log,
    init: After,
    /// How many more continues `handle_continue` chains (each with the value + 1).
    chain: u32,
    timeouts: Option<Sender<()>>,
}

impl GenServer for Logger {
    type Call = (String, After);
    type Reply = Vec<String>;
    type Cast = (String, After);
    type Info = String;
    type Continue = u32;

    fn init(&mut self, _ctx: &Ctx<Self>) -> InitResult<u32> {
        log(&self.log, "init");
        match then(self.init.clone()) {
            None => InitResult::Ok,
            Some(t) => InitResult::Then(t),
        }
    }
    fn handle_call(
        &mut self,
        (s, a): (String, After),
        _: &Caller<Vec<String>>,
        _: &Ctx<Self>,
    ) -> CallResult<Vec<String>, u32> {
        log(&self.log, format!("call {s}"));
        let l = taken(&self.log);
        match then(a) {
            None => CallResult::Reply(l),
            Some(t) => CallResult::ReplyThen(l, t),
        }
    }
    fn handle_cast(&mut self, (s, a): (String, After), _: &Ctx<Self>) -> Flow<u32> {
        log(&self.log, format!("cast {s}"));
        match then(a) {
            None => Flow::Continue,
            Some(t) => Flow::Then(t),
        }
    }
    fn handle_info(&mut self, i: Info<String>, _: &Ctx<Self>) -> Flow<u32> {
        if let Info::Msg(s) = i {
            log(&self.log, format!("info {s}"));
        }
        Flow::Continue
    }
    fn handle_continue(&mut self, c: u32, _: &Ctx<Self>) -> Flow<u32> {
        log(&self.log, format!("continue {c}"));
        if self.chain > 0 {
            self.chain -= 1;
            return Flow::Then(Then::Continue(c + 1));
        }
        Flow::Continue
    }
    fn handle_timeout(&mut self, _: &Ctx<Self>) -> Flow<u32> {
        log(&self.log, "timeout");
        if let Some(tx) = &self.timeouts {
            let _ = tx.send(());
        }
        Flow::Continue
    }
}

fn logger(init: After, chain: u32, timeouts: Option<Sender<()>>) -> (Log, Logger) {
    let log = Log::default();
    (log.clone(), Logger { log, init, chain, timeouts })
}

fn call(s: &ServerRef<Logger>, what: &str) -> Vec<String> {
    s.call((what.into(), After::Nothing)).unwrap()
}

#[test]
fn a_timeout_in_a_call_result_runs_handle_timeout_when_nothing_arrives() {
    one_thread(|| {
        let (tx, rx) = channel();
        let (l, srv) = logger(After::Nothing, 0, Some(tx));
        let s = gen_server::start(srv).unwrap();
        s.call(("a".into(), After::Timeout(Duration::from_millis(2)))).unwrap();
        rx.recv().unwrap();
        assert_eq!(call(&s, "b"), ["init", "call a", "timeout", "call b"]);
        assert_eq!(taken(&l).len(), 4);
    });
}

#[test]
fn a_timeout_in_a_cast_result_and_in_init_runs_handle_timeout() {
    one_thread(|| {
        let (tx, rx) = channel();
        let (_l, srv) = logger(After::Timeout(Duration::from_millis(1)), 0, Some(tx));
        let s = gen_server::start(srv).unwrap();
        rx.recv().unwrap();
        s.cast(("a".into(), After::Timeout(Duration::from_millis(1))));
        rx.recv().unwrap();
        assert_eq!(call(&s, "b"), ["init", "timeout", "cast a", "timeout", "call b"]);
    });
}

#[test]
fn a_message_already_queued_cancels_a_zero_timeout() {
    // One thread: both casts are queued before the server runs, so the zero timeout asked
    // by the first finds the second waiting (OTP: `receive ... after 0` takes it).
    one_thread(|| {
        let (l, srv) = logger(After::Nothing, 0, None);
        let s = gen_server::start(srv).unwrap();
        s.cast(("a".into(), After::Timeout(Duration::ZERO)));
        s.info("b".into());
        assert_eq!(call(&s, "c"), ["init", "cast a", "info b", "call c"]);
        drop(l);
    });
}

#[test]
fn a_zero_timeout_with_nothing_queued_fires_at_once() {
    one_thread(|| {
        let (tx, rx) = channel();
        let (_l, srv) = logger(After::Nothing, 0, Some(tx));
        let s = gen_server::start(srv).unwrap();
        s.call(("a".into(), After::Timeout(Duration::ZERO))).unwrap();
        rx.recv().unwrap();
        assert_eq!(call(&s, "b"), ["init", "call a", "timeout", "call b"]);
    });
}

#[test]
fn a_continue_from_init_runs_before_the_first_message() {
    one_thread(|| {
        let (_l, srv) = logger(After::Continue(7), 0, None);
        let s = gen_server::start(srv).unwrap();
        assert_eq!(call(&s, "a"), ["init", "continue 7", "call a"]);
    });
}

#[test]
fn a_continue_from_a_call_runs_before_messages_queued_behind_it() {
    one_thread(|| {
        let (_l, srv) = logger(After::Nothing, 2, None);
        let s = gen_server::start(srv).unwrap();
        // Queue a cast whose continue chains twice, then a cast behind it.
        s.cast(("a".into(), After::Continue(1)));
        s.cast(("b".into(), After::Nothing));
        assert_eq!(call(&s, "c"), ["init", "cast a", "continue 1", "continue 2", "continue 3", "cast b", "call c"]);
    });
}

#[test]
fn a_continue_from_handle_call_runs_after_the_reply_and_before_the_next_message() {
    one_thread(|| {
        let (_l, srv) = logger(After::Nothing, 0, None);
        let s = gen_server::start(srv).unwrap();
        assert_eq!(s.call(("a".into(), After::Continue(5))).unwrap(), ["init", "call a"]);
        assert_eq!(call(&s, "b"), ["init", "call a", "continue 5", "call b"]);
    });
}

/// A server that holds each call until told to answer it.
struct Holder {
    held: Vec<ReplyTo<u32>>,
}

enum HolderCall {
    Hold,
    Release(u32),
    Crash,
}

impl GenServer for Holder {
    type Call = HolderCall;
    type Reply = u32;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, c: HolderCall, from: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> {
        match c {
            HolderCall::Hold => {
                self.held.push(from.defer());
                CallResult::NoReply
            }
            HolderCall::Release(v) => {
                for r in self.held.drain(..) {
                    r.reply(v);
                }
                CallResult::Reply(0)
            }
            HolderCall::Crash => panic!("holder crashed"),
        }
    }
}

#[test]
fn wait_response_that_times_out_leaves_the_request_active() {
    one_thread(|| {
        let s = gen_server::start(Holder { held: vec![] }).unwrap();
        let mut r = s.send_request(HolderCall::Hold);
        assert_eq!(r.wait_response(Duration::from_millis(1)), Err(CallError::Timeout));
        assert_eq!(r.check_response(), None);
        assert_eq!(s.call(HolderCall::Release(9)), Ok(0));
        assert_eq!(r.wait_response(Duration::from_secs(5)), Ok(9));
        // The outcome was taken: nothing more comes.
        assert_eq!(r.check_response(), None);
        assert_eq!(r.wait_response(Duration::from_secs(5)), Err(CallError::Timeout));
    });
}

#[test]
fn receive_response_that_times_out_abandons_the_request() {
    one_thread(|| {
        let s = gen_server::start(Holder { held: vec![] }).unwrap();
        let r = s.send_request(HolderCall::Hold);
        assert_eq!(r.receive_response(Duration::from_millis(1)), Err(CallError::Timeout));
        // The late reply goes nowhere and the server goes on.
        assert_eq!(s.call(HolderCall::Release(1)), Ok(0));
        assert_eq!(s.call(HolderCall::Release(1)), Ok(0));
    });
}

#[test]
fn a_request_to_a_stopped_server_is_noproc() {
    one_thread(|| {
        let s = gen_server::start(Holder { held: vec![] }).unwrap();
        s.stop(DownReason::Normal).unwrap();
        let mut r = s.send_request(HolderCall::Hold);
        assert_eq!(r.check_response(), Some(Err(CallError::NoProc)));
        let r = s.send_request(HolderCall::Hold);
        assert_eq!(r.receive_response(Duration::from_secs(5)), Err(CallError::NoProc));
    });
}

#[test]
fn a_request_whose_server_dies_reports_down_with_its_reason_at_once() {
    one_thread(|| {
        let s = gen_server::start(Holder { held: vec![] }).unwrap();
        let held = s.send_request(HolderCall::Hold);
        let crash = s.send_request(HolderCall::Crash);
        let down = Err(CallError::Down(DownReason::Panic("holder crashed".into())));
        // Far below the limit: the server's death ends both waits.
        assert_eq!(held.receive_response(Duration::from_secs(60)), down);
        assert_eq!(crash.receive_response(Duration::from_secs(60)), down);
    });
}

#[test]
fn a_collection_returns_each_response_with_its_label_then_empty() {
    one_thread(|| {
        let s = gen_server::start(Holder { held: vec![] }).unwrap();
        let t = gen_server::start(Holder { held: vec![] }).unwrap();
        let mut c = ReqIdCollection::new();
        s.send_request_to(HolderCall::Hold, "s-held", &mut c);
        t.send_request_to(HolderCall::Release(3), "t-release", &mut c);
        assert_eq!(c.len(), 2);
        // Only t's answers now.
        assert_eq!(c.wait_response(Duration::from_secs(5)), Ok((Ok(0), "t-release")));
        assert_eq!(c.wait_response(Duration::from_millis(1)), Err(NoResponse::Timeout));
        assert_eq!(c.len(), 1, "a timeout keeps the requests");
        assert_eq!(c.check_response(), Err(NoResponse::Pending));
        s.call(HolderCall::Release(4)).unwrap();
        assert_eq!(c.wait_response(Duration::from_secs(5)), Ok((Ok(4), "s-held")));
        assert_eq!(c.wait_response(Duration::from_secs(5)), Err(NoResponse::Empty));
        assert_eq!(c.check_response(), Err(NoResponse::Empty));
    });
}

#[test]
fn a_collection_reports_a_dead_servers_request_with_its_label() {
    one_thread(|| {
        let s = gen_server::start(Holder { held: vec![] }).unwrap();
        let mut c = ReqIdCollection::new();
        s.send_request_to(HolderCall::Hold, 1, &mut c);
        s.send_request_to(HolderCall::Crash, 2, &mut c);
        let down = Err(CallError::Down(DownReason::Panic("holder crashed".into())));
        let mut labels = vec![];
        for _ in 0..2 {
            let (got, label) = c.wait_response(Duration::from_secs(60)).unwrap();
            assert_eq!(got, down);
            labels.push(label);
        }
        labels.sort();
        assert_eq!(labels, [1, 2]);
    });
}

#[test]
fn receive_response_on_a_collection_that_times_out_abandons_every_request() {
    one_thread(|| {
        let s = gen_server::start(Holder { held: vec![] }).unwrap();
        let mut c = ReqIdCollection::new();
        s.send_request_to(HolderCall::Hold, 'a', &mut c);
        c.add(s.send_request(HolderCall::Hold), 'b');
        assert_eq!(c.receive_response(Duration::from_millis(1)), Err(NoResponse::Timeout));
        assert!(c.is_empty());
        assert_eq!(s.call(HolderCall::Release(0)), Ok(0));
    });
}

/// Uses its context: its own handle, pid and name.
struct SelfAware {
    got: Vec<&'static str>,
}

#[derive(Debug)]
enum SelfCall {
    WhoAmI,
    /// Cast to itself through its own handle, then reply.
    PokeSelf,
    /// Hand its own handle to a new actor, which calls it.
    HandOff,
    Log,
}

#[derive(Debug, PartialEq)]
enum SelfReply {
    Me(smarm::Pid, smarm::Pid, Option<String>),
    Done,
    Log(Vec<&'static str>),
}

impl GenServer for SelfAware {
    type Call = SelfCall;
    type Reply = SelfReply;
    type Cast = &'static str;
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, c: SelfCall, _: &Caller<SelfReply>, ctx: &Ctx<Self>) -> CallResult<SelfReply> {
        match c {
            SelfCall::WhoAmI => {
                CallResult::Reply(SelfReply::Me(ctx.pid(), ctx.myself().pid(), ctx.name().map(str::to_owned)))
            }
            SelfCall::PokeSelf => {
                ctx.myself().cast("poked");
                CallResult::Reply(SelfReply::Done)
            }
            SelfCall::HandOff => {
                let me = ctx.myself().clone();
                smarm::spawn(move || {
                    me.cast("from the other actor");
                });
                CallResult::Reply(SelfReply::Done)
            }
            SelfCall::Log => CallResult::Reply(SelfReply::Log(self.got.clone())),
        }
    }
    fn handle_cast(&mut self, c: &'static str, _: &Ctx<Self>) -> Flow {
        self.got.push(c);
        Flow::Continue
    }
}

#[test]
fn the_context_gives_the_servers_own_handle_pid_and_name() {
    one_thread(|| {
        let opts = StartOpts { name: Some("self-aware".into()), ..Default::default() };
        let s = gen_server::start_opts(SelfAware { got: vec![] }, opts).unwrap();
        assert_eq!(s.call(SelfCall::WhoAmI), Ok(SelfReply::Me(s.pid(), s.pid(), Some("self-aware".into()))));
        let anon = gen_server::start(SelfAware { got: vec![] }).unwrap();
        assert_eq!(anon.call(SelfCall::WhoAmI), Ok(SelfReply::Me(anon.pid(), anon.pid(), None)));
        assert_eq!(s.call(SelfCall::PokeSelf), Ok(SelfReply::Done));
        assert_eq!(s.call(SelfCall::Log), Ok(SelfReply::Log(vec!["poked"])));
        assert_eq!(s.call(SelfCall::HandOff), Ok(SelfReply::Done));
        while s.call(SelfCall::Log) != Ok(SelfReply::Log(vec!["poked", "from the other actor"])) {
            smarm::yield_now();
        }
    });
}

#[test]
fn cast_named_reaches_the_named_server_and_fails_for_an_unknown_name() {
    one_thread(|| {
        let opts = StartOpts { name: Some("cast-target".into()), ..Default::default() };
        let s = gen_server::start_opts(SelfAware { got: vec![] }, opts).unwrap();
        assert_eq!(gen_server::cast_named::<SelfAware>("cast-target", "named"), Ok(()));
        assert_eq!(s.call(SelfCall::Log), Ok(SelfReply::Log(vec!["named"])));
        assert_eq!(gen_server::cast_named::<SelfAware>("nobody", "x"), Err(CallError::NoProc));
        // A server of another type under the name is no target either.
        assert_eq!(gen_server::cast_named::<Holder>("cast-target", ()), Err(CallError::NoProc));
    });
}

#[test]
fn call_named_timeout_times_out_and_fails_for_an_unknown_name() {
    one_thread(|| {
        let opts = StartOpts { name: Some("holder".into()), ..Default::default() };
        let _s = gen_server::start_opts(Holder { held: vec![] }, opts).unwrap();
        let r = gen_server::call_named_timeout::<Holder>("holder", HolderCall::Hold, Duration::from_millis(1));
        assert_eq!(r, Err(CallError::Timeout));
        let r = gen_server::call_named_timeout::<Holder>("holder", HolderCall::Release(2), Duration::from_secs(5));
        assert_eq!(r, Ok(0));
        let r = gen_server::call_named_timeout::<Holder>("nobody", HolderCall::Hold, Duration::from_secs(5));
        assert_eq!(r, Err(CallError::NoProc));
    });
}

/// Answers three request types, each with its own reply type.
struct Typed {
    n: u64,
    log: Log,
}
struct Add(u64);
struct Describe;
struct StopWith(&'static str);

impl GenServer for Typed {
    type Call = ();
    type Reply = u64;
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, _: (), _: &Caller<u64>, _: &Ctx<Self>) -> CallResult<u64> {
        CallResult::Reply(self.n)
    }
    fn terminate(&mut self, _: &DownReason) {
        log(&self.log, "terminate");
    }
}
impl Handles<Add> for Typed {
    type Reply = u64;
    fn handle(&mut self, m: Add, _: &Caller<u64>, _: &Ctx<Self>) -> CallResult<u64> {
        self.n += m.0;
        CallResult::Reply(self.n)
    }
}
impl Handles<Describe> for Typed {
    type Reply = String;
    fn handle(&mut self, _: Describe, from: &Caller<String>, _: &Ctx<Self>) -> CallResult<String> {
        // Deferred and answered from elsewhere: the typed form keeps every call feature.
        let r = from.defer();
        let n = self.n;
        smarm::spawn(move || r.reply(format!("n = {n}")));
        CallResult::NoReply
    }
}
impl Handles<StopWith> for Typed {
    type Reply = &'static str;
    fn handle(&mut self, m: StopWith, _: &Caller<&'static str>, _: &Ctx<Self>) -> CallResult<&'static str> {
        log(&self.log, "stopping");
        CallResult::Stop(DownReason::Shutdown, Some(m.0))
    }
}

#[test]
fn one_server_answers_several_request_types_each_with_its_reply_type() {
    one_thread(|| {
        let log = Log::default();
        let s = gen_server::start(Typed { n: 1, log: log.clone() }).unwrap();
        let n: u64 = s.ask(Add(2)).unwrap();
        assert_eq!(n, 3);
        let d: String = s.ask_timeout(Describe, Duration::from_secs(5)).unwrap();
        assert_eq!(d, "n = 3");
        assert_eq!(s.call(()), Ok(3));
        // Stop with a reply: terminate runs first, then the reply is sent.
        assert_eq!(s.ask(StopWith("bye")), Ok("bye"));
        assert_eq!(taken(&log), ["stopping", "terminate"]);
        assert_eq!(s.exit_reason(), Some(DownReason::Shutdown));
        assert_eq!(s.ask(Add(1)), Err(CallError::NoProc));
    });
}

#[test]
fn a_typed_request_to_itself_is_calling_self() {
    struct Selfish;
    impl GenServer for Selfish {
        type Call = ();
        type Reply = Result<u64, CallError>;
        type Cast = ();
        type Info = ();
        type Continue = ();
        fn handle_call(&mut self, _: (), _: &Caller<Self::Reply>, ctx: &Ctx<Self>) -> CallResult<Self::Reply> {
            CallResult::Reply(ctx.myself().ask(Add(1)))
        }
    }
    impl Handles<Add> for Selfish {
        type Reply = u64;
        fn handle(&mut self, m: Add, _: &Caller<u64>, _: &Ctx<Self>) -> CallResult<u64> {
            CallResult::Reply(m.0)
        }
    }
    one_thread(|| {
        let s = gen_server::start(Selfish).unwrap();
        assert_eq!(s.call(()), Ok(Err(CallError::CallingSelf)));
        assert_eq!(s.ask(Add(4)), Ok(4));
    });
}

#[test]
fn start_reports_a_full_slab_as_a_typed_spawn_error() {
    let err = Runtime::builder()
        .threads(1)
        .max_actors(1)
        .build()
        .unwrap()
        .run(|| gen_server::start(Holder { held: vec![] }).err())
        .unwrap();
    match err {
        Some(StartError::Spawn(smarm::SpawnError::Full { max_actors: 1 })) => {}
        other => panic!("expected Spawn(Full), got {other:?}"),
    }
}

/// Drops every call without replying (and lives on).
struct Mute;

impl GenServer for Mute {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, _: (), _: &Caller<()>, _: &Ctx<Self>) -> CallResult<()> {
        CallResult::NoReply
    }
}

#[test]
fn a_dropped_request_in_a_collection_comes_back_as_a_timeout_with_its_label() {
    one_thread(|| {
        let s = gen_server::start(Mute).unwrap();
        let mut c = ReqIdCollection::new();
        s.send_request_to((), "dropped", &mut c);
        assert_eq!(c.wait_response(Duration::from_millis(2)), Ok((Err(CallError::Timeout), "dropped")));
        assert!(c.is_empty());
        // A single request: it times out and stays waitable (nothing more comes).
        let mut r = s.send_request(());
        assert_eq!(r.wait_response(Duration::from_millis(1)), Err(CallError::Timeout));
        assert_eq!(r.check_response(), None);
        assert!(s.is_alive());
    });
}
