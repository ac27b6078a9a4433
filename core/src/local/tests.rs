//! Tests of `local`.

use super::*;

/// Per base rank: (method, first part as u64) of each message, in order.
type Log = Arc<Mutex<Vec<Vec<(String, u64)>>>>;

/// Records every message; answers its point and base rank.
struct Recorder {
    base: usize,
    log: Log,
}

impl LocalActor for Recorder {
    fn handle(
        &mut self,
        method: &str,
        parts: &[Vec<u8>],
        point: u64,
    ) -> std::result::Result<Vec<Vec<u8>>, String> {
        let seq = parts
            .first()
            .map(|p| u64::from_le_bytes(p[..8].try_into().unwrap()))
            .unwrap_or(0);
        self.log.lock()[self.base].push((method.to_string(), seq));
        if method == "fail" {
            return Err(format!("rank {} failed", self.base));
        }
        Ok(vec![
            point.to_le_bytes().to_vec(),
            (self.base as u64).to_le_bytes().to_vec(),
        ])
    }
}

fn cluster(n: usize, k: usize) -> (LocalCluster, Log) {
    let c = LocalCluster::new(n, 2, k);
    let log = Arc::new(Mutex::new(vec![Vec::new(); n]));
    let l = log.clone();
    c.spawn("rec", move |base| {
        Box::new(Recorder {
            base,
            log: l.clone(),
        })
    })
    .unwrap();
    (c, log)
}

fn u(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap())
}

