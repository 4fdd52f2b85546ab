// Native CPU kernels for circuitop.selective_scan: h_t = a_t * h_{t-1} + b_t along dim 1 of
// contiguous (batch, time, channels) tensors, and its reverse-scan adjoint.
//
// Exact sequential arithmetic (the same operations, in the same order, as the reference loop).
// Work is split over (batch, block of channels) work items, which threads take in turn; within a work
// item the loop runs over time outside and over a contiguous run of channels inside, so the compiler
// vectorises the inner loop (the channels of one step are independent).
//
// Large scans are memory-bound (forward + backward touch a, b, h, grad_h, g and grad_a: 6 tensors
// that together exceed the last-level cache), so the kernels aim at memory traffic: the backward
// takes the work items in the reverse order of the forward (its first items find a and h still in
// the cache), writes its two large outputs with streaming stores (no read-for-ownership, and they do
// not evict a and h), prefetches its descending streams, and pool buffers sit on huge pages.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/functions/basic_ops.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CIRCUITOP_HAVE_STREAM 1
#else
#define CIRCUITOP_HAVE_STREAM 0
#endif
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace {

// A small cache of large output buffers. Fresh memory from the system costs a page fault per 4 KiB
// page on first touch, which on some machines takes longer than the scan itself (a fresh 32 MB
// output: ~20 ms against ~7 ms of scanning). Outputs of at least kPoolMin bytes are therefore
// allocated here and, when their tensors die, kept (up to kPoolCap bytes in all) for the next call
// of the same size, as training repeats the same shapes.
constexpr size_t kPoolMin = size_t(1) << 20;
constexpr size_t kPoolCap = size_t(256) << 20;

struct Pool {
  std::mutex mutex;
  std::multimap<size_t, void*> free;  // size -> buffer
  std::map<void*, size_t> sizes;      // every live or cached buffer -> size
  size_t cached = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: tensors may die after static destructors ran
  return *p;
}

void pool_release(void* ptr) {
  Pool& p = pool();
  std::lock_guard<std::mutex> guard(p.mutex);
  const size_t bytes = p.sizes.at(ptr);
  if (p.cached + bytes <= kPoolCap) {
    p.free.emplace(bytes, ptr);
    p.cached += bytes;
  } else {
    p.sizes.erase(ptr);
    std::free(ptr);
  }
}

torch::Tensor empty_output(const torch::Tensor& like) {
  const size_t bytes = size_t(like.numel()) * like.element_size();
  if (bytes < kPoolMin) return torch::empty_like(like, at::MemoryFormat::Contiguous);
  Pool& p = pool();
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> guard(p.mutex);
    auto it = p.free.find(bytes);
    if (it != p.free.end()) {
      ptr = it->second;
      p.free.erase(it);
      p.cached -= bytes;
    }
  }
  if (ptr == nullptr) {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    ptr = std::aligned_alloc(kHuge, rounded);
    TORCH_CHECK(ptr != nullptr, "circuitop scan: out of memory allocating ", bytes, " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(ptr, rounded, MADV_HUGEPAGE);  // advisory: failure only means 4 KiB pages
#endif
    std::lock_guard<std::mutex> guard(p.mutex);
    p.sizes[ptr] = bytes;
  }
  return torch::from_blob(ptr, like.sizes(), pool_release, like.options());
}

constexpr int64_t kBlock = 256;  // channels per work item
constexpr int64_t kPrefetchRows = 32;  // the backward prefetches a, grad_h and h this many steps ahead

// Work items (batch element, channel block) and a grain that keeps tiny problems on one thread.
struct Split {
  int64_t blocks, items, grain;
};

Split split(int64_t batch, int64_t length, int64_t channels) {
  const int64_t blocks = std::max<int64_t>(1, (channels + kBlock - 1) / kBlock);
  const int64_t per_item = std::max<int64_t>(1, length * std::min(channels, kBlock));
  const int64_t grain = std::max<int64_t>(1, 32768 / per_item);
  return {blocks, batch * blocks, grain};
}

// Runs body(item) for every item in [0, items): ascending, or descending when `reverse`. Threads take
// the next item from a shared counter (so a thread slowed by other work takes fewer items, and the
// items run in about the global order, which keeps the data of the last items of the forward in the
// caches for the first items of the backward).
template <typename F>
void for_items(const Split& s, bool reverse, const F& body) {
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), s.items / s.grain));
  if (tasks == 1) {
    for (int64_t i = 0; i < s.items; ++i) body(reverse ? s.items - 1 - i : i);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, tasks, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < s.items;
         i = next.fetch_add(1, std::memory_order_relaxed))
      body(reverse ? s.items - 1 - i : i);
  });
}

