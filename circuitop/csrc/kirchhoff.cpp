// Native CPU kernels of the Kirchhoff cell and block: the cell's fused ZOH scan (circuitop/knc.py,
// _NativeZohScanFn; _ZohScanFn is its torch twin), and further below the block's causal depthwise convolution and output gate
// (circuitop/ckb.py). The scan:
//
//   v_t = a_t v_{t-1} + phi_t b_t u_t,   y_t = sum_n c_t[n] v_t[:, n] + skip u_t,   v_{-1} = 0,
//   a_t = exp(-delta_t lam),  phi_t = (1 - a_t) / lam = -expm1(-delta_t lam) / lam      (003, Eqs. 32-34)
//
// on u (batch, time, d_inner), lam (d_inner, d_state), the skip readout skip (d_inner) (Eq. 22's d) and
// the cell's three projections of u in one tensor proj (batch, time, d_inner + 2 d_state) = [z | b | c]
// (one matmul upstream instead of three; its gradient comes back in the same layout), with the step
// sizes delta_t = softplus(z_t) dt_t computed here from the pre-activation z and the optional real
// steps dt (batch, time) (Eq. 33; torch's softplus and exp cost more than the scan here).
//
// Unlike the torch formulation it never stores the (batch, time, d_inner, d_state) states or
// coefficients: the state of one batch element lives in a (d_state, d_inner) array, the forward keeps
// only the state at the start of every chunk of K steps (checkpoints), and the backward recomputes
// one chunk's states from its checkpoint into a cache-sized buffer before stepping back through it.
// The backward runs potential by potential over blocks of 16 channels, each block's state, adjoint
// carry and dlam sum in registers along the chunk's steps; the readout gradients dc and db, sums over
// the channels, are taken afterwards as one dot product per step and potential (a sum per block and
// step would cost more than the block's arithmetic).
// Memory traffic is O(batch time (d_inner + d_state)) instead of O(batch time d_inner d_state).
//
// exp and expm1 of x = -delta lam <= 0 come from one branch-free evaluation (x = k ln2 + f,
// |f| <= ln2/2: exp(x) = 2^k (1 + p), expm1(x) = 2^k p + (2^k - 1) with p = expm1(f) from a
// polynomial), which the compiler vectorises over the d_inner channels (innermost loops).
//
// Backward, with g the adjoint of v_t, carried G = a_{t+1} g_{t+1}, q = b u, nil = -1/lam:
//   du = skip dy;  dskip += dy u;
//   g = dy c + G;  dc += dy v;  du += g phi b;  db += g phi u;  de = g (v_prev + q nil);
//   dr = -a de (r = delta lam);  ddelta += dr lam;  dlam += dr delta + g phi q nil;  G = a g;
//   then dz = ddelta sigmoid(z) dt and ddt = sum_d ddelta softplus(z).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

// Portability: GCC and clang (Linux, macOS) and MSVC. __builtin_bit_cast is what std::bit_cast
// (C++20) is built on in all three, and needs no C++20 library.
#if defined(_MSC_VER)
#define CIRCUITOP_INLINE __forceinline
#define __restrict__ __restrict
#else
#define CIRCUITOP_INLINE inline __attribute__((always_inline))
#endif
#define CIRCUITOP_BIT_CAST(T, x) __builtin_bit_cast(T, x)