#[test]
fn cast_to_4096_ranks_reaches_each_once_in_rank_order() {
    let (c, log) = cluster(4096, 16);
    let shape = Shape::new(&[("hosts", 64), ("gpus", 64)]).unwrap();
    let f = c
        .cast(
            "rec",
            "ping",
            vec![7u64.to_le_bytes().to_vec()],
            &shape,
            true,
        )
        .unwrap()
        .unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(120))));
    let vm = f.take().unwrap().unwrap();
    assert_eq!(vm.values.len(), 4096);
    for (i, v) in vm.values.iter().enumerate() {
        let p = v.parts();
        assert_eq!((u(&p[0]), u(&p[1])), (i as u64, i as u64));
    }
    assert!(log.lock().iter().all(|l| l.len() == 1));
    let st = c.stats();
    assert_eq!(st.root_sends, 16, "the sender sends to K first hops only");
    // A strided slice: points renumbered, every 8th gpu of host 3..5.
    let view = shape
        .select("hosts", Some(3), Some(5), 1)
        .unwrap()
        .select("gpus", None, None, 8)
        .unwrap();
    let f = c.cast("rec", "ping", vec![], &view, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    let vm = f.take().unwrap().unwrap();
    let got: Vec<(u64, u64)> = vm
        .values
        .iter()
        .map(|v| (u(&v.parts()[0]), u(&v.parts()[1])))
        .collect();
    let want: Vec<(u64, u64)> = (0..16)
        .map(|i| (i as u64, (3 * 64 + (i / 8) * 64 + (i % 8) * 8) as u64))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn fifo_per_actor_across_casts_slices_and_direct_messages() {
    let (c, log) = cluster(300, 3);
    let all = Shape::new(&[("x", 300)]).unwrap();
    let mut want: Vec<Vec<u64>> = vec![Vec::new(); 300];
    let mut last = None;
    for i in 0..60u64 {
        let view = match i % 3 {
            0 => all.clone(),
            1 => all.select("x", Some(100), None, 7).unwrap(),
            _ => all.at("x", (i as usize * 37) % 300).unwrap(),
        };
        for b in view.base_ranks() {
            want[b].push(i);
        }
        last = c
            .cast("rec", "seq", vec![i.to_le_bytes().to_vec()], &view, i == 59)
            .unwrap();
    }
    let f = last.unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    // Broadcasts may still be running on other ranks: wait for them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let got: Vec<Vec<u64>> = log
            .lock()
            .iter()
            .map(|l| l.iter().map(|(_, s)| *s).collect())
            .collect();
        if got == want {
            break;
        }
        for (r, g) in got.iter().enumerate() {
            assert!(
                g.windows(2).all(|w| w[0] < w[1]),
                "rank {r} out of order: {g:?}"
            );
        }
        assert!(std::time::Instant::now() < deadline, "casts not delivered");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn reduce_inside_the_tree() {
    let (c, _) = cluster(4096, 16);
    let all = Shape::new(&[("x", 4096)]).unwrap();
    // Sum of the points (first reply part), plus the identity.
    let sum: Combine = Arc::new(|a: &[u8], b: &[u8]| (u(a) + u(b)).to_le_bytes().to_vec());
    let f = c
        .cast_reduce(
            "rec",
            "x",
            vec![],
            &all,
            5u64.to_le_bytes().to_vec(),
            sum.clone(),
        )
        .unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    let vm = f.take().unwrap().unwrap();
    assert_eq!(u(&vm.values[0].parts()[0]), 5 + 4095 * 4096 / 2);
    // On a strided slice, points are renumbered: 0..8 sum to 28.
    let view = all.select("x", Some(1), None, 512).unwrap();
    let f = c
        .cast_reduce("rec", "x", vec![], &view, vec![0; 8], sum.clone())
        .unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    assert_eq!(u(&f.take().unwrap().unwrap().values[0].parts()[0]), 28);
    // Empty view: the identity. An error anywhere: the error.
    let empty = all.select("x", Some(0), Some(0), 1).unwrap();
    let f = c
        .cast_reduce(
            "rec",
            "x",
            vec![],
            &empty,
            9u64.to_le_bytes().to_vec(),
            sum.clone(),
        )
        .unwrap();
    assert_eq!(u(&f.take().unwrap().unwrap().values[0].parts()[0]), 9);
    let f = c
        .cast_reduce("rec", "fail", vec![], &all, vec![0; 8], sum)
        .unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    assert!(f.take().unwrap().unwrap().values[0].is_err());
}

#[test]
fn errors_and_empty_views() {
    let (c, _) = cluster(20, 4);
    let all = Shape::new(&[("x", 20)]).unwrap();
    let f = c.cast("rec", "fail", vec![], &all, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    let vm = f.take().unwrap().unwrap();
    assert!(vm.values.iter().all(|v| v.is_err()));
    let f = c.cast("nobody", "x", vec![], &all, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    assert!(f.take().unwrap().unwrap().values[3].is_err());
    let empty = all.select("x", Some(3), Some(3), 1).unwrap();
    let f = c.cast("rec", "x", vec![], &empty, true).unwrap().unwrap();
    assert!(f.take().unwrap().unwrap().values.is_empty());
    let big = Shape::new(&[("x", 21)]).unwrap();
    assert!(c.cast("rec", "x", vec![], &big, true).is_err());
}

/// Waits until the cluster has no cast in flight: no collector
/// registered at a proc, none alive anywhere.
fn settle(c: &LocalCluster) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let st = c.stats();
        if st.relays == 0 && st.collectors == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reply state leaked: {st:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn casts_leave_no_relay_state_behind() {
    let (c, _) = cluster(1000, 4);
    let all = Shape::new(&[("a", 10), ("b", 100)]).unwrap();
    let views = [
        all.clone(),
        all.select("b", Some(3), None, 7).unwrap(),
        all.at("a", 9).unwrap().at("b", 99).unwrap(),
        all.select("a", Some(2), Some(9), 3).unwrap(),
    ];
    for round in 0..3 {
        for v in &views {
            let f = c.cast("rec", "x", vec![], v, true).unwrap().unwrap();
            assert!(f.wait(Some(std::time::Duration::from_secs(60))));
            let vm = f.take().unwrap().unwrap();
            assert_eq!(vm.values.len(), v.len());
            assert!(vm.values.iter().all(|x| !x.is_err()), "round {round}");
            c.cast("rec", "x", vec![], v, false).unwrap();
            let sum: Combine = Arc::new(|a: &[u8], b: &[u8]| (u(a) + u(b)).to_le_bytes().to_vec());
            let f = c
                .cast_reduce("rec", "x", vec![], v, vec![0; 8], sum)
                .unwrap();
            assert!(f.wait(Some(std::time::Duration::from_secs(60))));
            let want: u64 = (0..v.len() as u64).sum();
            assert_eq!(u(&f.take().unwrap().unwrap().values[0].parts()[0]), want);
        }
    }
    settle(&c);
    // Failing points, and an actor that is not there, also complete.
    let f = c.cast("rec", "fail", vec![], &all, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    let f = c.cast("ghost", "x", vec![], &all, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    settle(&c);
}

/// Blocks its handler at one base rank until the gate opens.
struct Gate {
    base: usize,
    gate: Arc<(Mutex<(bool, usize)>, Condvar)>,
    at: usize,
}

impl LocalActor for Gate {
    fn handle(
        &mut self,
        _method: &str,
        _parts: &[Vec<u8>],
        point: u64,
    ) -> std::result::Result<Vec<Vec<u8>>, String> {
        if self.base == self.at {
            let (m, cv) = &*self.gate;
            let mut g = m.lock();
            g.1 += 1;
            cv.notify_all();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while !g.0 && std::time::Instant::now() < deadline {
                cv.wait_for(&mut g, std::time::Duration::from_millis(100));
            }
        }
        Ok(vec![point.to_le_bytes().to_vec()])
    }
}

#[test]
fn a_proc_lost_mid_cast_fails_exactly_its_subtree_and_leaks_nothing() {
    // K = 4, 100 procs: 9's parent is 1; 9's children are 40..44.
    let (n, k, victim) = (100, 4, 9);
    let c = LocalCluster::new(n, 2, k);
    let gate = Arc::new((Mutex::new((false, 0usize)), Condvar::new()));
    let g = gate.clone();
    c.spawn("g", move |base| {
        Box::new(Gate {
            base,
            gate: g.clone(),
            at: victim,
        })
    })
    .unwrap();
    let all = Shape::new(&[("x", n)]).unwrap();
    // Cast A: 9 forwards to 40..44 (its collector waits), then blocks.
    let a = c.cast("g", "w", vec![], &all, true).unwrap().unwrap();
    {
        let (m, cv) = &*gate;
        let mut st = m.lock();
        while st.1 == 0 {
            cv.wait_for(&mut st, std::time::Duration::from_secs(60));
        }
    }
    // Cast B: its delivery waits in 9's mailbox.
    let b = c.cast("g", "w", vec![], &all, true).unwrap().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while c.mailbox_len(victim) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "cast B never queued at 9"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(c.stats().relays > 0);
    c.lose(victim).unwrap();
    // 9 resumes (as a process would not): its reply must be dropped.
    gate.0.lock().0 = true;
    gate.1.notify_all();
    let subtree: Vec<usize> = vec![9, 40, 41, 42, 43];
    for f in [a, b] {
        assert!(f.wait(Some(std::time::Duration::from_secs(60))));
        let vm = f.take().unwrap().unwrap();
        for (slot, v) in vm.values.iter().enumerate() {
            if subtree.contains(&slot) {
                assert!(v.is_err(), "slot {slot} should have failed");
                assert!(
                    matches!(v, PointValue::Err { message, .. } if message.contains("local proc 9 was lost")),
                    "{v:?}"
                );
            } else {
                assert_eq!(u(&v.parts()[0]), slot as u64, "slot {slot}");
            }
        }
    }
    settle(&c);
    // Later casts route around 9: only its own point fails, and a
    // strided view through it as well.
    let f = c.cast("g", "w", vec![], &all, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    let vm = f.take().unwrap().unwrap();
    for (slot, v) in vm.values.iter().enumerate() {
        assert_eq!(v.is_err(), slot == victim, "slot {slot}");
    }
    let view = all.select("x", Some(1), None, 8).unwrap(); // 1, 9, 17, ...
    let f = c.cast("g", "w", vec![], &view, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    let vm = f.take().unwrap().unwrap();
    for (slot, v) in vm.values.iter().enumerate() {
        assert_eq!(v.is_err(), slot == 1, "slot {slot}");
    }
    // A fold through the lost proc fails; one around it does not.
    let sum: Combine = Arc::new(|a: &[u8], b: &[u8]| (u(a) + u(b)).to_le_bytes().to_vec());
    let f = c
        .cast_reduce("g", "w", vec![], &all, vec![0; 8], sum.clone())
        .unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    assert!(f.take().unwrap().unwrap().values[0].is_err());
    let around = all.select("x", Some(40), Some(44), 1).unwrap();
    let f = c
        .cast_reduce("g", "w", vec![], &around, vec![0; 8], sum)
        .unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    assert_eq!(u(&f.take().unwrap().unwrap().values[0].parts()[0]), 6);
    // Every point lost: 1 answers for 9 (and 9's children still get
    // a broadcast through 1).
    let only = all.at("x", victim).unwrap();
    let f = c.cast("g", "w", vec![], &only, true).unwrap().unwrap();
    assert!(f.wait(Some(std::time::Duration::from_secs(60))));
    assert!(f.take().unwrap().unwrap().values[0].is_err());
    c.cast("g", "w", vec![], &all, false).unwrap();
    settle(&c);
}

#[test]
fn spawn_refuses_bad_names() {
    let c = LocalCluster::new(2, 1, 2);
    for bad in [
        String::new(),
        "n".repeat(crate::limits::MAX_NAME_LEN + 1),
        "a\0".into(),
    ] {
        let log: Log = Arc::new(Mutex::new(vec![Vec::new(); 2]));
        let e = c
            .spawn(&bad, |base| {
                Box::new(Recorder {
                    base,
                    log: log.clone(),
                })
            })
            .unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::InvalidArgument);
    }
}
