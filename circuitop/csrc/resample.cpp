// Native CPU kernels of the exact 2x coarsening that hosts run their blocks on
// (operators/models/resample.py): the mean of every 2x2 (1D: 2) cell, the (bi)linear 2x upsampling of
// F.interpolate(scale_factor=2, align_corners=False), and the adjoints of both (their backward passes).
//
// Fields are contiguous (batch, channels, [rows,] cols) tensors, taken as N independent planes. Along
// each axis the upsampling is the stencil
//   out[2i] = 3/4 x[i] + 1/4 x[i-1],   out[2i+1] = 3/4 x[i] + 1/4 x[i+1]   (indices clamped to 0..n-1),
// applied to the columns first, then the rows, as the torch formulation does. One pass over the data
// per call, parallel over planes: the torch formulation needs several strided passes (its stride-2
// writes do not vectorise), which cost more than the block's convolution stage.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace {

// Plane geometry: `rows` = 1 for 1D fields (then only the columns are resampled).
struct Plane {
  int64_t planes, rows, cols;
  bool two_d;
};

Plane plane_of(const torch::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && (x.dim() == 3 || x.dim() == 4),
              "resample: expected a contiguous CPU tensor (batch, channels, [rows,] cols), found shape ", x.sizes());
  const bool two_d = x.dim() == 4;
  return {x.size(0) * x.size(1), two_d ? x.size(2) : 1, x.size(-1), two_d};
}

torch::Tensor empty_plane(const torch::Tensor& x, const Plane& p, int64_t rows, int64_t cols) {
  if (p.two_d) return torch::empty({x.size(0), x.size(1), rows, cols}, x.options());
  return torch::empty({x.size(0), x.size(1), cols}, x.options());
}

template <typename F>
void for_planes(const Plane& p, int64_t work_per_plane, const F& body) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work_per_plane));
  at::parallel_for(0, p.planes, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) body(n);
  });
}

// Columns: a row of n values -> 2n (the stencil above).
template <typename T>
inline void up_row(const T* __restrict__ x, T* __restrict__ out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    out[2 * j] = T(0.75) * x[j] + T(0.25) * x[std::max<int64_t>(j - 1, 0)];
    out[2 * j + 1] = T(0.75) * x[j] + T(0.25) * x[std::min<int64_t>(j + 1, n - 1)];
  }
}

// Its adjoint: a row of 2n values -> n.
template <typename T>
inline void up_row_adjoint(const T* __restrict__ g, T* __restrict__ out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    T v = T(0.75) * (g[2 * j] + g[2 * j + 1]);
    v += j + 1 < n ? T(0.25) * g[2 * j + 2] : T(0.25) * g[2 * n - 1];  // x[j+1] clamped at the end
    v += j > 0 ? T(0.25) * g[2 * j - 1] : T(0.25) * g[0];              // x[j-1] clamped at 0
    out[j] = v;
  }
}

template <typename T>
void pool(const T* x, T* out, const Plane& p) {
  const int64_t h = p.rows / (p.two_d ? 2 : 1), w = p.cols / 2;
  for_planes(p, p.rows * p.cols, [&](int64_t n) {
    const T* plane = x + n * p.rows * p.cols;
    T* o = out + n * h * w;
    for (int64_t i = 0; i < h; ++i) {
      const T* top = plane + (p.two_d ? 2 * i : i) * p.cols;
      const T* bottom = top + (p.two_d ? p.cols : 0);
      for (int64_t j = 0; j < w; ++j) {
        if (p.two_d) {  // rows first, then columns, as the torch formulation
          const T left = (top[2 * j] + bottom[2 * j]) * T(0.5), right = (top[2 * j + 1] + bottom[2 * j + 1]) * T(0.5);
          o[i * w + j] = (left + right) * T(0.5);
        } else {
          o[j] = (top[2 * j] + top[2 * j + 1]) * T(0.5);
        }
      }
    }
  });
}

// Adjoint of pool: every value spread evenly over its cell.
template <typename T>
void pool_adjoint(const T* g, T* out, const Plane& p) {
  const T scale = p.two_d ? T(0.25) : T(0.5);
  const int64_t rows = p.two_d ? 2 * p.rows : 1, cols = 2 * p.cols;
  for_planes(p, rows * cols, [&](int64_t n) {
    const T* plane = g + n * p.rows * p.cols;
    T* o = out + n * rows * cols;
    for (int64_t i = 0; i < p.rows; ++i) {
      T* row = o + (p.two_d ? 2 * i : i) * cols;
      for (int64_t j = 0; j < p.cols; ++j) row[2 * j] = row[2 * j + 1] = scale * plane[i * p.cols + j];
      if (p.two_d) std::copy(row, row + cols, row + cols);
    }
  });
}

