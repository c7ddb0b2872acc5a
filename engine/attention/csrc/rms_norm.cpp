// RMSNorm in one pass per row, as transformers computes it: the statistics in fp32,
// y = x * rsqrt(mean(x^2) + eps) rounded to the input dtype, then weight * y in that
// dtype. torch runs it as six dispatches over the whole tensor (pow, mean, add, rsqrt,
// mul, mul); four norms a layer make that a visible share of a small model's step.
//
// x [..., dim] (last dim contiguous), weight [dim] -> out like x.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

namespace {

template <typename T>
void norm_rows(const T* x, const T* w, T* out, int64_t rows, int64_t dim, float eps) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * dim;
      T* o = out + r * dim;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < dim; ++i) {
        const float v = static_cast<float>(xr[i]);
        sum += v * v;
      }
      const float inv = 1.f / std::sqrt(sum / static_cast<float>(dim) + eps);
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) {
        const T y = static_cast<T>(static_cast<float>(xr[i]) * inv);  // rounded to the dtype first (as HF)
        o[i] = static_cast<T>(static_cast<float>(w[i]) * static_cast<float>(y));
      }
    }
  });
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "rms_norm: weight [dim] must match x's last dimension");
  TORCH_CHECK(x.scalar_type() == weight.scalar_type(), "rms_norm: x and weight must share a dtype");
  const auto xc = x.contiguous();
  const auto wc = weight.contiguous();
  auto out = at::empty_like(xc);
  const int64_t dim = x.size(-1), rows = dim ? xc.numel() / dim : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    norm_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, dim,
                        static_cast<float>(eps));
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(starmesh, m) { m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor"); }

TORCH_LIBRARY_IMPL(starmesh, CPU, m) { m.impl("rms_norm", TORCH_FN(rms_norm)); }
