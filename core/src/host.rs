//! Host meshes: procs on other machines, started by host agents
//! (`monarch host --listen ADDR`), reached over TCP.
//!
//! A [`HostMesh`] is a view over the agents of a job, with one dimension
//! `hosts` (sliceable like any mesh). [`HostMesh::spawn_procs`] asks every
//! agent of the view to start `per_host` procs and returns a [`ProcMesh`]
//! of shape `{hosts: H, <per_host dims>}`: calls, slicing and stopping work
//! as for local procs. The agents authenticate the controller (and it
//! them) with the job secret, see [`crate::auth`]. The protocol is in
//! `runtime/remote.rs`; docs/hosts.md has the whole story.

use crate::agent_protocol;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::geometry::Shape;
use crate::limits;
use crate::mesh::{MeshView, ProcMesh};
use crate::progress::ProgressKind;
use crate::runtime::{Future, Runtime, StartWatch};
use crate::value::PointValue;

/// How long an agent may take to answer a request.
fn agent_timeout() -> Duration {
    let secs = std::env::var("MONARCH_AGENT_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

/// An n-d array of hosts, each running a host agent.
#[derive(Clone)]
pub struct HostMesh {
    rt: Runtime,
    /// `tcp:IP:PORT` of the agent at each base rank.
    hosts: Arc<Vec<String>>,
    shape: Shape,
}

fn wait_one(fut: &Future, what: &str) -> Result<Vec<Vec<u8>>> {
    if !fut.wait(Some(agent_timeout())) {
        return Err(Error::new(
            ErrorKind::Timeout,
            format!("{what}: no answer within {:?}", agent_timeout()),
        ));
    }
    let vm = fut
        .take()
        .ok_or_else(|| Error::new(ErrorKind::Internal, "future already taken"))??;
    match vm.values.into_iter().next() {
        Some(PointValue::Ok(parts)) => Ok(parts),
        Some(PointValue::Err { message, .. }) => Err(Error::new(
            ErrorKind::ProcFailed,
            format!("{what}: {message}"),
        )),
        None => Err(Error::new(ErrorKind::Internal, format!("{what}: no value"))),
    }
}

impl HostMesh {
    /// Attach the running agents at `addrs` (`IP:PORT`, `HOST:PORT` or
    /// `tcp:IP:PORT`): connect, authenticate both ways, check each answers.
    pub fn attach(rt: &Runtime, addrs: &[String]) -> Result<HostMesh> {
        if addrs.is_empty() {
            return Err(Error::invalid("a host mesh needs at least one host"));
        }
        let hosts: Vec<String> = addrs
            .iter()
            .map(|a| crate::transport::tcp_addr(a))
            .collect::<Result<_>>()?;
        let futs: Vec<Result<Future>> = hosts
            .iter()
            .map(|h| rt.call_agent(h, agent_protocol::INFO, &[]))
            .collect();
        for (h, f) in hosts.iter().zip(futs) {
            wait_one(&f?, &format!("host agent {h}"))?;
        }
        let shape = Shape::dense(vec!["hosts".to_string()], vec![hosts.len()])
            .map_err(|e| Error::invalid(e.to_string()))?;
        Ok(HostMesh {
            rt: rt.clone(),
            hosts: Arc::new(hosts),
            shape,
        })
    }

    /// The agents' addresses, in the order of this view.
    pub fn hosts(&self) -> Vec<String> {
        self.shape
            .base_ranks()
            .map(|r| self.hosts[r].clone())
            .collect()
    }

    /// Start `per_host` procs (dimensions `labels` x `sizes`) on every host
    /// of the view, each running `argv` with `env` added to the agent's
    /// environment plus the bootstrap variables. The result has the view's
    /// dimensions followed by `labels`. Returns once every agent has
    /// started its procs; sends to a proc wait until it is ready.
    pub fn spawn_procs(
        &self,
        labels: &[String],
        sizes: &[usize],
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<ProcMesh> {
        if argv.is_empty() {
            return Err(Error::invalid("bootstrap command is empty"));
        }
        let mut all_labels = self.shape.labels().to_vec();
        all_labels.extend(labels.iter().cloned());
        let mut all_sizes = self.shape.sizes().to_vec();
        all_sizes.extend(sizes.iter().copied());
        let shape =
            Shape::dense(all_labels, all_sizes).map_err(|e| Error::invalid(e.to_string()))?;
        let k: usize = sizes.iter().product();
        if k == 0 || shape.is_empty() {
            return Err(Error::invalid(format!(
                "cannot spawn an empty proc mesh {shape}"
            )));
        }
        limits::check_mesh_size(shape.len(), limits::max_mesh_size()).map_err(Error::invalid)?;
        let hosts = self.hosts();
        let n = k.to_string();
        // 1. Every agent binds k listening sockets: we learn the addresses
        //    before any proc can report Ready.
        let prepared: Vec<Result<Future>> = hosts
            .iter()
            .map(|h| {
                self.rt
                    .call_agent(h, agent_protocol::PREPARE, &[n.as_bytes()])
            })
            .collect();
        let mut addrs: Vec<Vec<String>> = Vec::with_capacity(hosts.len());
        for (h, f) in hosts.iter().zip(prepared) {
            let parts = wait_one(&f?, &format!("host {h}: prepare"))?;
            if parts.len() != k {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("host {h} prepared {} procs, not {k}", parts.len()),
                ));
            }
            addrs.push(
                parts
                    .into_iter()
                    .map(|p| String::from_utf8_lossy(&p).into_owned())
                    .collect(),
            );
        }
        // 2. Start them.
        let argv_b = argv.join("\0");
        let env_b = env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\0");
        let mut started = Vec::with_capacity(hosts.len());
        let progress =
            crate::progress::start(ProgressKind::ProcsReady, "procs ready", shape.len() as u64);
        for (i, h) in hosts.iter().enumerate() {
            for (j, a) in addrs[i].iter().enumerate() {
                self.rt
                    .expect_remote(a, h, StartWatch::new(i * k + j, a, &progress));
            }
            let controller = self.rt.tcp_addr_towards(h)?;
            let (dk, dv) = self.rt.debug_env(&controller);
            let env_b = format!("{env_b}\0{dk}={dv}");
            let base = (i * k).to_string();
            let list = addrs[i].join("\n");
            started.push(self.rt.call_agent(
                h,
                agent_protocol::START,
                &[
                    controller.as_bytes(),
                    base.as_bytes(),
                    argv_b.as_bytes(),
                    env_b.as_bytes(),
                    list.as_bytes(),
                ],
            ));
        }
        let procs: Vec<String> = addrs.into_iter().flatten().collect();
        for (h, f) in hosts.iter().zip(started) {
            if let Err(e) = f.and_then(|f| wait_one(&f, &format!("host {h}: start"))) {
                self.rt.stop_procs(&procs, Duration::from_millis(0));
                return Err(e);
            }
        }
        Ok(ProcMesh::from_parts(&self.rt, procs, shape))
    }
}

impl MeshView for HostMesh {
    fn shape(&self) -> &Shape {
        &self.shape
    }
    fn with_shape(&self, shape: Shape) -> HostMesh {
        HostMesh {
            shape,
            ..self.clone()
        }
    }
}