// One work item: channels [c0, c0 + width) of batch element n, over all time steps.
template <typename T>
inline __attribute__((always_inline)) void forward_item_impl(const T* __restrict__ a, const T* __restrict__ b,
                                                             const T* __restrict__ init, T* __restrict__ h,
                                                             int64_t length, int64_t channels, int64_t width) {
  const T* __restrict__ a_t = a;
  const T* __restrict__ b_t = b;
  T* __restrict__ h_t = h;
  if (init != nullptr) {
    for (int64_t c = 0; c < width; ++c) h_t[c] = a_t[c] * init[c] + b_t[c];
  } else {
    for (int64_t c = 0; c < width; ++c) h_t[c] = b_t[c];
  }
  for (int64_t t = 1; t < length; ++t) {
    const T* __restrict__ prev = h_t;
    a_t += channels;
    b_t += channels;
    h_t += channels;
    for (int64_t c = 0; c < width; ++c) h_t[c] = a_t[c] * prev[c] + b_t[c];
  }
}

// Copies `count` elements from the 16-byte aligned `src` to `dst`: with streaming (non-temporal) stores
// when Stream (dst 16-byte aligned, whole 16-byte chunks; the tail with plain stores), else plainly.
template <bool Stream, typename T>
inline __attribute__((always_inline)) void store_row(T* __restrict__ dst, const T* __restrict__ src, int64_t count) {
#if CIRCUITOP_HAVE_STREAM
  if (Stream) {
    const int64_t bytes = count * int64_t(sizeof(T)), whole = bytes / 16 * 16;
    const char* s = reinterpret_cast<const char*>(src);
    char* d = reinterpret_cast<char*>(dst);
    for (int64_t i = 0; i < whole; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_load_si128(reinterpret_cast<const __m128i*>(s + i)));
    if (whole != bytes) std::memcpy(d + whole, s + whole, size_t(bytes - whole));
    return;
  }
#endif
  for (int64_t c = 0; c < count; ++c) dst[c] = src[c];
}

// Software prefetch for the backward at step t: the rows of grad_h and a kPrefetchRows steps ahead
// (and of h one step before them, when h is given), `width` channels; the hardware's prefetcher
// falls behind on a busy machine.
template <typename T>
inline __attribute__((always_inline)) void prefetch_ahead(const T* a, const T* h, const T* grad_h, int64_t t,
                                                          int64_t channels, int64_t width) {
  if (t <= kPrefetchRows) return;
  const int64_t pf = (t - kPrefetchRows) * channels;
  for (int64_t c = 0; c < width; c += 64 / int64_t(sizeof(T))) {
    __builtin_prefetch(grad_h + pf + c, 0, 3);
    __builtin_prefetch(a + pf + c, 0, 3);
    if (h != nullptr) __builtin_prefetch(h + pf - channels + c, 0, 3);
  }
}