namespace {

template <typename T>
struct ExpConst;

template <>
struct ExpConst<float> {
  using Int = int32_t;
  static constexpr float lo = -87.0f;  // 2^k stays a normal number
  static constexpr float log2e = 1.44269504088896341f;
  static constexpr float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723212e-6f;
  static constexpr int mantissa = 23, bias = 127;
  static constexpr float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // expm1(f) = f + f^2 r(f) on |f| <= ln2/2 with r of degree 4, r(0) = 1/2 and the other four
  // coefficients fitted (iteratively reweighted least squares) to minimise the relative error of
  // expm1(f)/f: 1.5e-8 with these float32 coefficients, against 1.7e-8 for the degree-6 Taylor series
  // it replaces (one term more). Evaluated in float32, exp and expm1 stay within 1.4 ulp.
  static constexpr int terms = 5;
  static constexpr float r[terms] = {0.5f, 0.16666549444198608f, 0.04166685417294502f, 0.008366034366190434f,
                                     0.0013898223405703902f};
};

template <>
struct ExpConst<double> {
  using Int = int64_t;
  static constexpr double lo = -708.0;
  static constexpr double log2e = 1.44269504088896338700e+00;
  static constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  static constexpr int mantissa = 52, bias = 1023;
  static constexpr double shifter = 6755399441055744.0;  // 1.5 * 2^52
  // expm1(f) = f + f^2 r(f), r the Taylor series 1/2! + f/3! + ... + f^11/13! (|f|^14 / 14! < 5e-18)
  static constexpr int terms = 12;
  static constexpr double r[terms] = {1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320,
                                      1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600,
                                      1.0 / 6227020800.0};
};

// r(f) = sum_i ExpConst<T>::r[i] f^i by Horner's rule, unrolled at compile time (a loop here blocks
// vectorisation).
template <typename T, int i = 0>
CIRCUITOP_INLINE T series(T f) {
  if constexpr (i == ExpConst<T>::terms - 1) {
    return ExpConst<T>::r[i];
  } else {
    return ExpConst<T>::r[i] + f * series<T, i + 1>(f);
  }
}

// exp(x) and expm1(x) together (see the header comment); accurate to a few ulp for lo <= x <= 0
// (x = -delta lam <= 0 here: delta >= 0, lam > 0; below lo, exp(x) is returned as exp(lo) ~ 1e-38).
template <typename T>
CIRCUITOP_INLINE void exp_expm1(T x, T& ex, T& em1) {
  using C = ExpConst<T>;
  using Int = typename C::Int;
  x = x < C::lo ? C::lo : x;  // if-converted (vectorised) with -fno-trapping-math
  // k = round(x / ln2): adding 1.5 * 2^m rounds to an integer and leaves k in the low mantissa
  // bits, so k and 2^k come from integer adds and shifts (no float->int conversion; vectorisable).
  const T shifted = x * C::log2e + C::shifter;
  const T kf = shifted - C::shifter;
  const Int k = CIRCUITOP_BIT_CAST(Int, shifted) - CIRCUITOP_BIT_CAST(Int, C::shifter);
  const T f = (x - kf * C::ln2_hi) - kf * C::ln2_lo;
  const T p = f + (f * f) * series<T>(f);  // expm1(f); f * f runs beside the series
  const T s = CIRCUITOP_BIT_CAST(T, static_cast<Int>((k + C::bias) << C::mantissa));  // 2^k
  ex = s * p + s;
  em1 = s * p + (s - T(1));
}

// softplus(z) = max(z, 0) + log1p(exp(-|z|)) and sigmoid(z), from one exp: with w = exp(-|z|) in
// (0, 1], log1p(w) = 2 atanh(s), s = w / (2 + w) <= 1/3, summed as 2 s (1 + s^2/3 + s^4/5 + ...).
template <typename T>
CIRCUITOP_INLINE void softplus_sigmoid(T z, T& sp, T& sig) {
  T w, em1;
  exp_expm1<T>(z < T(0) ? z : -z, w, em1);
  const T s = w / (T(2) + w), s2 = s * s;
  constexpr int terms = sizeof(T) == 4 ? 7 : 17;  // truncation (1/9)^terms / (2 terms + 1) < 2e-8 / 1e-17
  T series = T(1) / T(2 * terms - 1);
  for (int k = terms - 2; k >= 0; --k) series = T(1) / T(2 * k + 1) + s2 * series;
  sp = (z > T(0) ? z : T(0)) + T(2) * s * series;
  sig = (z >= T(0) ? T(1) : w) / (T(1) + w);
}

// Step sizes of step t: delta[d] = softplus(z[d]) dt (and, when sig is given, sp = softplus(z) and
// sig = sigmoid(z) for the backward).
template <typename T>
CIRCUITOP_INLINE void step_sizes(const T* __restrict__ z, T dt, T* __restrict__ delta,
                                                      T* __restrict__ sp_out, T* __restrict__ sig_out, int64_t D) {
  if (sig_out == nullptr) {
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) {
      T sp, sig;
      softplus_sigmoid<T>(z[d], sp, sig);
      delta[d] = sp * dt;
    }
  } else {
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) {
      T sp, sig;
      softplus_sigmoid<T>(z[d], sp, sig);
      delta[d] = sp * dt;
      sp_out[d] = sp;
      sig_out[d] = sig;
    }
  }
}

// Channel-major views of lam: (d_state, d_inner) rows of lam and of -1/lam.
template <typename T>
struct Rates {
  std::vector<T> lam, nil;
  Rates(const T* lam_dn, int64_t d_inner, int64_t d_state) : lam(d_inner * d_state), nil(d_inner * d_state) {
    for (int64_t d = 0; d < d_inner; ++d)
      for (int64_t n = 0; n < d_state; ++n) {
        lam[n * d_inner + d] = lam_dn[d * d_state + n];
        nil[n * d_inner + d] = T(-1) / lam_dn[d * d_state + n];
      }
  }
};

struct Dims {
  int64_t batch, length, d_inner, d_state, chunk;
  int64_t row() const { return d_inner + 2 * d_state; }  // one step's [z | b | c] in proj
  int64_t chunks() const { return (length + chunk - 1) / chunk; }
};

// Forward step t: v = a v_prev + phi b u for every (n, d) and y_t = sum_n c_n v_n + skip u (one pass).
template <typename T>
CIRCUITOP_INLINE void forward_step(T* __restrict__ v, const T* __restrict__ u,
                                                        const T* __restrict__ delta, const T* __restrict__ b,
                                                        const T* __restrict__ c, const T* __restrict__ skip,
                                                        T* __restrict__ y, const T* __restrict__ lam,
                                                        const T* __restrict__ nil, const T* __restrict__ v_prev,
                                                        int64_t D, int64_t N) {
  for (int64_t d = 0; d < D; ++d) y[d] = skip[d] * u[d];
  for (int64_t n = 0; n < N; ++n) {
    const T bn = b[n], cn = c[n];
    const T* __restrict__ lam_n = lam + n * D;
    const T* __restrict__ nil_n = nil + n * D;
    const T* __restrict__ vp = v_prev + n * D;
    T* __restrict__ vn = v + n * D;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) {
      T a, e;
      exp_expm1<T>(-delta[d] * lam_n[d], a, e);
      const T v_new = a * vp[d] + e * nil_n[d] * (bn * u[d]);
      vn[d] = v_new;
      y[d] += cn * v_new;
    }
  }
}

