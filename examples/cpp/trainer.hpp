// The Trainer actor of sgd_trainer.cpp: holds one shard of a synthetic
// linear-regression dataset (y = X w* + noise) and computes gradients of
// the mean squared error on it. Shared by sgd_trainer (hosted by the
// example binary itself) and libmyactors.so (hosted by `monarch worker
// --plugin`).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <monarch/actor.hpp>

namespace sgd {

/// The weights the data is generated from.
inline std::vector<double> true_weights(int dim) {
  std::vector<double> w(dim);
  for (int i = 0; i < dim; ++i) w[i] = (i % 2 ? -0.5 : 0.5) * (i + 1);
  return w;
}

class Trainer : public monarch::Actor {
 public:
  // Arguments: samples per shard (int64), dimension (int32), seed (uint64).
  // The shard is chosen by the actor's rank.
  explicit Trainer(const monarch::Call& args)
      : n_(args.get<std::int64_t>(0)), dim_(args.get<std::int32_t>(1)), w_(dim_, 0.0) {
    if (n_ <= 0 || dim_ <= 0) throw std::invalid_argument("Trainer needs n > 0 and dim > 0");
    std::mt19937_64 rng(args.get<std::uint64_t>(2) * 1000003 + args.rank());
    std::uniform_real_distribution<double> x(-1.0, 1.0);
    std::normal_distribution<double> noise(0.0, 0.05);
    auto wstar = true_weights(dim_);
    X_.resize(static_cast<std::size_t>(n_) * dim_);
    y_.resize(n_);
    for (std::int64_t i = 0; i < n_; ++i) {
      double yi = noise(rng);
      for (int j = 0; j < dim_; ++j) {
        double v = x(rng);
        X_[i * dim_ + j] = v;
        yi += v * wstar[j];
      }
      y_[i] = yi;
    }
    endpoint("set_weights", &Trainer::set_weights);
    endpoint("grad", &Trainer::grad);
  }

  void set_weights(std::vector<double> w) {
    if (static_cast<int>(w.size()) != dim_) throw std::invalid_argument("wrong weight dimension");
    w_ = std::move(w);
  }

  // Returns [gradient (dim values), loss sum, sample count] at the current
  // weights: loss = 1/2 (x.w - y)^2 summed over the shard.
  std::vector<double> grad() const {
    std::vector<double> out(dim_ + 2, 0.0);
    for (std::int64_t i = 0; i < n_; ++i) {
      const double* xi = &X_[i * dim_];
      double r = -y_[i];
      for (int j = 0; j < dim_; ++j) r += xi[j] * w_[j];
      for (int j = 0; j < dim_; ++j) out[j] += r * xi[j];
      out[dim_] += 0.5 * r * r;
    }
    out[dim_ + 1] = static_cast<double>(n_);
    return out;
  }

 private:
  std::int64_t n_;
  int dim_;
  std::vector<double> w_;
  std::vector<double> X_, y_;
};

}  // namespace sgd
