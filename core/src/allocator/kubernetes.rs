//! The Kubernetes allocator: host agents run as the pods of a StatefulSet
//! behind a headless Service (docs/kubernetes.md has the manifests), and
//! the host mesh is built from the Service's DNS records.
//!
//! A headless Service publishes one A record per ready pod of a
//! StatefulSet under a stable name, `<statefulset>-<ordinal>.<service>.
//! <namespace>.svc.<cluster domain>`. Host i of the mesh is the pod of
//! ordinal i, so the mesh's order is the StatefulSet's, whichever pods
//! became ready first. Names are resolved with the system resolver
//! (`getaddrinfo`), retried until every pod has a record (a pod not yet
//! ready has none) or the timeout passes; then the agents are attached
//! like any others (`HostMesh::attach`). Every agent listens on the same
//! port (the containers' `containerPort`).

use std::net::{IpAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::host::HostMesh;
use crate::runtime::Runtime;

/// Where the agents are.
#[derive(Debug, Clone)]
pub struct KubernetesOptions {
    /// The StatefulSet's name (its pods are `<name>-0`, `<name>-1`, ...).
    pub statefulset: String,
    /// The headless Service that governs it (`serviceName`).
    pub service: String,
    /// The namespace; `None`: the pod's own (read from the service
    /// account's `namespace` file), else `default`.
    pub namespace: Option<String>,
    /// The cluster's DNS domain (`cluster.local` unless configured).
    pub cluster_domain: String,
    /// Number of replicas (hosts of the mesh).
    pub replicas: usize,
    /// The port every agent listens on.
    pub port: u16,
    /// How long to wait for every pod to have a DNS record.
    pub timeout: Duration,
}

impl KubernetesOptions {
    /// Options for `replicas` pods of `statefulset` behind `service`, agents
    /// on `port`; cluster domain `cluster.local`, 5 minutes to be ready.
    pub fn new(statefulset: &str, service: &str, replicas: usize, port: u16) -> Self {
        KubernetesOptions {
            statefulset: statefulset.to_string(),
            service: service.to_string(),
            namespace: None,
            cluster_domain: "cluster.local".to_string(),
            replicas,
            port,
            timeout: Duration::from_secs(300),
        }
    }

    /// The DNS name of each pod, in ordinal order (host i is ordinal i).
    pub fn pod_names(&self) -> Result<Vec<String>> {
        for (what, v) in [
            ("statefulset", &self.statefulset),
            ("service", &self.service),
        ] {
            check_label(what, v)?;
        }
        if self.replicas == 0 {
            return Err(Error::invalid("a host mesh needs at least one replica"));
        }
        let ns = match &self.namespace {
            Some(ns) => ns.clone(),
            None => own_namespace(),
        };
        check_label("namespace", &ns)?;
        Ok((0..self.replicas)
            .map(|i| {
                format!(
                    "{}-{i}.{}.{ns}.svc.{}",
                    self.statefulset, self.service, self.cluster_domain
                )
            })
            .collect())
    }
}

/// A DNS label as Kubernetes names are (RFC 1123: lower-case letters,
/// digits and '-', not at either end, at most 63).
fn check_label(what: &str, v: &str) -> Result<()> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what} '{v}' is not a DNS label (lower-case letters, digits, '-')"
        )))
    }
}

/// The namespace of the pod this runs in, or `default`.
fn own_namespace() -> String {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// The system resolver: the addresses of `name`.
pub fn system_resolve(name: &str) -> std::io::Result<Vec<IpAddr>> {
    Ok((name, 0).to_socket_addrs()?.map(|sa| sa.ip()).collect())
}

/// Resolve every name (with `resolve`), retrying those without a record
/// until `timeout`; returns `IP:port` per name, in order. An IPv4 address
/// is preferred when a name has both. The error names the pods that never
/// resolved.
pub fn resolve_all(
    names: &[String],
    port: u16,
    timeout: Duration,
    resolve: &dyn Fn(&str) -> std::io::Result<Vec<IpAddr>>,
) -> Result<Vec<String>> {
    let deadline = Instant::now() + timeout;
    let mut found: Vec<Option<IpAddr>> = vec![None; names.len()];
    let mut pause = Duration::from_millis(50);
    loop {
        let mut last_error = None;
        for (name, slot) in names.iter().zip(found.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            match resolve(name) {
                Ok(ips) => {
                    *slot = ips
                        .iter()
                        .find(|ip| ip.is_ipv4())
                        .or_else(|| ips.first())
                        .copied()
                }
                Err(e) => last_error = Some(e),
            }
        }
        if found.iter().all(Option::is_some) {
            return Ok(found
                .into_iter()
                .flatten()
                .map(|ip| match ip {
                    IpAddr::V6(v6) => format!("[{v6}]:{port}"),
                    v4 => format!("{v4}:{port}"),
                })
                .collect());
        }
        if Instant::now() >= deadline {
            let missing: Vec<&str> = names
                .iter()
                .zip(&found)
                .filter(|(_, f)| f.is_none())
                .map(|(n, _)| n.as_str())
                .collect();
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "{} of {} agent pods have no DNS record after {timeout:?} (not ready?): {}{}",
                    missing.len(),
                    names.len(),
                    missing.join(", "),
                    last_error
                        .map(|e| format!(" (last error: {e})"))
                        .unwrap_or_default()
                ),
            ));
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Attach the agents named `names` (DNS names, all on `port`) as a host
/// mesh, in that order, once every name resolves (see [`resolve_all`]).
pub fn attach_names(
    rt: &Runtime,
    names: &[String],
    port: u16,
    timeout: Duration,
) -> Result<HostMesh> {
    let addrs = resolve_all(names, port, timeout, &system_resolve)?;
    HostMesh::attach(rt, &addrs)
}

/// Attach the agents of the StatefulSet `opts` describes as a host mesh
/// (host i is the pod of ordinal i).
pub fn attach(rt: &Runtime, opts: &KubernetesOptions) -> Result<HostMesh> {
    attach_names(rt, &opts.pod_names()?, opts.port, opts.timeout)
}

#[cfg(test)]
mod tests;