// Forward for one batch element: y (length, D) and the chunk checkpoints (chunks, N, D); proj is
// (length, D + 2N) = [z | b | c] per step.
template <typename T>
CIRCUITOP_INLINE void forward_item(const T* u, const T* proj, const T* dt, const T* skip,
                                                        const Rates<T>& r, T* y, T* ckpt, const Dims& s) {
  const int64_t D = s.d_inner, N = s.d_state, P = s.row();
  std::vector<T> state(2 * N * D, T(0)), delta(D);
  T* cur = state.data();
  T* next = cur + N * D;
  for (int64_t t = 0; t < s.length; ++t) {
    if (t % s.chunk == 0) std::copy(cur, cur + N * D, ckpt + (t / s.chunk) * N * D);
    const T* zbc = proj + t * P;
    step_sizes<T>(zbc, dt == nullptr ? T(1) : dt[t], delta.data(), nullptr, nullptr, D);
    forward_step<T>(next, u + t * D, delta.data(), zbc + D, zbc + D + N, skip, y + t * D, r.lam.data(),
                    r.nil.data(), cur, D, N);
    std::swap(cur, next);
  }
}

// sum_i x[i] y[i], summed in kLanes interleaved partial sums added pairwise at the end (a single running
// sum would be a chain of dependent scalar additions).
constexpr int64_t kLanes = 16;
template <typename T>
CIRCUITOP_INLINE T dot(const T* __restrict__ x, const T* __restrict__ y, int64_t n) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * y[i + j];
  }
  for (int64_t j = 0; i < n; ++i, ++j) acc[j] += x[i] * y[i];
  for (int64_t half = kLanes / 2; half > 0; half /= 2) {
    for (int64_t j = 0; j < half; ++j) acc[j] += acc[j + half];
  }
  return acc[0];
}

// Channels per block of the backward's register-resident loops (a multiple of every SIMD width).
constexpr int64_t kBlock = 16;

// The backward's recomputation of one chunk for the channels [d0, d0 + w) of potential n: the states
// v (steps + 1 rows, the first the checkpoint) and the coefficients a, phi (steps rows), rows of D
// values, from the chunk's step sizes delta (steps, D); the state stays in registers along the chunk.
template <typename T>
CIRCUITOP_INLINE void recompute_block(T* __restrict__ v, T* __restrict__ a_out, T* __restrict__ phi_out,
                                      const T* __restrict__ u, const T* __restrict__ delta,
                                      const T* __restrict__ b, const T* __restrict__ lam_n,
                                      const T* __restrict__ nil_n, int64_t steps, int64_t w, int64_t D,
                                      int64_t P) {
  T state[kBlock], lam[kBlock], nil[kBlock];
  for (int64_t j = 0; j < w; ++j) {
    state[j] = v[j];
    lam[j] = lam_n[j];
    nil[j] = nil_n[j];
  }
  for (int64_t k = 0; k < steps; ++k) {
    const T bn = b[k * P];
    const T* __restrict__ u_k = u + k * D;
    const T* __restrict__ delta_k = delta + k * D;
    T* __restrict__ v_k = v + (k + 1) * D;
    T* __restrict__ a_k = a_out + k * D;
    T* __restrict__ phi_k = phi_out + k * D;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) {
      T a, e;
      exp_expm1<T>(-delta_k[j] * lam[j], a, e);
      const T phi = e * nil[j];
      state[j] = a * state[j] + phi * (bn * u_k[j]);
      v_k[j] = state[j];
      a_k[j] = a;
      phi_k[j] = phi;
    }
  }
}

// Backward through one chunk (see the header comment) for the channels [d0, d0 + w) of potential n,
// steps from last to first: G (w) is read and replaced by its value before the chunk, dlam (w)
// receives the chunk's sum; du and ddelta (steps, D) accumulate over n; phi_io (steps rows) holds phi
// and is overwritten with g phi, from which the caller takes db. bc points at b_n of the chunk's first
// step in proj (rows P apart, c_n N further).
template <typename T>
CIRCUITOP_INLINE void backward_block(
    const T* __restrict__ u, const T* __restrict__ delta, const T* __restrict__ bc,
    const T* __restrict__ dy, const T* __restrict__ v, const T* __restrict__ a_in, T* __restrict__ phi_io,
    const T* __restrict__ lam_n, const T* __restrict__ nil_n, T* __restrict__ G, T* __restrict__ du,
    T* __restrict__ ddelta, T* __restrict__ dlam, int64_t steps, int64_t w, int64_t D, int64_t N, int64_t P) {
  T carry[kBlock], acc[kBlock], lam[kBlock], nil[kBlock];
  for (int64_t j = 0; j < w; ++j) {
    carry[j] = G[j];
    acc[j] = T(0);
    lam[j] = lam_n[j];
    nil[j] = nil_n[j];
  }
  for (int64_t k = steps - 1; k >= 0; --k) {
    const T bn = bc[k * P], cn = bc[k * P + N];
    const T* __restrict__ u_k = u + k * D;
    const T* __restrict__ dy_k = dy + k * D;
    const T* __restrict__ delta_k = delta + k * D;
    const T* __restrict__ vn = v + (k + 1) * D;
    const T* __restrict__ vp = v + k * D;
    const T* __restrict__ an = a_in + k * D;
    T* __restrict__ phin = phi_io + k * D;
    T* __restrict__ du_k = du + k * D;
    T* __restrict__ ddelta_k = ddelta + k * D;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) {
      const T a = an[j], phi = phin[j];
      const T g = dy_k[j] * cn + carry[j];
      const T q = bn * u_k[j];
      const T g_phi = g * phi;
      phin[j] = g_phi;
      du_k[j] += g_phi * bn;
      const T dr = -a * (g * (vp[j] + q * nil[j]));
      ddelta_k[j] += dr * lam[j];
      acc[j] += dr * delta_k[j] + g_phi * q * nil[j];
      carry[j] = a * g;
    }
  }
  for (int64_t j = 0; j < w; ++j) {
    G[j] = carry[j];
    dlam[j] = acc[j];
  }
}

