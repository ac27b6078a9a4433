// monarch/monarch.hpp: header-only C++17 binding of libmonarch.
//
// A thin layer over the C ABI (monarch.h, docs/c-abi.md): RAII owners for
// every handle, errors as exceptions, futures you wait on, and the worker
// loop that hosts C++ actors (monarch/actor.hpp) over the pull API. All
// runtime logic is in libmonarch; nothing here talks to the network.
//
//   int main(int argc, char** argv) {
//     monarch::serve_if_worker(argc, argv);   // procs re-run this binary
//     monarch::Runtime rt;
//     auto procs = rt.spawn_procs({{"hosts", 2}, {"gpus", 2}});
//     auto counters = procs.spawn("c", "Counter", int64_t{5});
//     for (auto& p : counters.call("incr", int64_t{1}).get())
//       std::cout << p.point().rank << " -> " << p.as<int64_t>() << "\n";
//   }
//
// Supervision: a proc that dies fails the calls in flight to it (error
// points), later calls to views holding it throw Error(MONARCH_ERR_PROC_FAILED),
// and the failure is pulled as a SupervisionEvent with
// Runtime::next_supervision_event (docs/supervision.md).
//
// Also here: ports and streams (PortReceiver, Port, ActorMesh::send /
// stream, deferred replies), the data plane (RdmaBuffer, Transfer), SLURM
// (SlurmJob), mesh views (flatten / rename / split). docs/c-abi.md lists
// which class wraps each C function ("The C++ binding").
//
// This header includes the whole binding, one header per concept:
//   monarch/codec.hpp        Bytes, BytesView, Codec: values as payload parts
//   monarch/shape.hpp        Shape: a mesh's named dimensions
//   monarch/supervision.hpp  SupervisionEvent
//   monarch/introspect.hpp   JobSnapshot: the job's procs, actors, meshes
//   monarch/call.hpp         Call: what an endpoint receives
//   monarch/actor.hpp        Actor, MONARCH_ACTOR, ActorHost (also for plugins)
//   monarch/error.hpp        Error, ActorError, status_name
//   monarch/handle.hpp       the RAII owner of a libmonarch handle
//   monarch/process.hpp      current_runtime, self_exe
//   monarch/value.hpp        ValueMesh, PointValue, Point, Future
//   monarch/port.hpp         Port, PortReceiver, defer_reply
//   monarch/mesh.hpp         ProcMesh, ActorMesh, CallMode, spawn_procs
//   monarch/server.hpp       Event, ActorServer, serve_if_worker
//   monarch/runtime.hpp      Runtime
//   monarch/host.hpp         HostMesh
//   monarch/rdma.hpp         RdmaBuffer, Transfer, RdmaAccess, backends
//   monarch/slurm.hpp        SlurmJob, SlurmOptions
//   monarch/tensor.hpp       combine, reduce_chunk: the tensor plane on raw memory
// (monarch/torch.hpp, the same over at::Tensor, is included separately.)
// with internal helpers in monarch/detail/ and flatc's code for
// core/schema/monarch.fbs in monarch/generated/. Each includes what it uses.
//
// Not covered, because the C ABI lacks it: zero-copy sends with a deleter.
#ifndef MONARCH_HPP
#define MONARCH_HPP

#include <monarch/actor.hpp>
#include <monarch/call.hpp>
#include <monarch/codec.hpp>
#include <monarch/error.hpp>
#include <monarch/handle.hpp>
#include <monarch/host.hpp>
#include <monarch/mesh.hpp>
#include <monarch/port.hpp>
#include <monarch/process.hpp>
#include <monarch/progress.hpp>
#include <monarch/rdma.hpp>
#include <monarch/runtime.hpp>
#include <monarch/server.hpp>
#include <monarch/shape.hpp>
#include <monarch/slurm.hpp>
#include <monarch/supervision.hpp>
#include <monarch/tensor.hpp>
#include <monarch/introspect.hpp>
#include <monarch/value.hpp>

#endif  // MONARCH_HPP
