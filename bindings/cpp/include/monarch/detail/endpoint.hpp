// monarch/detail/endpoint.hpp: turning a callable into an endpoint handler
// (decode one argument per part, encode the result as parts).
#ifndef MONARCH_DETAIL_ENDPOINT_HPP
#define MONARCH_DETAIL_ENDPOINT_HPP

#include <cstddef>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <monarch/call.hpp>
#include <monarch/codec.hpp>

namespace monarch {
namespace detail {

template <class F>
struct fn_traits : fn_traits<decltype(&std::decay_t<F>::operator())> {};
template <class R, class... A>
struct fn_traits<R (*)(A...)> {
  using ret = R;
  using args = std::tuple<std::decay_t<A>...>;
};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) noexcept> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const noexcept> : fn_traits<R (*)(A...)> {};

template <class R>
Parts to_parts(R&& r) {
  using D = std::decay_t<R>;
  if constexpr (std::is_same_v<D, Parts>) {
    return std::forward<R>(r);
  } else {
    Parts p;
    p.push_back(encode(r));
    return p;
  }
}

template <class Tuple, std::size_t... I>
Tuple decode_args(const Call& c, std::index_sequence<I...>) {
  return Tuple{c.get<std::tuple_element_t<I, Tuple>>(I)...};
}

using Handler = std::function<Parts(const Call&)>;

// Wrap any callable into a Handler: raw (takes const Call&) or typed.
template <class F>
Handler make_handler(F f) {
  if constexpr (std::is_invocable_v<F&, const Call&>) {
    return [f = std::move(f)](const Call& c) mutable -> Parts {
      using R = std::invoke_result_t<F&, const Call&>;
      if constexpr (std::is_void_v<R>) {
        f(c);
        return {};
      } else {
        return to_parts(f(c));
      }
    };
  } else {
    using Tr = fn_traits<F>;
    using Args = typename Tr::args;
    using R = typename Tr::ret;
    return [f = std::move(f)](const Call& c) mutable -> Parts {
      constexpr std::size_t N = std::tuple_size_v<Args>;
      if (c.size() != N)
        throw DecodeError("endpoint '" + c.method() + "' takes " + std::to_string(N) +
                          " parts, got " + std::to_string(c.size()));
      Args args = decode_args<Args>(c, std::make_index_sequence<N>{});
      if constexpr (std::is_void_v<R>) {
        std::apply(f, std::move(args));
        return {};
      } else {
        return to_parts(std::apply(f, std::move(args)));
      }
    };
  }
}

}  // namespace detail
}  // namespace monarch

#endif  // MONARCH_DETAIL_ENDPOINT_HPP