// Backward for one batch element; dlam_out (N, D) receives this element's sum.
template <typename T>
CIRCUITOP_INLINE void backward_item(const T* u, const T* proj, const T* dt, const T* skip,
                                                         const T* dy, const T* ckpt, const Rates<T>& r, T* du,
                                                         T* dproj, T* ddt, T* dlam_out, T* dskip_out,
                                                         const Dims& s) {
  const int64_t D = s.d_inner, N = s.d_state, ND = N * D, K = s.chunk, P = s.row();
  // one chunk's states (K + 1 per potential, the first the checkpoint), coefficients a and phi (K each),
  // potential-major: (N, K + 1, D) and (N, K, D); its step sizes, softplus, sigmoid and ddelta (K, D)
  std::vector<T> states(N * (K + 1) * D), coef_a(N * K * D), coef_phi(N * K * D), G(ND, T(0)), dlam_chunk(ND);
  std::vector<T> delta(K * D), sp(K * D), sig(K * D), ddelta(K * D);
  std::vector<double> dlam(ND, 0.0), dskip(D, 0.0);  // sums over time in double: long sequences keep
                                                    // their precision (dlam: chunk sums added)
  for (int64_t j = s.chunks() - 1; j >= 0; --j) {
    const int64_t t0 = j * K, steps = std::min(K, s.length - t0);
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t t = t0 + k;
      step_sizes<T>(proj + t * P, dt == nullptr ? T(1) : dt[t], delta.data() + k * D, sp.data() + k * D,
                    sig.data() + k * D, D);
      for (int64_t d = 0; d < D; ++d) {
        du[t * D + d] = skip[d] * dy[t * D + d];
        ddelta[k * D + d] = T(0);
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      T* v_n = states.data() + n * (K + 1) * D;
      std::copy(ckpt + j * ND + n * D, ckpt + j * ND + (n + 1) * D, v_n);
      for (int64_t d0 = 0; d0 < D; d0 += kBlock) {
        const int64_t w = std::min(kBlock, D - d0);
        const T* zbc = proj + t0 * P + D + n;
        const T* lam_n = r.lam.data() + n * D + d0;
        const T* nil_n = r.nil.data() + n * D + d0;
        T* a_n = coef_a.data() + n * K * D + d0;
        T* phi_n = coef_phi.data() + n * K * D + d0;
        if (w == kBlock) {  // a compile-time width: the block's arrays live in vector registers
          recompute_block<T>(v_n + d0, a_n, phi_n, u + t0 * D + d0, delta.data() + d0, zbc, lam_n, nil_n, steps,
                             kBlock, D, P);
          backward_block<T>(u + t0 * D + d0, delta.data() + d0, zbc, dy + t0 * D + d0, v_n + d0, a_n, phi_n,
                            lam_n, nil_n, G.data() + n * D + d0, du + t0 * D + d0, ddelta.data() + d0,
                            dlam_chunk.data() + n * D + d0, steps, kBlock, D, N, P);
        } else {
          recompute_block<T>(v_n + d0, a_n, phi_n, u + t0 * D + d0, delta.data() + d0, zbc, lam_n, nil_n, steps,
                             w, D, P);
          backward_block<T>(u + t0 * D + d0, delta.data() + d0, zbc, dy + t0 * D + d0, v_n + d0, a_n, phi_n,
                            lam_n, nil_n, G.data() + n * D + d0, du + t0 * D + d0, ddelta.data() + d0,
                            dlam_chunk.data() + n * D + d0, steps, w, D, N, P);
        }
      }
      const T* g_phi_n = coef_phi.data() + n * K * D;  // backward_block left g phi there
      for (int64_t k = 0; k < steps; ++k) {
        const int64_t t = t0 + k;
        dproj[t * P + D + n] = dot<T>(g_phi_n + k * D, u + t * D, D);
        dproj[t * P + D + N + n] = dot<T>(dy + t * D, v_n + (k + 1) * D, D);
      }
    }
    for (int64_t i = 0; i < ND; ++i) dlam[i] += dlam_chunk[i];
    for (int64_t k = steps - 1; k >= 0; --k) {
      const int64_t t = t0 + k;
      const T dt_t = dt == nullptr ? T(1) : dt[t];
      T* __restrict__ dz_t = dproj + t * P;
      const T* __restrict__ u_t = u + t * D;
      const T* __restrict__ dy_t = dy + t * D;
      const T* __restrict__ ddelta_k = ddelta.data() + k * D;
      const T* __restrict__ sig_k = sig.data() + k * D;
      const T* __restrict__ sp_k = sp.data() + k * D;
      T ddt_t = T(0);
#pragma omp simd reduction(+ : ddt_t)
      for (int64_t d = 0; d < D; ++d) {
        dz_t[d] = ddelta_k[d] * sig_k[d] * dt_t;
        ddt_t += ddelta_k[d] * sp_k[d];
        dskip[d] += static_cast<double>(dy_t[d] * u_t[d]);
      }
      if (ddt != nullptr) ddt[t] = ddt_t;
    }
  }
  for (int64_t i = 0; i < ND; ++i) dlam_out[i] = static_cast<T>(dlam[i]);
  for (int64_t d = 0; d < D; ++d) dskip_out[d] = static_cast<T>(dskip[d]);
}

// ---------------------------------------------------------------------------------------------------
// The block's convolution stage and output gate (circuitop/ckb.py, Eq. 31 and Eqs. 36-37), each one
// pass over (batch, time, channels) instead of torch's several (pad copy, a multiply-add per tap,
// and in the backward a zeroed buffer, per-tap products and sums; sum, SiLU and product for the gate).