// Reverse pass of one work item: g_t = grad_h_t + a_{t+1} g_{t+1}; with grad_a also
// grad_a_t = g_t h_{t-1} (h_{-1} = init or 0) and grad_init = a_0 g_0. The running g_t lives in a
// local row (width <= kBlock), so the outputs g and grad_a are only written, never read back: with
// Stream they bypass the caches (no read-for-ownership of the output lines, and the caches keep a
// and h, which the forward has just touched).
template <bool Stream, typename T>
inline __attribute__((always_inline)) void backward_item_impl(
    const T* __restrict__ a, const T* __restrict__ h, const T* __restrict__ init, const T* __restrict__ grad_h,
    T* __restrict__ g, T* __restrict__ grad_a, T* __restrict__ grad_init, int64_t length, int64_t channels,
    int64_t width) {
  alignas(64) T g_row[kBlock];
  alignas(64) T ga_row[kBlock];
  {
    const int64_t off = (length - 1) * channels;
    const T* __restrict__ gh = grad_h + off;
    for (int64_t c = 0; c < width; ++c) g_row[c] = gh[c];
  }
  for (int64_t t = length - 1; t >= 0; --t) {
    const int64_t off = t * channels;
    if (t != length - 1) {
      const T* __restrict__ gh = grad_h + off;
      const T* __restrict__ a_next = a + off + channels;
      prefetch_ahead(a, h, grad_h, t, channels, width);
      for (int64_t c = 0; c < width; ++c) g_row[c] = gh[c] + a_next[c] * g_row[c];
    }
    store_row<Stream>(g + off, g_row, width);
    if (grad_a == nullptr || t == 0) continue;
    const T* __restrict__ h_prev = h + off - channels;
    for (int64_t c = 0; c < width; ++c) ga_row[c] = g_row[c] * h_prev[c];
    store_row<Stream>(grad_a + off, ga_row, width);
  }
  if (grad_a == nullptr) return;
  if (init != nullptr) {
    for (int64_t c = 0; c < width; ++c) {
      ga_row[c] = g_row[c] * init[c];
      grad_init[c] = a[c] * g_row[c];
    }
  } else {
    for (int64_t c = 0; c < width; ++c) ga_row[c] = T(0);
  }
  store_row<Stream>(grad_a, ga_row, width);
}

// Register-resident variants for a work item of exactly kRegVecs vectors of channels (64 float or 32
// double channels: the common "channels = 64" case): the running state stays in registers across
// the time loop instead of being stored and re-loaded every step. Same operations, same order.
constexpr int kRegVecs = 8;
template <typename T> struct Vec;
template <> struct Vec<float> { typedef float type __attribute__((vector_size(32))); };
template <> struct Vec<double> { typedef double type __attribute__((vector_size(32))); };
template <typename T> constexpr int64_t lanes() { return int64_t(32 / sizeof(T)); }
template <typename T> constexpr int64_t reg_width() { return kRegVecs * lanes<T>(); }

template <typename T>
inline __attribute__((always_inline)) typename Vec<T>::type vload(const T* p) {
  typename Vec<T>::type v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

template <bool Stream, typename T>
inline __attribute__((always_inline)) void vstore(T* p, typename Vec<T>::type v) {
#if CIRCUITOP_HAVE_STREAM
  if (Stream) {
    __m128i lo, hi;
    __builtin_memcpy(&lo, &v, 16);
    __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + 16, 16);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), lo);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p) + 1, hi);
    return;
  }
#endif
  __builtin_memcpy(p, &v, sizeof(v));
}

template <typename T>
inline __attribute__((always_inline)) void forward_item_reg(const T* __restrict__ a, const T* __restrict__ b,
                                                            const T* __restrict__ init, T* __restrict__ h,
                                                            int64_t length, int64_t channels) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = lanes<T>();
  V s[kRegVecs];
  for (int j = 0; j < kRegVecs; ++j) {
    s[j] = init != nullptr ? vload(a + j * L) * vload(init + j * L) + vload(b + j * L) : vload(b + j * L);
    vstore<false>(h + j * L, s[j]);
  }
  for (int64_t t = 1; t < length; ++t) {
    const int64_t off = t * channels;
    for (int j = 0; j < kRegVecs; ++j) {
      s[j] = vload(a + off + j * L) * s[j] + vload(b + off + j * L);
      vstore<false>(h + off + j * L, s[j]);
    }
  }
}

template <bool Stream, typename T>
inline __attribute__((always_inline)) void backward_item_reg(
    const T* __restrict__ a, const T* __restrict__ h, const T* __restrict__ init, const T* __restrict__ grad_h,
    T* __restrict__ g, T* __restrict__ grad_a, T* __restrict__ grad_init, int64_t length, int64_t channels) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = lanes<T>();
  V s[kRegVecs];
  for (int j = 0; j < kRegVecs; ++j) s[j] = vload(grad_h + (length - 1) * channels + j * L);
  for (int64_t t = length - 1; t >= 0; --t) {
    const int64_t off = t * channels;
    if (t != length - 1) {
      prefetch_ahead(a, h, grad_h, t, channels, reg_width<T>());
      for (int j = 0; j < kRegVecs; ++j) s[j] = vload(grad_h + off + j * L) + vload(a + off + channels + j * L) * s[j];
    }
    for (int j = 0; j < kRegVecs; ++j) vstore<Stream>(g + off + j * L, s[j]);
    if (grad_a == nullptr || t == 0) continue;
    for (int j = 0; j < kRegVecs; ++j) vstore<Stream>(grad_a + off + j * L, s[j] * vload(h + off - channels + j * L));
  }
  if (grad_a == nullptr) return;
  for (int j = 0; j < kRegVecs; ++j) {
    if (init != nullptr) {
      vstore<Stream>(grad_a + j * L, s[j] * vload(init + j * L));
      const V gi = vload(a + j * L) * s[j];
      __builtin_memcpy(grad_init + j * L, &gi, sizeof(V));
    } else {
      vstore<Stream>(grad_a + j * L, V{});
    }
  }
}

