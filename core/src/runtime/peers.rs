//! This proc's connections: one per peer proc to send on (so delivery is
//! FIFO per sender and receiver), spares that are only read, and the procs
//! whose connection was lost.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::poller::Poller;
use super::HashMap;
use crate::conn::Conn;

pub(super) struct Peers {
    /// Every connection to read, spares included, once each.
    pub(super) poller: Poller,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    /// Connections to peers already reached by another one: when two procs
    /// connect to each other at once, each may send on either connection,
    /// so every one stays open and is read until its peer closes it.
    spares: Mutex<Vec<Arc<Conn>>>,
    /// One lock per address being connected to, so threads that need the
    /// same new peer at once make one connection, not one each.
    connecting: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Procs whose connection was lost (multicast routes around them).
    lost: Mutex<HashSet<String>>,
    any_lost: AtomicBool,
}

impl Peers {
    pub(super) fn new() -> std::io::Result<Peers> {
        Ok(Peers {
            poller: Poller::new()?,
            conns: Default::default(),
            spares: Default::default(),
            connecting: Default::default(),
            lost: Default::default(),
            any_lost: AtomicBool::new(false),
        })
    }

    /// The connection known under `addr`.
    #[inline]
    pub(super) fn get(&self, addr: &str) -> Option<Arc<Conn>> {
        self.conns.lock().get(addr).cloned()
    }

    pub(super) fn contains(&self, addr: &str) -> bool {
        self.conns.lock().contains_key(addr)
    }

    /// Every connection to read, spares included.
    #[inline]
    pub(super) fn list(&self) -> Vec<Arc<Conn>> {
        self.poller.all()
    }

    /// Register `conn` under `name` unless a connection is known under it
    /// (then `conn` is kept as a spare: the peer may send on it); with
    /// `identity` (the name the peer proved, when it differs), under that
    /// name too. Returns the connection registered under `name`.
    pub(super) fn register(
        &self,
        name: &str,
        identity: Option<String>,
        conn: &Arc<Conn>,
    ) -> Arc<Conn> {
        let mut conns = self.conns.lock();
        let c = conns
            .entry(name.to_string())
            .or_insert_with(|| conn.clone())
            .clone();
        if let Some(id) = identity {
            conns.entry(id).or_insert_with(|| c.clone());
        }
        if !Arc::ptr_eq(&c, conn) {
            self.spares.lock().push(conn.clone());
        }
        self.poller.add(conn);
        c
    }

    /// Forget `conn` under every name; returns whether its peer is still
    /// reached by another connection (sent on, or a spare).
    pub(super) fn forget(&self, conn: &Arc<Conn>) -> bool {
        self.poller.remove(conn);
        let mut conns = self.conns.lock();
        conns.retain(|_, c| !Arc::ptr_eq(c, conn));
        let mut spares = self.spares.lock();
        spares.retain(|c| !Arc::ptr_eq(c, conn));
        let spare = spares.iter().position(|c| c.peer == conn.peer);
        if !conns.contains_key(&conn.peer) {
            // The peer's last sending connection ended: a spare to it, if
            // any, carries what this proc sends from now on.
            match spare {
                Some(i) => {
                    let c = spares.swap_remove(i);
                    conns.insert(conn.peer.clone(), c);
                }
                None => return false,
            }
        }
        true
    }

    /// Remove and return every connection, spares included.
    pub(super) fn drain(&self) -> Vec<Arc<Conn>> {
        self.conns.lock().clear();
        self.spares.lock().clear();
        let all = self.poller.all();
        for c in &all {
            self.poller.remove(c);
        }
        all
    }

    /// Run `f` while no other thread runs it for the same `addr`.
    pub(super) fn one_at_a_time<T>(&self, addr: &str, f: impl FnOnce() -> T) -> T {
        let gate = self
            .connecting
            .lock()
            .entry(addr.to_string())
            .or_default()
            .clone();
        let result = {
            let _one_at_a_time = gate.lock();
            f()
        };
        let mut connecting = self.connecting.lock();
        // Forget the gate once no other thread holds it.
        if Arc::strong_count(&gate) == 2 {
            connecting.remove(addr);
        }
        result
    }

    pub(super) fn mark_lost(&self, peer: &str) {
        self.lost.lock().insert(peer.to_string());
        self.any_lost.store(true, Ordering::Relaxed);
    }

    /// These procs are being stopped: no cast will be routed through them
    /// again, so they leave the lost set.
    pub(super) fn forget_lost(&self, addrs: &[String]) {
        let mut lost = self.lost.lock();
        for a in addrs {
            lost.remove(a);
        }
        if lost.is_empty() {
            self.any_lost.store(false, Ordering::Relaxed);
        }
    }

    /// Whether the connection to the proc at `addr` was lost.
    #[inline]
    pub(super) fn is_lost(&self, addr: &str) -> bool {
        self.any_lost.load(Ordering::Relaxed) && self.lost.lock().contains(addr)
    }

    /// Those of `addrs` whose connection was lost (one lock for all).
    pub(super) fn lost_among<'a>(&self, addrs: impl Iterator<Item = &'a String>) -> Vec<String> {
        if !self.any_lost.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let lost = self.lost.lock();
        addrs.filter(|a| lost.contains(*a)).cloned().collect()
    }

    /// The procs whose connection was lost so far.
    pub(super) fn lost(&self) -> Vec<String> {
        if !self.any_lost.load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.lost.lock().iter().cloned().collect()
    }

    pub(super) fn lost_count(&self) -> usize {
        self.lost.lock().len()
    }
}