// Causal depthwise convolution of one batch element, taps (K, C) (tap k sees step t - (K - 1) + k):
//   y_t = bias + sum_k taps_k u_{t - (K - 1) + k}   (zero before the first step).
template <typename T>
CIRCUITOP_INLINE void conv_forward_item(const T* __restrict__ u, const T* __restrict__ taps,
                                                             const T* __restrict__ bias, T* __restrict__ y,
                                                             int64_t L, int64_t C, int64_t K) {
  for (int64_t t = 0; t < L; ++t) {
    T* __restrict__ y_t = y + t * C;
    for (int64_t c = 0; c < C; ++c) y_t[c] = bias[c];
    for (int64_t k = std::max<int64_t>(0, K - 1 - t); k < K; ++k) {
      const T* __restrict__ w = taps + k * C;
      const T* __restrict__ u_s = u + (t - (K - 1) + k) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y_t[c] += w[c] * u_s[c];
    }
  }
}

// Its backward: du_s = sum_k taps_k dy_{s + (K - 1) - k};  dtaps_k += dy_t u_{t - (K - 1) + k};
// dbias += dy_t; the sums over time in double (written to this element's dtaps (K, C), dbias (C)).
template <typename T>
CIRCUITOP_INLINE void conv_backward_item(const T* __restrict__ u, const T* __restrict__ taps,
                                                              const T* __restrict__ dy, T* __restrict__ du,
                                                              T* __restrict__ dtaps_out, T* __restrict__ dbias_out,
                                                              int64_t L, int64_t C, int64_t K) {
  std::vector<double> dtaps(K * C, 0.0), dbias(C, 0.0);
  for (int64_t s = 0; s < L; ++s) {
    T* __restrict__ du_s = du + s * C;
    for (int64_t c = 0; c < C; ++c) du_s[c] = T(0);
    for (int64_t k = std::max<int64_t>(0, s + K - L); k < K; ++k) {  // steps t = s + (K - 1) - k < L
      const T* __restrict__ w = taps + k * C;
      const T* __restrict__ dy_t = dy + (s + (K - 1) - k) * C;
      double* __restrict__ acc = dtaps.data() + k * C;
      const T* __restrict__ u_s = u + s * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        du_s[c] += w[c] * dy_t[c];
        acc[c] += static_cast<double>(dy_t[c] * u_s[c]);
      }
    }
    const T* __restrict__ dy_s = dy + s * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dbias[c] += static_cast<double>(dy_s[c]);
  }
  for (int64_t i = 0; i < K * C; ++i) dtaps_out[i] = static_cast<T>(dtaps[i]);
  for (int64_t c = 0; c < C; ++c) dbias_out[c] = static_cast<T>(dbias[c]);
}

// sigmoid(g) from one exp of -|g| (no overflow for any g).
template <typename T>
CIRCUITOP_INLINE T sigmoid(T g) {
  T w, em1;
  exp_expm1<T>(g < T(0) ? g : -g, w, em1);
  return (g >= T(0) ? T(1) : w) / (T(1) + w);
}

// Gate (Eq. 37): out = (sum_r y_r) silu(g) on n values; silu(g) = g sigmoid(g).
template <typename T>
CIRCUITOP_INLINE void gate_forward_range(const T* const* ys, int64_t order, const T* __restrict__ g,
                                                              T* __restrict__ out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) out[i] = ys[0][i];
  for (int64_t r = 1; r < order; ++r) {
    const T* __restrict__ y = ys[r];
    for (int64_t i = begin; i < end; ++i) out[i] += y[i];
  }
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] *= g[i] * sigmoid<T>(g[i]);
}

// Its backward: dtotal = dout silu(g) (the gradient of every y_r), dg = dout total silu'(g) with
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <typename T>
CIRCUITOP_INLINE void gate_backward_range(const T* const* ys, int64_t order, const T* __restrict__ g,
                                                               const T* __restrict__ dout, T* __restrict__ dtotal,
                                                               T* __restrict__ dg, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) dg[i] = ys[0][i];  // dg holds the total until the last loop
  for (int64_t r = 1; r < order; ++r) {
    const T* __restrict__ y = ys[r];
    for (int64_t i = begin; i < end; ++i) dg[i] += y[i];
  }
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const T sig = sigmoid<T>(g[i]);
    dtotal[i] = dout[i] * g[i] * sig;
    dg[i] = dout[i] * dg[i] * sig * (T(1) + g[i] * (T(1) - sig));
  }
}

// Concrete per-dtype entry points, compiled for AVX-512, for AVX2 + FMA and for the baseline, picked at
// run time (every function above is always_inline, so it is compiled into all three). GCC's
// target_clones would need "arch=haswell", which its resolver matches by CPU model, so AMD CPUs got
// the baseline. The AVX-512 build prefers 512-bit vectors (GCC's generic tuning would keep 256): the
// scan's exponentials run a quarter faster with them, also on CPUs that split them in two halves.
enum class Isa { base, avx2, avx512 };
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CIRCUITOP_AVX2 __attribute__((target("avx2,fma")))
#define CIRCUITOP_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,prefer-vector-width=512")))
Isa isa() {
  static const Isa best = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw")
                              ? Isa::avx512
                          : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Isa::avx2
                                                                                             : Isa::base;
  return best;
}
#else
#define CIRCUITOP_AVX2
#define CIRCUITOP_AVX512
Isa isa() { return Isa::base; }
#endif