// Concrete per-dtype items, cloned for AVX2 and baseline x86-64 (picked at load time; no FMA, so the
// arithmetic stays one multiply and one add per step, as in the reference).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CIRCUITOP_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CIRCUITOP_CLONES
#endif

#define CIRCUITOP_ITEMS(T)                                                                                   \
  CIRCUITOP_CLONES void forward_item(const T* a, const T* b, const T* init, T* h, int64_t length,          \
                                     int64_t channels, int64_t width) {                                    \
    if (width == reg_width<T>())                                                                           \
      forward_item_reg<T>(a, b, init, h, length, channels);                                                \
    else                                                                                                   \
      forward_item_impl<T>(a, b, init, h, length, channels, width);                                       \
  }                                                                                                        \
  CIRCUITOP_CLONES void backward_item(const T* a, const T* h, const T* init, const T* grad_h, T* g,         \
                                      T* grad_a, T* grad_init, int64_t length, int64_t channels,           \
                                      int64_t width, bool stream) {                                        \
    if (width == reg_width<T>() && stream)                                                                 \
      backward_item_reg<true, T>(a, h, init, grad_h, g, grad_a, grad_init, length, channels);              \
    else if (width == reg_width<T>())                                                                      \
      backward_item_reg<false, T>(a, h, init, grad_h, g, grad_a, grad_init, length, channels);             \
    else if (stream)                                                                                       \
      backward_item_impl<true, T>(a, h, init, grad_h, g, grad_a, grad_init, length, channels, width);      \
    else                                                                                                   \
      backward_item_impl<false, T>(a, h, init, grad_h, g, grad_a, grad_init, length, channels, width);     \
  }
CIRCUITOP_ITEMS(float)
CIRCUITOP_ITEMS(double)
#undef CIRCUITOP_ITEMS

// Streaming stores for an output of `numel` elements: only on x86, only for outputs too large to stay
// in the caches anyway (kStreamMin bytes) and only when every row starts 16-byte aligned.
constexpr size_t kStreamMin = size_t(4 << 20);
template <typename T>
bool use_stream(const T* out, int64_t channels, int64_t numel) {
  return CIRCUITOP_HAVE_STREAM && size_t(numel) * sizeof(T) >= kStreamMin &&
         reinterpret_cast<uintptr_t>(out) % 16 == 0 && (channels * int64_t(sizeof(T))) % 16 == 0;
}

template <typename T>
void forward_kernel(const T* a, const T* b, const T* h0, T* h, int64_t batch, int64_t length, int64_t channels) {
  const Split s = split(batch, length, channels);
  for_items(s, false, [&](int64_t item) {
    const int64_t n = item / s.blocks, c0 = (item % s.blocks) * kBlock;
    const int64_t width = std::min(kBlock, channels - c0);
    const int64_t base = n * length * channels + c0;
    forward_item(a + base, b + base, h0 == nullptr ? nullptr : h0 + n * channels + c0, h + base, length,
                 channels, width);
  });
}

