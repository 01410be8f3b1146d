// TorchScript run from C++, as a LibTorch application runs it: a module saved by torch.jit.save is
// loaded with torch::jit::load and called with Module::forward, registered as
// torch.ops.opbench_libtorch.script_*. A second source of the same extension (a fragment of its
// op namespace), so that libtorch.cpp's ops keep their short compile free of the JIT's headers;
// ninja compiles the two sources side by side.
#include <torch/csrc/jit/serialization/import.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

std::mutex modules_lock;
std::unordered_map<int64_t, torch::jit::Module> modules;  // by handle; a Module is a shared reference
int64_t last_handle = 0;

torch::jit::Module module_of(int64_t handle) {
  std::lock_guard<std::mutex> guard(modules_lock);
  auto found = modules.find(handle);
  TORCH_CHECK(found != modules.end(), "no loaded TorchScript module has handle ", handle);
  return found->second;
}

// Loads the saved module as it is (no eval(): a traced graph keeps the mode it was traced in).
int64_t script_load(const std::string& path) {
  torch::jit::Module module = torch::jit::load(path);
  std::lock_guard<std::mutex> guard(modules_lock);
  modules.emplace(++last_handle, std::move(module));
  return last_handle;
}

at::Tensor script_forward(int64_t handle, const std::vector<at::Tensor>& inputs) {
  torch::jit::Module module = module_of(handle);
  at::NoGradGuard no_grad;  // the parameters require grad; the port's outputs are values only
  c10::IValue out = module.forward(std::vector<c10::IValue>(inputs.begin(), inputs.end()));
  TORCH_CHECK(out.isTensor(), "the TorchScript module returned a ", out.tagKind(), ", not a tensor");
  return out.toTensor();
}

void script_free(int64_t handle) {
  std::lock_guard<std::mutex> guard(modules_lock);
  modules.erase(handle);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opbench_libtorch, m) {
  m.def("script_load(str path) -> int", &script_load);
  m.def("script_forward(int handle, Tensor[] inputs) -> Tensor", &script_forward);
  m.def("script_free(int handle) -> ()", &script_free);
}
