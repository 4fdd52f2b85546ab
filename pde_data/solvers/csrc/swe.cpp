// Native CPU kernel of the shallow-water solver (pde_data/shallow_water.py): one whole SSP-RK2 step of
// the MUSCL-HLL finite-volume scheme for every sample, and the per-sample CFL rate. The torch twin is
// shallow_water.make_rhs / ssp_rk2_step and _swe_flux.max_rate; this file repeats their arithmetic
// operation for operation (same formulas, same order, no contraction into FMAs: -ffp-contract=off).
// The two agree to round-off, not bit for bit: torch's square roots come from MKL (not correctly
// rounded), these from the CPU's sqrt instruction.
//
// q (batch, 3, nx, ny) = (h, hu, hv), dx = dy, outflow boundaries (two replicated ghost cells a side):
//   slope_i = limiter(q_i - q_{i-1}, q_{i+1} - q_i),  indices clamped to the grid (= replicated ghosts)
//   face i (between cells i-1 and i): q_L = q_{i-1} + slope_{i-1}/2,  q_R = q_i - slope_i/2
//   F = (S_R F(q_L) - S_L F(q_R) + S_L S_R (q_R - q_L)) / (S_R - S_L, or 1 where that is 0)   (HLL)
//   S_L = min(u_L - c_L, u_R - c_R, 0),  S_R = max(u_L + c_L, u_R + c_R, 0),  c = sqrt(g h),
//   u = q_n / max(h, tiny)
//   L(q) = -((F_{i+1} - F_i) + (G_{j+1} - G_j)) / dx
//   q1 = q + dt L(q),  q_new = (q + q1 + dt L(q1)) / 2                                (SSP-RK2, Heun)
//
// Why here: the torch formulation is ~250 small operations per step, each a pass over a padded or
// face tensor (about 50x the step's memory-traffic floor). Here a stage is one pass over the grid,
// parallel over (sample, row) with at::parallel_for: each chunk of rows keeps the x-face fluxes of its
// previous row, and per row builds the y-face fluxes from a replicate-padded copy of the row, all in
// per-thread buffers of a few rows (no padded or face tensors). The loops over the contiguous axis
// have no branches (limiters and wave speeds are min/max/selects), so GCC vectorises them.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

// Every function below is inlined into the two builds of the entry points at the end (baseline and
// AVX2, picked at run time, as in circuitop/csrc/kirchhoff.cpp), so both get their vector width.
#if defined(_MSC_VER)
#define SWE_INLINE __forceinline
#define __restrict__ __restrict
#else
#define SWE_INLINE inline __attribute__((always_inline))
#endif

struct Grid {
  int64_t batch, nx, ny;
  int64_t plane() const { return nx * ny; }
  int64_t sample() const { return 3 * nx * ny; }
};

// Index i of a row or column clamped to 0..n-1: the replicated ghost cells of the outflow boundary.
SWE_INLINE int64_t clamped(int64_t i, int64_t n) { return std::min(std::max<int64_t>(i, 0), n - 1); }

template <typename T>
struct Physics {
  T g, half_g, tiny, dx;  // g and 0.5 g rounded to T, as torch multiplies by a Python float
  Physics(double g_, double dx_)
      : g(T(g_)), half_g(T(0.5 * g_)), tiny(std::numeric_limits<T>::min()), dx(T(dx_)) {}
};

template <typename T>
SWE_INLINE T sign(T a) {
  return T(a > T(0)) - T(a < T(0));  // torch.sign
}

// _swe_flux._mc and _minmod: ½(sign a + sign b) times the limited magnitude.
template <typename T, bool kMC>
SWE_INLINE T slope(T a, T b) {
  const T s = T(0.5) * (sign(a) + sign(b));
  const T m = std::min(std::abs(a), std::abs(b));
  if constexpr (kMC) return s * std::min(T(2) * m, T(0.5) * std::abs(a + b));
  return s * m;
}

// The two states at the face between cells q0 and q1 (their neighbours qm and q2 give the slopes).
template <typename T, bool kMC>
SWE_INLINE void face_states(T qm, T q0, T q1, T q2, T& left, T& right) {
  const T d1 = q1 - q0;
  left = q0 + T(0.5) * slope<T, kMC>(q0 - qm, d1);
  right = q1 - T(0.5) * slope<T, kMC>(d1, q2 - q1);
}

