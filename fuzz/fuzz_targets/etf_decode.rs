//! `decode_versioned` on arbitrary bytes never panics (nor overflows the stack, nor aborts on an
//! allocation) and never reports `EtfError::Eetf` (which would mean the validator let through
//! bytes eetf refuses); whatever it decodes re-encodes with `encode_versioned` and decodes again
//! to the same term, taking every byte of the re-encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smarm::cluster::__wire::{decode_versioned, encode_versioned, EtfError, Limits};
use smarm::cluster::eetf::{InternalFun, Term};

/// Structural equality that does not depend on `eetf::Map`'s iteration-order hash (a map used
/// as a key inside another map can hash differently after a round trip).
fn same(a: &Term, b: &Term) -> bool {
    fn all(a: &[Term], b: &[Term]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
    }
    fn vars(f: &InternalFun) -> &[Term] {
        match f {
            InternalFun::Old { free_vars, .. } | InternalFun::New { free_vars, .. } => free_vars,
        }
    }
    match (a, b) {
        (Term::List(x), Term::List(y)) => all(&x.elements, &y.elements),
        (Term::Tuple(x), Term::Tuple(y)) => all(&x.elements, &y.elements),
        (Term::ImproperList(x), Term::ImproperList(y)) => all(&x.elements, &y.elements) && same(&x.last, &y.last),
        (Term::Map(x), Term::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map.iter().all(|(k, v)| y.map.iter().any(|(k2, v2)| same(k, k2) && same(v, v2)))
        }
        (Term::InternalFun(x), Term::InternalFun(y)) => {
            let strip = |f: &InternalFun| {
                let mut f = f.clone();
                match &mut f {
                    InternalFun::Old { free_vars, .. } | InternalFun::New { free_vars, .. } => free_vars.clear(),
                }
                f
            };
            strip(x) == strip(y) && all(vars(x), vars(y))
        }
        _ => a == b,
    }
}

fn check(data: &[u8], limits: &Limits) {
    match decode_versioned(data, limits) {
        Ok((term, used)) => {
            assert!(used >= 2 && used <= data.len(), "used {used} of {} bytes", data.len());
            let mut out = Vec::new();
            encode_versioned(&term, &mut out).expect("a decoded term encodes");
            let (back, n) = decode_versioned(&out, limits).expect("a re-encoded term decodes");
            assert_eq!(n, out.len(), "the re-encoding is one whole term");
            assert!(same(&term, &back), "{term:?} came back as {back:?}");
        }
        Err(EtfError::Eetf(e)) => panic!("eetf rejected validated bytes: {e}"),
        Err(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    check(data, &limits);
    // Most inputs lack the version byte: also try them as a versioned term.
    if data.first() != Some(&131) {
        let mut versioned = Vec::with_capacity(data.len() + 1);
        versioned.push(131);
        versioned.extend_from_slice(data);
        check(&versioned, &limits);
    }
});
