//! The notification descriptor on a real runtime: asking for it marks it
//! watched (the I/O thread reads the sockets for its watcher), and a thread
//! waiting inside the runtime unmarks it until it is asked for again.

use std::time::Duration;

use super::Runtime;

#[test]
fn a_wait_inside_the_runtime_ends_the_watch_until_the_fd_is_asked_again() {
    let rt = Runtime::listen_tcp(
        "tcp:127.0.0.1:0",
        std::net::IpAddr::from([127, 0, 0, 1]),
        "963426a44c97c326d01712b788b2bae60175264812e293e1e82dde5b80ee7cf3".to_string(),
    )
    .expect("listen on 127.0.0.1");
    assert!(!rt.inner.notifier.is_watched());
    let fd = rt.notify_fd();
    assert!(fd >= 0);
    assert!(rt.inner.notifier.is_watched());
    // Never completed: the wait times out, having read the sockets itself.
    let pending = rt.new_future();
    assert!(!pending.wait(Some(Duration::from_millis(1))));
    assert!(!rt.inner.notifier.is_watched());
    assert!(rt.inner.notifier.is_armed(), "notifications stay armed");
    assert_eq!(rt.notify_fd(), fd);
    assert!(rt.inner.notifier.is_watched());
    rt.shutdown();
}