// out = up(x), plus base (same shape as out) when given: the residual v + up(delta) in one pass.
template <typename T>
void up(const T* x, const T* base, T* out, const Plane& p) {
  const int64_t h = p.rows, cols = 2 * p.cols, plane_out = (p.two_d ? 2 * h : 1) * cols;
  for_planes(p, 4 * h * p.cols, [&](int64_t n) {
    const T* plane = x + n * h * p.cols;
    T* o = out + n * plane_out;
    const T* b = base == nullptr ? nullptr : base + n * plane_out;
    if (!p.two_d) {
      up_row(plane, o, p.cols);
      if (b != nullptr)
        for (int64_t j = 0; j < cols; ++j) o[j] += b[j];
      return;
    }
    std::vector<T> t(h * cols);  // the plane upsampled along its columns
    for (int64_t i = 0; i < h; ++i) up_row(plane + i * p.cols, t.data() + i * cols, p.cols);
    for (int64_t i = 0; i < h; ++i) {
      const T* mid = t.data() + i * cols;
      const T* above = t.data() + std::max<int64_t>(i - 1, 0) * cols;
      const T* below = t.data() + std::min<int64_t>(i + 1, h - 1) * cols;
      T* even = o + 2 * i * cols;
      T* odd = even + cols;
      for (int64_t j = 0; j < cols; ++j) {
        even[j] = T(0.75) * mid[j] + T(0.25) * above[j];
        odd[j] = T(0.75) * mid[j] + T(0.25) * below[j];
      }
      if (b != nullptr) {
        const T* b_even = b + 2 * i * cols;
        for (int64_t j = 0; j < 2 * cols; ++j) even[j] += b_even[j];  // the even and the odd row
      }
    }
  });
}

// Adjoint of up: rows first (the adjoint of the last step), then columns.
template <typename T>
void up_adjoint(const T* g, T* out, const Plane& p) {
  const int64_t h = p.two_d ? p.rows / 2 : 1, w = p.cols / 2, cols = p.cols;
  for_planes(p, p.rows * p.cols, [&](int64_t n) {
    const T* plane = g + n * p.rows * cols;
    T* o = out + n * h * w;
    if (!p.two_d) return up_row_adjoint(plane, o, w);
    std::vector<T> r(cols);
    for (int64_t i = 0; i < h; ++i) {
      const T* even = plane + 2 * i * cols;
      const T* odd = even + cols;
      const T* next_even = i + 1 < h ? even + 2 * cols : odd;  // clamped: the last odd row itself
      const T* prev_odd = i > 0 ? even - cols : even;           // clamped: the first even row itself
      for (int64_t j = 0; j < cols; ++j)
        r[j] = T(0.75) * (even[j] + odd[j]) + T(0.25) * next_even[j] + T(0.25) * prev_odd[j];
      up_row_adjoint(r.data(), o + i * w, w);
    }
  });
}

enum class Op { kPool, kPoolAdjoint, kUp, kUpAdjoint };

torch::Tensor run(const torch::Tensor& x, Op op, const c10::optional<torch::Tensor>& base = c10::nullopt) {
  const Plane p = plane_of(x);
  const bool halves = op == Op::kPool || op == Op::kUpAdjoint;
  if (halves)
    TORCH_CHECK(p.cols % 2 == 0 && (!p.two_d || p.rows % 2 == 0), "resample: expected even spatial sizes, found ",
                x.sizes());
  const int64_t rows = !p.two_d ? 1 : halves ? p.rows / 2 : 2 * p.rows;
  const int64_t cols = halves ? p.cols / 2 : 2 * p.cols;
  auto out = empty_plane(x, p, rows, cols);
  if (base.has_value())
    TORCH_CHECK(base->is_contiguous() && base->sizes() == out.sizes() && base->scalar_type() == x.scalar_type(),
                "resample: expected add_to contiguous, of x's dtype and of the output's shape ", out.sizes(),
                ", found ", base->sizes());
  if (x.numel() == 0) return base.has_value() ? base->clone() : out;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "circuitop_resample", [&] {
    const scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    switch (op) {
      case Op::kPool: return pool(in, o, p);
      case Op::kPoolAdjoint: return pool_adjoint(in, o, p);
      case Op::kUp: return up(in, base.has_value() ? base->data_ptr<scalar_t>() : nullptr, o, p);
      case Op::kUpAdjoint: return up_adjoint(in, o, p);
    }
  });
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pool2x", [](const torch::Tensor& x) { return run(x, Op::kPool); }, "mean of every 2x2 (1D: 2) cell",
        py::arg("x"));
  m.def("pool2x_adjoint", [](const torch::Tensor& g) { return run(g, Op::kPoolAdjoint); },
        "adjoint of pool2x: every value spread over its cell", py::arg("g"));
  m.def("upsample2x", [](const torch::Tensor& x, const c10::optional<torch::Tensor>& add_to) {
          return run(x, Op::kUp, add_to);
        },
        "(bi)linear 2x upsampling, align_corners=False, plus add_to when given", py::arg("x"), py::arg("add_to") = py::none());
  m.def("upsample2x_adjoint", [](const torch::Tensor& g) { return run(g, Op::kUpAdjoint); },
        "adjoint of upsample2x", py::arg("g"));
}