#define CIRCUITOP_ITEMS(T, SUFFIX, ATTR)                                                                    \
  ATTR void forward_##SUFFIX(const T* u, const T* proj, const T* dt, const T* skip, const Rates<T>& r, T* y,  \
                             T* ckpt, const Dims& s) {                                                      \
    forward_item<T>(u, proj, dt, skip, r, y, ckpt, s);                                                      \
  }                                                                                                         \
  ATTR void backward_##SUFFIX(const T* u, const T* proj, const T* dt, const T* skip, const T* dy,           \
                              const T* ckpt, const Rates<T>& r, T* du, T* dproj, T* ddt, T* dlam, T* dskip, \
                              const Dims& s) {                                                              \
    backward_item<T>(u, proj, dt, skip, dy, ckpt, r, du, dproj, ddt, dlam, dskip, s);                      \
  }                                                                                                         \
  ATTR void conv_forward_##SUFFIX(const T* u, const T* taps, const T* bias, T* y, int64_t L, int64_t C,     \
                                  int64_t K) {                                                              \
    conv_forward_item<T>(u, taps, bias, y, L, C, K);                                                        \
  }                                                                                                         \
  ATTR void conv_backward_##SUFFIX(const T* u, const T* taps, const T* dy, T* du, T* dtaps, T* dbias,      \
                                   int64_t L, int64_t C, int64_t K) {                                       \
    conv_backward_item<T>(u, taps, dy, du, dtaps, dbias, L, C, K);                                          \
  }                                                                                                         \
  ATTR void gate_forward_##SUFFIX(const T* const* ys, int64_t order, const T* g, T* out, int64_t begin,    \
                                  int64_t end) {                                                            \
    gate_forward_range<T>(ys, order, g, out, begin, end);                                                   \
  }                                                                                                         \
  ATTR void gate_backward_##SUFFIX(const T* const* ys, int64_t order, const T* g, const T* dout, T* dtotal, \
                                   T* dg, int64_t begin, int64_t end) {                                     \
    gate_backward_range<T>(ys, order, g, dout, dtotal, dg, begin, end);                                     \
  }
CIRCUITOP_ITEMS(float, f_avx512, CIRCUITOP_AVX512)
CIRCUITOP_ITEMS(float, f_avx2, CIRCUITOP_AVX2)
CIRCUITOP_ITEMS(float, f_base, )
CIRCUITOP_ITEMS(double, d_avx512, CIRCUITOP_AVX512)
CIRCUITOP_ITEMS(double, d_avx2, CIRCUITOP_AVX2)
CIRCUITOP_ITEMS(double, d_base, )
#undef CIRCUITOP_ITEMS

// NAME_one<T>(args...): the widest build of the entry point NAME for T that the CPU runs (isa()).
#define CIRCUITOP_PICK(NAME, P)                                                                             \
  (isa() == Isa::avx512 ? NAME##_##P##_avx512 : isa() == Isa::avx2 ? NAME##_##P##_avx2 : NAME##_##P##_base)
#define CIRCUITOP_DISPATCH(NAME)                                                                            \
  template <typename T, typename... Args>                                                                   \
  void NAME##_one(Args&&... args) {                                                                         \
    if constexpr (std::is_same_v<T, float>) {                                                               \
      CIRCUITOP_PICK(NAME, f)(std::forward<Args>(args)...);                                                 \
    } else {                                                                                                \
      CIRCUITOP_PICK(NAME, d)(std::forward<Args>(args)...);                                                 \
    }                                                                                                       \
  }
CIRCUITOP_DISPATCH(forward)
CIRCUITOP_DISPATCH(backward)
CIRCUITOP_DISPATCH(conv_forward)
CIRCUITOP_DISPATCH(conv_backward)
CIRCUITOP_DISPATCH(gate_forward)
CIRCUITOP_DISPATCH(gate_backward)
#undef CIRCUITOP_DISPATCH
#undef CIRCUITOP_PICK

// Steps per chunk: the recomputed states and coefficients of one chunk, 3 x K x d_state x d_inner
// values, stay within about 384 KiB (L2), between 8 and 256 steps.
int64_t chunk_length(int64_t d_inner, int64_t d_state, int64_t element_size) {
  const int64_t per_step = std::max<int64_t>(1, 3 * d_inner * d_state * element_size);
  return std::max<int64_t>(8, std::min<int64_t>(256, (int64_t(384) << 10) / per_step - 1));
}

Dims check(const torch::Tensor& u, const torch::Tensor& proj, const c10::optional<torch::Tensor>& dt,
           const torch::Tensor& lam, const torch::Tensor& skip) {
  for (const auto* x : {&u, &proj, &lam, &skip}) {
    TORCH_CHECK(x->device().is_cpu() && x->is_contiguous() && x->scalar_type() == u.scalar_type(),
                "circuitop zoh scan: expected contiguous CPU tensors of one dtype");
  }
  TORCH_CHECK(u.dim() == 3 && u.size(1) > 0, "u: expected (batch, time >= 1, d_inner), found ", u.sizes());
  TORCH_CHECK(lam.dim() == 2 && lam.size(0) == u.size(2), "lam: expected (d_inner, d_state), found ", lam.sizes());
  const std::vector<int64_t> row = {u.size(0), u.size(1), u.size(2) + 2 * lam.size(1)};
  TORCH_CHECK(proj.sizes() == row, "proj: expected (batch, time, d_inner + 2 d_state) = ", row, ", found ",
              proj.sizes());
  TORCH_CHECK(skip.dim() == 1 && skip.size(0) == u.size(2), "skip: expected (d_inner,), found ", skip.sizes());
  if (dt.has_value()) {
    TORCH_CHECK(dt->is_contiguous() && dt->device().is_cpu() && dt->scalar_type() == u.scalar_type() &&
                    dt->sizes() == u.sizes().slice(0, 2),
                "dt: expected a contiguous (batch, time) CPU tensor of u's dtype, found ", dt->sizes());
  }
  return {u.size(0), u.size(1), u.size(2), lam.size(1), chunk_length(u.size(2), lam.size(1), u.element_size())};
}