// HLL flux (h, normal, tangential momentum) from the face states in the same order.
template <typename T>
SWE_INLINE void hll(const Physics<T>& p, T hl, T nl, T tl, T hr, T nr, T tr, T& fh, T& fn, T& ft) {
  const T ul = nl / std::max(hl, p.tiny), ur = nr / std::max(hr, p.tiny);
  const T cl = std::sqrt(p.g * std::max(hl, T(0))), cr = std::sqrt(p.g * std::max(hr, T(0)));
  const T sl = std::min(std::min(ul - cl, ur - cr), T(0));
  const T sr = std::max(std::max(ul + cl, ur + cr), T(0));
  const T width = sr - sl;
  const T w = width > T(0) ? width : T(1);
  const T ss = sl * sr;
  fh = (sr * (hl * ul) - sl * (hr * ur) + ss * (hr - hl)) / w;
  fn = (sr * (nl * ul + p.half_g * hl * hl) - sl * (nr * ur + p.half_g * hr * hr) + ss * (nr - nl)) / w;
  ft = (sr * (tl * ul) - sl * (tr * ur) + ss * (tr - tl)) / w;
}

// Fluxes through the x-face between rows f-1 and f (f = 0..nx) of one sample: out (3, ny).
template <typename T, bool kMC>
SWE_INLINE void x_faces(const T* __restrict__ q, int64_t f, const Grid& s, const Physics<T>& p,
                        T* __restrict__ out) {
  const T *a = q + clamped(f - 2, s.nx) * s.ny, *b = q + clamped(f - 1, s.nx) * s.ny;
  const T *c = q + clamped(f, s.nx) * s.ny, *d = q + clamped(f + 1, s.nx) * s.ny;
  const int64_t P = s.plane(), n = s.ny;
  T *__restrict__ fh = out, *__restrict__ fu = out + n, *__restrict__ fv = out + 2 * n;
  for (int64_t j = 0; j < n; ++j) {
    T hl, hr, ul, ur, vl, vr;
    face_states<T, kMC>(a[j], b[j], c[j], d[j], hl, hr);
    face_states<T, kMC>(a[P + j], b[P + j], c[P + j], d[P + j], ul, ur);
    face_states<T, kMC>(a[2 * P + j], b[2 * P + j], c[2 * P + j], d[2 * P + j], vl, vr);
    hll(p, hl, ul, vl, hr, ur, vr, fh[j], fu[j], fv[j]);  // normal: hu
  }
}

// Fluxes through the ny + 1 y-faces of row i: out (3, ny + 1); pad (3, ny + 4) is scratch.
template <typename T, bool kMC>
SWE_INLINE void y_faces(const T* __restrict__ q, int64_t i, const Grid& s, const Physics<T>& p,
                        T* __restrict__ pad, T* __restrict__ out) {
  const int64_t n = s.ny, m = n + 4, o = n + 1;
  for (int k = 0; k < 3; ++k) {  // the row with two replicated ghost cells each side
    const T* src = q + k * s.plane() + i * n;
    T* dst = pad + k * m;
    dst[0] = dst[1] = src[0];
    std::copy(src, src + n, dst + 2);
    dst[n + 2] = dst[n + 3] = src[n - 1];
  }
  const T *h = pad, *hu = pad + m, *hv = pad + 2 * m;
  T *__restrict__ fh = out, *__restrict__ fu = out + o, *__restrict__ fv = out + 2 * o;
  for (int64_t f = 0; f < o; ++f) {  // face f between cells f-1 and f, i.e. padded f+1 and f+2
    T hl, hr, ul, ur, vl, vr;
    face_states<T, kMC>(h[f], h[f + 1], h[f + 2], h[f + 3], hl, hr);
    face_states<T, kMC>(hu[f], hu[f + 1], hu[f + 2], hu[f + 3], ul, ur);
    face_states<T, kMC>(hv[f], hv[f + 1], hv[f + 2], hv[f + 3], vl, vr);
    hll(p, hl, vl, ul, hr, vr, ur, fh[f], fv[f], fu[f]);  // normal: hv
  }
}

