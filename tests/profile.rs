//! `smarm::profile::site`: counts, nesting attributed to the innermost site, running vs
//! parked time with the runtime's CPU-time counting, sites on plain threads.

use std::time::Duration;

use smarm::profile;

fn stats(name: &str) -> profile::SiteStats {
    profile::sites().into_iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no site {name}"))
}

#[test]
fn nested_sites_attribute_to_the_innermost_and_split_running_from_parked() {
    smarm::Runtime::builder()
        .threads(2)
        .cpu_time(true)
        .build()
        .unwrap()
        .run(|| {
            let hs: Vec<_> = (0..3)
                .map(|_| {
                    smarm::spawn(|| {
                        let _outer = profile::site("t_outer");
                        {
                            // Parked for 5 ms inside the inner site.
                            let _inner = profile::site("t_inner_sleep");
                            smarm::sleep(Duration::from_millis(5));
                        }
                        // Running inside the outer site only.
                        let _busy = profile::site("t_busy");
                        let mut x = 0u64;
                        for i in 0..2_000_000u64 {
                            x = x.wrapping_add(std::hint::black_box(i));
                        }
                        std::hint::black_box(x);
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        })
        .unwrap();
    let (outer, inner, busy) = (stats("t_outer"), stats("t_inner_sleep"), stats("t_busy"));
    assert_eq!((outer.count, inner.count, busy.count), (3, 3, 3));
    // The sleep is the inner site's, not the outer's: the outer's own time is what is left
    // between its children (a few instructions), far below the inner's 15 ms.
    assert!(inner.total >= Duration::from_millis(15), "{inner:?}");
    assert!(outer.total < inner.total / 10, "outer {outer:?} inner {inner:?}");
    // The inner site was parked, the busy one ran.
    let (ir, ip) = (inner.running.unwrap(), inner.parked.unwrap());
    assert!(ip > ir * 10, "{inner:?}");
    // The busy site's running time is at least its loops' (3 x 2M additions, well over a
    // millisecond). Its parked time is the time each waited in a queue behind the others
    // (three actors, two threads), which depends on the host: no bound on it.
    let br = busy.running.unwrap();
    assert!(br > Duration::from_millis(1), "{busy:?}");
    // Running and parked add up to the total (up to rounding to whole nanoseconds).
    assert!((ir + ip).abs_diff(inner.total) <= Duration::from_nanos(2), "{inner:?}");
}

#[test]
fn sites_work_on_plain_threads_and_without_cpu_time() {
    {
        let _s = profile::site("t_plain_thread");
    }
    smarm::run(|| {
        let _s = profile::site("t_no_cpu_time");
    });
    let p = stats("t_plain_thread");
    assert_eq!(p.count, 1);
    assert!(p.running.is_none());
    let n = stats("t_no_cpu_time");
    assert_eq!((n.count, n.running, n.parked), (1, None, None));
}