// g_t = grad_h_t + a_{t+1} g_{t+1}; with grad_a given also grad_a_t = g_t h_{t-1} (h_{-1} = h0 or 0)
// and grad_h0 = a_0 g_0.
template <typename T>
void backward_kernel(const T* a, const T* h, const T* h0, const T* grad_h, T* g, T* grad_a, T* grad_h0,
                     int64_t batch, int64_t length, int64_t channels) {
  const Split s = split(batch, length, channels);
  const bool stream = use_stream(g, channels, batch * length * channels) &&
                      (grad_a == nullptr || use_stream(grad_a, channels, batch * length * channels));
  for_items(s, true, [&](int64_t item) {
    const int64_t n = item / s.blocks, c0 = (item % s.blocks) * kBlock;
    const int64_t width = std::min(kBlock, channels - c0);
    const int64_t base = n * length * channels + c0, state = n * channels + c0;
    backward_item(a + base, h == nullptr ? nullptr : h + base, h0 == nullptr ? nullptr : h0 + state,
                  grad_h + base, g + base, grad_a == nullptr ? nullptr : grad_a + base,
                  grad_h0 == nullptr ? nullptr : grad_h0 + state, length, channels, width, stream);
#if CIRCUITOP_HAVE_STREAM
    if (stream) _mm_sfence();  // order this item's streaming stores before the results are used
#endif
  });
}

void check3(const torch::Tensor& x, const char* name) {
  TORCH_CHECK(x.device().is_cpu(), name, ": expected a CPU tensor");
  TORCH_CHECK(x.dim() == 3, name, ": expected (batch, time, channels)");
  TORCH_CHECK(x.is_contiguous(), name, ": expected a contiguous tensor");
}

void check_h0(const c10::optional<torch::Tensor>& h0, const torch::Tensor& a) {
  if (!h0.has_value()) return;
  TORCH_CHECK(h0->is_contiguous() && h0->dim() == 2 && h0->size(0) == a.size(0) &&
                  h0->size(1) == a.size(2) && h0->scalar_type() == a.scalar_type(),
              "h0: expected a contiguous (batch, channels) tensor of a's dtype");
}

torch::Tensor scan_forward(const torch::Tensor& a, const torch::Tensor& b,
                           const c10::optional<torch::Tensor>& h0) {
  check3(a, "a");
  check3(b, "b");
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), "b: expected a's shape and dtype");
  check_h0(h0, a);
  auto h = empty_output(a);
  if (a.numel() == 0) return h;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "circuitop_scan_forward", [&] {
    forward_kernel<scalar_t>(a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(),
                             h0.has_value() ? h0->data_ptr<scalar_t>() : nullptr, h.data_ptr<scalar_t>(),
                             a.size(0), a.size(1), a.size(2));
  });
  return h;
}

// Returns (grad_a, grad_b, grad_h0); grad_h0 is empty when h0 is None.
std::vector<torch::Tensor> scan_backward(const torch::Tensor& a, const torch::Tensor& h,
                                         const c10::optional<torch::Tensor>& h0,
                                         const torch::Tensor& grad_h) {
  check3(a, "a");
  check3(h, "h");
  check3(grad_h, "grad_h");
  TORCH_CHECK(a.sizes() == h.sizes() && a.sizes() == grad_h.sizes(), "h, grad_h: expected a's shape");
  TORCH_CHECK(a.scalar_type() == h.scalar_type() && a.scalar_type() == grad_h.scalar_type(),
              "h, grad_h: expected a's dtype");
  check_h0(h0, a);
  auto g = empty_output(a);
  auto grad_a = empty_output(a);
  auto grad_h0 = h0.has_value() ? torch::empty_like(*h0) : torch::Tensor();
  if (a.numel() == 0) {
    if (h0.has_value()) grad_h0.zero_();
    return {grad_a, g, grad_h0};
  }
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "circuitop_scan_backward", [&] {
    backward_kernel<scalar_t>(a.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(),
                              h0.has_value() ? h0->data_ptr<scalar_t>() : nullptr,
                              grad_h.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(), grad_a.data_ptr<scalar_t>(),
                              h0.has_value() ? grad_h0.data_ptr<scalar_t>() : nullptr, a.size(0), a.size(1),
                              a.size(2));
  });
  return {grad_a, g, grad_h0};
}

// g_t = grad_h_t + a_{t+1} g_{t+1} only (the adjoint states).
torch::Tensor scan_reverse(const torch::Tensor& a, const torch::Tensor& grad_h) {
  check3(a, "a");
  check3(grad_h, "grad_h");
  TORCH_CHECK(a.sizes() == grad_h.sizes() && a.scalar_type() == grad_h.scalar_type(),
              "grad_h: expected a's shape and dtype");
  auto g = empty_output(a);
  if (a.numel() == 0) return g;
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "circuitop_scan_reverse", [&] {
    backward_kernel<scalar_t>(a.data_ptr<scalar_t>(), nullptr, nullptr, grad_h.data_ptr<scalar_t>(),
                              g.data_ptr<scalar_t>(), nullptr, nullptr, a.size(0), a.size(1), a.size(2));
  });
  return g;
}

