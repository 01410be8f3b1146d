// LibTorch's C++ API, one function per op, registered as torch.ops.opbench_libtorch.*.
// In the C++ frontend torch::softmax, torch::layer_norm, ... are ATen's at:: functions
// (torch/types.h: `namespace torch { using namespace at; }`); only the Tensor, each op's own
// header and the op registry are included, which keeps the one-time compile short (8 s here,
// 11 s with all of ATen/ATen.h).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/log.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/erf.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/var.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/conv1d.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/fft_fft.h>
#include <ATen/ops/fft_rfft.h>
#include <torch/library.h>

using at::Tensor;

namespace ops {

Tensor matmul(const Tensor& a, const Tensor& b) { return at::matmul(a, b); }
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return at::linear(x, w, b); }
Tensor softmax(const Tensor& x) { return at::softmax(x, -1); }
Tensor log_softmax(const Tensor& x) { return at::log_softmax(x, -1); }
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return at::layer_norm(x, {x.size(-1)}, w, b, eps);
}
Tensor gelu(const Tensor& x, c10::string_view approximate) { return at::gelu(x, approximate); }
Tensor exp(const Tensor& x) { return at::exp(x); }
Tensor log(const Tensor& x) { return at::log(x); }
Tensor tanh(const Tensor& x) { return at::tanh(x); }
Tensor sigmoid(const Tensor& x) { return at::sigmoid(x); }
Tensor erf(const Tensor& x) { return at::erf(x); }
Tensor sum(const Tensor& x) { return at::sum(x); }
Tensor mean(const Tensor& x) { return at::mean(x); }
Tensor var(const Tensor& x) { return at::var(x); }  // correction=1, like torch.var
Tensor logsumexp(const Tensor& x) { return at::logsumexp(x, {0}); }
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b) { return at::conv1d(x, w, b); }
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b) { return at::conv2d(x, w, b); }
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v) { return at::scaled_dot_product_attention(q, k, v); }
Tensor fft(const Tensor& x) { return at::view_as_real(at::fft_fft(x)); }
Tensor rfft(const Tensor& x) { return at::view_as_real(at::fft_rfft(x)); }
int64_t num_threads() { return at::get_num_threads(); }  // the intra-op pool as C++ sees it

}  // namespace ops

TORCH_LIBRARY(opbench_libtorch, m) {
  m.def("matmul(Tensor a, Tensor b) -> Tensor", &ops::matmul);
  m.def("linear(Tensor x, Tensor w, Tensor b) -> Tensor", &ops::linear);
  m.def("softmax(Tensor x) -> Tensor", &ops::softmax);
  m.def("log_softmax(Tensor x) -> Tensor", &ops::log_softmax);
  m.def("layer_norm(Tensor x, Tensor w, Tensor b, float eps) -> Tensor", &ops::layer_norm);
  m.def("gelu(Tensor x, str approximate) -> Tensor", &ops::gelu);
  m.def("exp(Tensor x) -> Tensor", &ops::exp);
  m.def("log(Tensor x) -> Tensor", &ops::log);
  m.def("tanh(Tensor x) -> Tensor", &ops::tanh);
  m.def("sigmoid(Tensor x) -> Tensor", &ops::sigmoid);
  m.def("erf(Tensor x) -> Tensor", &ops::erf);
  m.def("sum(Tensor x) -> Tensor", &ops::sum);
  m.def("mean(Tensor x) -> Tensor", &ops::mean);
  m.def("var(Tensor x) -> Tensor", &ops::var);
  m.def("logsumexp(Tensor x) -> Tensor", &ops::logsumexp);
  m.def("conv1d(Tensor x, Tensor w, Tensor b) -> Tensor", &ops::conv1d);
  m.def("conv2d(Tensor x, Tensor w, Tensor b) -> Tensor", &ops::conv2d);
  m.def("sdpa(Tensor q, Tensor k, Tensor v) -> Tensor", &ops::sdpa);
  m.def("fft(Tensor x) -> Tensor", &ops::fft);
  m.def("rfft(Tensor x) -> Tensor", &ops::rfft);
  m.def("num_threads() -> int", &ops::num_threads);
}
