//! The hint parked waiters use to choose between spinning and sleeping
//! (`ReplyPorts::missing_hint`): it follows the gather in flight, and the two
//! decisions flip where fewer replies are missing than there are CPUs.

use super::Runtime;
use crate::completion::cpu_count;
use crate::geometry::Shape;
use crate::value::PointValue;

#[test]
fn the_hint_follows_a_gathers_missing_replies() {
    let rt = Runtime::new().expect("runtime");
    let cpus = cpu_count();
    // No gather yet: nothing holds a waiter back, nothing makes it spin.
    assert!(!rt.inner.many_replies_missing());
    assert!(!rt.inner.last_replies_close());

    let n = cpus + 1;
    let shape = Shape::new(&[("gpus", n)]).expect("shape");
    let peers: Vec<String> = (0..n).map(|i| format!("unix:/nonexistent/{i}")).collect();
    let (port, fut) = rt.open_gather(shape, peers, None);
    // More missing than CPUs: a wait sleeps, a woken waiter does not spin.
    assert!(rt.inner.many_replies_missing());
    assert!(!rt.inner.last_replies_close());

    rt.fill_slot(port, 0, PointValue::error("first"));
    // Exactly as many missing as CPUs: still sleep.
    assert!(rt.inner.many_replies_missing());
    rt.fill_slot(port, 1, PointValue::error("second"));
    // One fewer than CPUs: each missing reply has a CPU beside the waiter.
    assert!(!rt.inner.many_replies_missing());
    assert!(rt.inner.last_replies_close());
    // A reply to a slot already filled changes nothing.
    rt.fill_slot(port, 1, PointValue::error("again"));
    assert!(rt.inner.last_replies_close());

    for slot in 2..n as u64 {
        rt.fill_slot(port, slot, PointValue::error("rest"));
    }
    assert!(fut.is_ready());
    assert!(!rt.inner.many_replies_missing());

    // A new gather resets the hint to its own size.
    let shape = Shape::new(&[("gpus", n)]).expect("shape");
    let peers: Vec<String> = (0..n).map(|i| format!("unix:/nonexistent/{i}")).collect();
    let (_port, _fut) = rt.open_gather(shape, peers, None);
    assert!(rt.inner.many_replies_missing());
    rt.shutdown();
}