// The scan as an autograd function of (batch, time, *channels) tensors, for selective_scan: a C++
// node, so that the backward runs without the Python interpreter. Between two memory-bound kernels a
// Python autograd.Function's bookkeeping ran on cold caches and cost 0.3-0.5 ms at 8 x 4096 x 64
// (a fifth of the scan; bench/bench_scan.py).
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// (batch, time, *channels) -> contiguous (batch, time, channels); any size zero included.
torch::Tensor as_sequence(const torch::Tensor& x) {
  const auto s = x.sizes();
  const int64_t channels = c10::multiply_integers(s.begin() + 2, s.end());
  return x.reshape({s[0], s[1], channels}).contiguous();
}

// Once differentiable: when the backward runs under create_graph, the gradients get a node that raises
// when differentiated again (the native backward is not itself differentiable). Stricter than
// Python's @once_differentiable, which adds that node only when the incoming gradient requires grad
// and otherwise returns gradients that silently ignore their dependence on a, b and h0 (a second
// derivative of zero); here any attempt at one raises.
variable_list once_differentiable(variable_list grads, bool recorded) {
  if (!recorded) return grads;
  variable_list leaves;
  for (const auto& g : grads) leaves.push_back(g.defined() ? g.detach().requires_grad_(true) : torch::Tensor());
  torch::autograd::DelayedError error(
      "circuitop: the gradient of selective_scan cannot be differentiated again (no double backward)",
      int64_t(leaves.size()));
  return error.apply(std::move(leaves));
}

struct NativeScanFn : public torch::autograd::Function<NativeScanFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const c10::optional<torch::Tensor>& h0) {
    const auto a3 = as_sequence(a);
    c10::optional<torch::Tensor> h03;
    if (h0.has_value()) h03 = h0->reshape({a3.size(0), a3.size(2)}).contiguous();
    auto h = scan_forward(a3, as_sequence(b), h03);
    ctx->save_for_backward({a3, h, h03.value_or(torch::Tensor())});
    ctx->saved_data["shape"] = a.sizes();
    return h.view(a.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool recorded = torch::GradMode::is_enabled();  // create_graph
    torch::NoGradGuard no_grad;  // as under @once_differentiable: nothing below is recorded
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &a = saved[0], &h = saved[1], &h0 = saved[2];
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const auto grad_h = grads[0].reshape(a.sizes()).contiguous();
    const bool want_h0 = h0.defined() && ctx->needs_input_grad(2);  // edge 2 exists only with h0
    torch::Tensor grad_a, g, grad_h0;
    if (ctx->needs_input_grad(0) || want_h0) {
      auto r = scan_backward(a, h, h0.defined() ? c10::optional<torch::Tensor>(h0) : c10::nullopt, grad_h);
      if (ctx->needs_input_grad(0)) grad_a = r[0].view(shape);
      g = r[1];
      if (want_h0) {
        auto state = shape;
        state.erase(state.begin() + 1);
        grad_h0 = r[2].view(state);
      }
    } else {
      g = scan_reverse(a, grad_h);
    }
    variable_list out{grad_a, g.view(shape), grad_h0};
    torch::AutoGradMode recording(recorded);  // the error node is only made with grad mode on
    return once_differentiable(std::move(out), recorded);
  }
};

torch::Tensor scan(const torch::Tensor& a, const torch::Tensor& b, const c10::optional<torch::Tensor>& h0) {
  TORCH_CHECK(a.dim() >= 2 && a.sizes() == b.sizes(), "a, b: expected one shape (batch, time, ...), found ",
              a.sizes(), " and ", b.sizes());
  return NativeScanFn::apply(a, b, h0);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scan", &scan, "h_t = a_t h_{t-1} + b_t on (batch, time, *channels), differentiable", py::arg("a"),
        py::arg("b"), py::arg("h0"));
  m.def("forward", &scan_forward, "h_t = a_t h_{t-1} + b_t", py::arg("a"), py::arg("b"), py::arg("h0"));
  m.def("reverse", &scan_reverse, "g_t = grad_h_t + a_{t+1} g_{t+1}", py::arg("a"), py::arg("grad_h"));
}