template <typename T>
const T* optional_ptr(const c10::optional<torch::Tensor>& x) {
  return x.has_value() ? x->data_ptr<T>() : nullptr;
}

void check_sequence(const torch::Tensor& x, const torch::Tensor& like, const char* name) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == like.scalar_type() &&
                  x.sizes() == like.sizes(),
              name, ": expected a contiguous CPU tensor of shape ", like.sizes(), " and dtype ", like.scalar_type(),
              ", found ", x.sizes(), " ", x.scalar_type());
}

// Returns (y, checkpoints); checkpoints are (batch, chunks, d_state, d_inner).
std::vector<torch::Tensor> zoh_forward(const torch::Tensor& u, const torch::Tensor& proj,
                                       const c10::optional<torch::Tensor>& dt, const torch::Tensor& lam,
                                       const torch::Tensor& skip) {
  const Dims s = check(u, proj, dt, lam, skip);
  auto y = torch::empty_like(u);
  auto ckpt = torch::empty({s.batch, s.chunks(), s.d_state, s.d_inner}, u.options());
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "circuitop_zoh_forward", [&] {
    const Rates<scalar_t> r(lam.data_ptr<scalar_t>(), s.d_inner, s.d_state);
    const int64_t LD = s.length * s.d_inner, LP = s.length * s.row();
    const int64_t CK = s.chunks() * s.d_state * s.d_inner;
    const scalar_t* dt_ptr = optional_ptr<scalar_t>(dt);
    at::parallel_for(0, s.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        forward_one<scalar_t>(u.data_ptr<scalar_t>() + i * LD, proj.data_ptr<scalar_t>() + i * LP,
                              dt_ptr == nullptr ? nullptr : dt_ptr + i * s.length, skip.data_ptr<scalar_t>(), r,
                              y.data_ptr<scalar_t>() + i * LD, ckpt.data_ptr<scalar_t>() + i * CK, s);
      }
    });
  });
  return {y, ckpt};
}

// Returns (du, dproj, ddt, dlam, dskip) for the gradient dy of y; ddt is empty without dt.
std::vector<torch::Tensor> zoh_backward(const torch::Tensor& u, const torch::Tensor& proj,
                                        const c10::optional<torch::Tensor>& dt, const torch::Tensor& lam,
                                        const torch::Tensor& skip, const torch::Tensor& ckpt,
                                        const torch::Tensor& dy) {
  const Dims s = check(u, proj, dt, lam, skip);
  check_sequence(dy, u, "dy");
  const std::vector<int64_t> ck = {s.batch, s.chunks(), s.d_state, s.d_inner};
  TORCH_CHECK(ckpt.sizes() == ck && ckpt.is_contiguous(), "checkpoints: expected ", ck, ", found ", ckpt.sizes());
  auto du = torch::empty_like(u), dproj = torch::empty_like(proj);
  auto ddt = dt.has_value() ? torch::empty_like(*dt) : torch::Tensor();
  auto dlam = torch::empty({s.batch, s.d_state, s.d_inner}, u.options());
  auto dskip = torch::empty({s.batch, s.d_inner}, u.options());
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "circuitop_zoh_backward", [&] {
    const Rates<scalar_t> r(lam.data_ptr<scalar_t>(), s.d_inner, s.d_state);
    const int64_t LD = s.length * s.d_inner, LP = s.length * s.row(), ND = s.d_state * s.d_inner;
    const int64_t CK = s.chunks() * ND;
    const scalar_t* dt_ptr = optional_ptr<scalar_t>(dt);
    scalar_t* ddt_ptr = dt.has_value() ? ddt.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, s.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        backward_one<scalar_t>(u.data_ptr<scalar_t>() + i * LD, proj.data_ptr<scalar_t>() + i * LP,
                               dt_ptr == nullptr ? nullptr : dt_ptr + i * s.length, skip.data_ptr<scalar_t>(),
                               dy.data_ptr<scalar_t>() + i * LD, ckpt.data_ptr<scalar_t>() + i * CK, r,
                               du.data_ptr<scalar_t>() + i * LD, dproj.data_ptr<scalar_t>() + i * LP,
                               ddt_ptr == nullptr ? nullptr : ddt_ptr + i * s.length,
                               dlam.data_ptr<scalar_t>() + i * ND, dskip.data_ptr<scalar_t>() + i * s.d_inner, s);
      }
    });
  });
  // per-element partial sums: (batch, d_state, d_inner) -> (d_inner, d_state), (batch, d_inner) -> (d_inner)
  return {du, dproj, ddt, dlam.sum(0).t().contiguous(), dskip.sum(0)};
}

void check_conv(const torch::Tensor& u, const torch::Tensor& taps) {
  TORCH_CHECK(u.device().is_cpu() && u.is_contiguous() && u.dim() == 3,
              "u: expected a contiguous CPU tensor (batch, time, channels), found ", u.sizes());
  TORCH_CHECK(taps.dim() == 2 && taps.size(0) == u.size(2) && taps.size(1) >= 1 &&
                  taps.scalar_type() == u.scalar_type() && taps.device().is_cpu(),
              "taps: expected (channels, kernel) = (", u.size(2), ", k) of u's dtype, found ", taps.sizes());
}