// One stage for the rows [begin, end) of the flattened (sample, row) range:
//   kFinal = false: out = q + dt L(q);   kFinal = true: out = (base + q + dt L(q)) / 2.
template <typename T, bool kMC, bool kFinal>
SWE_INLINE void stage_rows(const T* q, const T* base, T* out, const double* dt, const Grid& s,
                           const Physics<T>& p, int64_t begin, int64_t end) {
  const int64_t n = s.ny;
  std::vector<T> scratch(3 * (n + 4) + 3 * (n + 1) + 6 * n);
  T* pad = scratch.data();
  T* g = pad + 3 * (n + 4);
  T* lower = g + 3 * (n + 1);  // x-face fluxes below the row, then above it
  T* upper = lower + 3 * n;
  int64_t sample = -1;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t b = r / s.nx, i = r % s.nx, at = b * s.sample() + i * n;
    const T step = T(dt[b]);
    if (dt[b] == 0.0) {  // the sample stays as it is (the torch step gives q exactly)
      for (int k = 0; k < 3; ++k) std::copy_n((kFinal ? base : q) + at + k * s.plane(), n, out + at + k * s.plane());
      sample = -1;
      continue;
    }
    const T* qs = q + b * s.sample();
    if (b != sample) x_faces<T, kMC>(qs, i, s, p, lower);
    sample = b;
    x_faces<T, kMC>(qs, i + 1, s, p, upper);
    y_faces<T, kMC>(qs, i, s, p, pad, g);
    for (int k = 0; k < 3; ++k) {
      const T *__restrict__ fx0 = lower + k * n, *__restrict__ fx1 = upper + k * n;
      const T* __restrict__ gy = g + k * (n + 1);
      const T* __restrict__ src = q + at + k * s.plane();
      const T* __restrict__ old = (kFinal ? base : q) + at + k * s.plane();
      T* __restrict__ dst = out + at + k * s.plane();
      for (int64_t j = 0; j < n; ++j) {
        const T rhs = -((fx1[j] - fx0[j]) + (gy[j + 1] - gy[j])) / p.dx;
        if constexpr (kFinal) {
          dst[j] = T(0.5) * ((old[j] + src[j]) + step * rhs);
        } else {
          dst[j] = src[j] + step * rhs;
        }
      }
    }
    std::swap(lower, upper);
  }
}

// The entry points of one stage and of the rates, compiled for AVX2 and for the baseline. GCC's
// target_clones would need "arch=haswell", which its resolver matches by CPU model (AMD CPUs would get
// the baseline). No "fma": the kernel keeps torch's separate roundings of products and sums.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SWE_AVX2 __attribute__((target("avx2")))
bool use_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#else
#define SWE_AVX2
bool use_avx2() { return false; }
#endif

template <typename T, bool kMC, bool kFinal>
SWE_AVX2 void stage_rows_avx2(const T* q, const T* base, T* out, const double* dt, const Grid& s,
                              const Physics<T>& p, int64_t begin, int64_t end) {
  stage_rows<T, kMC, kFinal>(q, base, out, dt, s, p, begin, end);
}

template <typename T, bool kMC, bool kFinal>
void stage_rows_base(const T* q, const T* base, T* out, const double* dt, const Grid& s, const Physics<T>& p,
                     int64_t begin, int64_t end) {
  stage_rows<T, kMC, kFinal>(q, base, out, dt, s, p, begin, end);
}

template <typename T, bool kMC, bool kFinal>
void stage(const T* q, const T* base, T* out, const double* dt, const Grid& s, const Physics<T>& p) {
  const auto rows = use_avx2() ? stage_rows_avx2<T, kMC, kFinal> : stage_rows_base<T, kMC, kFinal>;
  const int64_t grain = std::max<int64_t>(1, 4096 / s.ny);  // rows per task, at least: ~50 us of work
  at::parallel_for(0, s.batch * s.nx, grain, [&](int64_t begin, int64_t end) {
    rows(q, base, out, dt, s, p, begin, end);
  });
}

template <typename T, bool kMC>
void step(const T* q, T* mid, T* out, const double* dt, const Grid& s, const Physics<T>& p) {
  stage<T, kMC, false>(q, nullptr, mid, dt, s, p);
  stage<T, kMC, true>(mid, q, out, dt, s, p);
}

