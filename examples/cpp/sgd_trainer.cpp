// Data-parallel SGD on a synthetic linear regression.
//
// The controller spawns 4 worker procs with one Trainer each; each holds a
// shard of the data. Every step the controller gathers the shard gradients,
// averages them, updates the weights and broadcasts them back. The loss is
// printed per step and goes down.
//
//   sgd_trainer                    workers re-run this binary (serve_if_worker)
//   sgd_trainer --plugin LIB.so    workers are `monarch worker --plugin LIB.so`
//                                  (MONARCH_CLI: path of `monarch`)
#include <monarch/monarch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "trainer.hpp"

MONARCH_ACTOR(sgd::Trainer, "Trainer");

int main(int argc, char** argv) {
  monarch::serve_if_worker(argc, argv);

  const int kProcs = 4, kDim = 8, kSteps = 20;
  const std::int64_t kSamplesPerShard = 2048;
  const double kLearningRate = 0.5;

  try {
    monarch::Runtime rt;
    monarch::ProcOptions opts;
    if (argc == 3 && std::strcmp(argv[1], "--plugin") == 0) {
      const char* cli = std::getenv("MONARCH_CLI");
      opts.argv = {cli ? cli : MONARCH_CLI, "worker", "--plugin", argv[2]};
    } else if (argc != 1) {
      std::fprintf(stderr, "usage: %s [--plugin LIB.so]\n", argv[0]);
      return 2;
    }
    auto procs = monarch::HostMesh::local(rt).spawn_procs({{"workers", kProcs}}, opts);
    auto trainers = procs.spawn("trainer", "Trainer", kSamplesPerShard, std::int32_t{kDim},
                                std::uint64_t{42});

    std::vector<double> w(kDim, 0.0);
    double first = 0, last = 0;
    for (int step = 0; step < kSteps; ++step) {
      // Per-sender FIFO: the weights broadcast last step arrive first.
      auto results = trainers.call("grad").get(std::chrono::seconds(60));
      std::vector<double> g(kDim, 0.0);
      double loss = 0, n = 0;
      for (const auto& point : results) {
        auto r = point.as<std::vector<double>>();
        for (int j = 0; j < kDim; ++j) g[j] += r[j];
        loss += r[kDim];
        n += r[kDim + 1];
      }
      loss /= n;
      for (int j = 0; j < kDim; ++j) w[j] -= kLearningRate * g[j] / n;
      trainers.broadcast("set_weights", w);
      std::printf("step %2d  loss %.6f\n", step, loss);
      if (step == 0) first = loss;
      last = loss;
    }
    auto wstar = sgd::true_weights(kDim);
    double err = 0;
    for (int j = 0; j < kDim; ++j) err = std::max(err, std::fabs(w[j] - wstar[j]));
    std::printf("max |w - w*| = %.4f\n", err);
    procs.stop().get(std::chrono::seconds(60));
    if (!(last < first * 0.01)) {
      std::fprintf(stderr, "loss did not go down: %f -> %f\n", first, last);
      return 1;
    }
  } catch (const monarch::Error& e) {
    std::fprintf(stderr, "monarch error (%s): %s\n", monarch::status_name(e.status()), e.what());
    return 1;
  }
  return 0;
}