// y = causal depthwise convolution of u (batch, time, channels) with taps (channels, kernel) + bias.
torch::Tensor conv_forward(const torch::Tensor& u, const torch::Tensor& taps, const torch::Tensor& bias) {
  check_conv(u, taps);
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == u.size(2) && bias.scalar_type() == u.scalar_type() &&
                  bias.device().is_cpu(), "bias: expected (channels,) = (", u.size(2), ",), found ", bias.sizes());
  const int64_t B = u.size(0), L = u.size(1), C = u.size(2), K = taps.size(1);
  auto tk = taps.t().contiguous();  // (kernel, channels): channels innermost
  auto b = bias.contiguous();
  auto y = torch::empty_like(u);
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "circuitop_conv_forward", [&] {
    at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        conv_forward_one<scalar_t>(u.data_ptr<scalar_t>() + i * L * C, tk.data_ptr<scalar_t>(),
                                   b.data_ptr<scalar_t>(), y.data_ptr<scalar_t>() + i * L * C, L, C, K);
      }
    });
  });
  return y;
}

// Returns (du, dtaps (channels, kernel), dbias) for the gradient dy of y.
std::vector<torch::Tensor> conv_backward(const torch::Tensor& u, const torch::Tensor& taps, const torch::Tensor& dy) {
  check_conv(u, taps);
  check_sequence(dy, u, "dy");
  const int64_t B = u.size(0), L = u.size(1), C = u.size(2), K = taps.size(1);
  auto tk = taps.t().contiguous();
  auto du = torch::empty_like(u);
  auto dtaps = torch::empty({B, K, C}, u.options()), dbias = torch::empty({B, C}, u.options());
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "circuitop_conv_backward", [&] {
    at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        conv_backward_one<scalar_t>(u.data_ptr<scalar_t>() + i * L * C, tk.data_ptr<scalar_t>(),
                                    dy.data_ptr<scalar_t>() + i * L * C, du.data_ptr<scalar_t>() + i * L * C,
                                    dtaps.data_ptr<scalar_t>() + i * K * C, dbias.data_ptr<scalar_t>() + i * C,
                                    L, C, K);
      }
    });
  });
  return {du, dtaps.sum(0).t().contiguous(), dbias.sum(0)};
}

constexpr int64_t kGateGrain = 16384;  // values per task of the elementwise gate

template <typename T>
std::vector<const T*> pointers(const std::vector<torch::Tensor>& ys) {
  std::vector<const T*> out;
  for (const auto& y : ys) out.push_back(y.data_ptr<T>());
  return out;
}

void check_gate(const torch::Tensor& g, const std::vector<torch::Tensor>& ys) {
  TORCH_CHECK(g.device().is_cpu() && g.is_contiguous(), "g: expected a contiguous CPU tensor");
  TORCH_CHECK(!ys.empty(), "ys: expected at least one stage output, found none");
  for (const auto& y : ys) check_sequence(y, g, "ys[r]");
}

// out = (sum_r ys[r]) silu(g), all of g's shape.
torch::Tensor gate_forward(const torch::Tensor& g, const std::vector<torch::Tensor>& ys) {
  check_gate(g, ys);
  auto out = torch::empty_like(g);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "circuitop_gate_forward", [&] {
    const auto y = pointers<scalar_t>(ys);
    at::parallel_for(0, g.numel(), kGateGrain, [&](int64_t begin, int64_t end) {
      gate_forward_one<scalar_t>(y.data(), static_cast<int64_t>(y.size()), g.data_ptr<scalar_t>(),
                                 out.data_ptr<scalar_t>(), begin, end);
    });
  });
  return out;
}

// Returns (dtotal, dg): dtotal is the gradient of every ys[r].
std::vector<torch::Tensor> gate_backward(const torch::Tensor& g, const std::vector<torch::Tensor>& ys,
                                         const torch::Tensor& dout) {
  check_gate(g, ys);
  check_sequence(dout, g, "dout");
  auto dtotal = torch::empty_like(g), dg = torch::empty_like(g);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "circuitop_gate_backward", [&] {
    const auto y = pointers<scalar_t>(ys);
    at::parallel_for(0, g.numel(), kGateGrain, [&](int64_t begin, int64_t end) {
      gate_backward_one<scalar_t>(y.data(), static_cast<int64_t>(y.size()), g.data_ptr<scalar_t>(),
                                  dout.data_ptr<scalar_t>(), dtotal.data_ptr<scalar_t>(), dg.data_ptr<scalar_t>(),
                                  begin, end);
    });
  });
  return {dtotal, dg};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("zoh_forward", &zoh_forward, "(y, checkpoints) of the fused ZOH scan", py::arg("u"), py::arg("proj"),
        py::arg("dt"), py::arg("lam"), py::arg("skip"));
  m.def("zoh_backward", &zoh_backward, "(du, dproj, ddt, dlam, dskip) of the fused ZOH scan", py::arg("u"),
        py::arg("proj"), py::arg("dt"), py::arg("lam"), py::arg("skip"), py::arg("checkpoints"), py::arg("dy"));
  m.def("conv_forward", &conv_forward, "causal depthwise convolution", py::arg("u"), py::arg("taps"),
        py::arg("bias"));
  m.def("conv_backward", &conv_backward, "(du, dtaps, dbias) of the causal depthwise convolution", py::arg("u"),
        py::arg("taps"), py::arg("dy"));
  m.def("gate_forward", &gate_forward, "(sum of ys) * silu(g)", py::arg("g"), py::arg("ys"));
  m.def("gate_backward", &gate_backward, "(dtotal, dg) of the gate", py::arg("g"), py::arg("ys"), py::arg("dout"));
}