Grid check_state(const torch::Tensor& q) {
  TORCH_CHECK(q.device().is_cpu() && q.is_contiguous() && q.dim() == 4 && q.size(1) == 3 && q.size(2) > 0 &&
                  q.size(3) > 0 && (q.scalar_type() == torch::kFloat32 || q.scalar_type() == torch::kFloat64),
              "q: expected a contiguous CPU float32/float64 tensor (batch, 3, nx, ny), found ", q.sizes(), " ",
              q.scalar_type(), q.is_contiguous() ? "" : " (not contiguous)");
  return {q.size(0), q.size(2), q.size(3)};
}

torch::Tensor ssp_rk2_step(const torch::Tensor& q, const torch::Tensor& dt, double dx, double g,
                           const std::string& limiter) {
  const Grid s = check_state(q);
  TORCH_CHECK(dt.device().is_cpu() && dt.is_contiguous() && dt.scalar_type() == torch::kFloat64 &&
                  dt.dim() == 1 && dt.size(0) == s.batch,
              "dt: expected a contiguous CPU float64 tensor (batch,) = (", s.batch, "), found ", dt.sizes(), " ",
              dt.scalar_type());
  TORCH_CHECK(limiter == "mc" || limiter == "minmod", "limiter: expected 'mc' or 'minmod', found '", limiter, "'");
  auto mid = torch::empty_like(q), out = torch::empty_like(q);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "swe_ssp_rk2_step", [&] {
    const Physics<scalar_t> p(g, dx);
    const scalar_t* in = q.data_ptr<scalar_t>();
    auto* m = mid.data_ptr<scalar_t>();
    auto* o = out.data_ptr<scalar_t>();
    if (limiter == "mc") {
      step<scalar_t, true>(in, m, o, dt.data_ptr<double>(), s, p);
    } else {
      step<scalar_t, false>(in, m, o, dt.data_ptr<double>(), s, p);
    }
  });
  return out;
}

// Per sample: max over cells of (|hu / h| + |hv / h| + 2 c) / dx, NaN when any cell's rate is NaN
// (as torch's amax); h is clamped at tiny as in _swe_flux.max_rate.
template <typename T>
SWE_INLINE T sample_rate(const T* q, const Grid& s, const Physics<T>& p, T* __restrict__ rate) {
  T best = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < s.nx; ++i) {
    const T *__restrict__ h = q + i * s.ny, *__restrict__ hu = h + s.plane(), *__restrict__ hv = h + 2 * s.plane();
    for (int64_t j = 0; j < s.ny; ++j) {
      const T inv_h = T(1) / std::max(h[j], p.tiny);
      const T c = std::sqrt(p.g * std::max(h[j], T(0)));
      rate[j] = (std::abs(hu[j] * inv_h) + std::abs(hv[j] * inv_h) + T(2) * c) / p.dx;
    }
    for (int64_t j = 0; j < s.ny; ++j) best = (rate[j] > best || std::isnan(rate[j])) ? rate[j] : best;
  }
  return best;
}

template <typename T>
SWE_AVX2 T sample_rate_avx2(const T* q, const Grid& s, const Physics<T>& p, T* rate) {
  return sample_rate(q, s, p, rate);
}

template <typename T>
T sample_rate_base(const T* q, const Grid& s, const Physics<T>& p, T* rate) {
  return sample_rate(q, s, p, rate);
}

template <typename T>
void rates(const T* q, T* out, const Grid& s, const Physics<T>& p) {
  const auto one = use_avx2() ? sample_rate_avx2<T> : sample_rate_base<T>;
  at::parallel_for(0, s.batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> rate(s.ny);
    for (int64_t b = begin; b < end; ++b) out[b] = one(q + b * s.sample(), s, p, rate.data());
  });
}

torch::Tensor max_rate(const torch::Tensor& q, double dx, double g) {
  const Grid s = check_state(q);
  auto out = torch::empty({s.batch}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "swe_max_rate", [&] {
    rates<scalar_t>(q.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), s, Physics<scalar_t>(g, dx));
  });
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("ssp_rk2_step", &ssp_rk2_step, "one SSP-RK2 step of the MUSCL-HLL scheme; dt = 0 keeps a sample",
        py::arg("q"), py::arg("dt"), py::arg("dx"), py::arg("g"), py::arg("limiter"));
  m.def("max_rate", &max_rate, "per-sample max of (|u| + c)/dx + (|v| + c)/dx", py::arg("q"), py::arg("dx"),
        py::arg("g"));
}
