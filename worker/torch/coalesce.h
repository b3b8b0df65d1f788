// Internal to traintl::torch: tensors of one dtype and device sent as one contiguous
// buffer by the process groups (the tensor itself when it is alone and contiguous, else a
// flattened copy that is unflattened on completion).
//
// Thread-safety: values; a Coalesced is used by one thread at a time.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/utils/tensor_flatten.h>

namespace traintl {
namespace torch {
namespace detail {

struct Coalesced {
  at::Tensor buffer;
  std::vector<at::Tensor> members;
  bool flattened = false;

  void CopyBack() {
    if (!flattened) return;
    auto parts = ::torch::utils::unflatten_dense_tensors(buffer, members);
    for (size_t i = 0; i < members.size(); ++i) members[i].copy_(parts[i]);
  }
};

inline std::vector<Coalesced> Coalesce(const std::vector<at::Tensor>& tensors, const char* what) {
  std::vector<Coalesced> groups;
  for (const auto& t : tensors) {
    if (!t.defined()) throw std::invalid_argument(std::string(what) + ": undefined tensor");
    if (t.is_sparse()) throw std::invalid_argument(std::string(what) + ": sparse tensor");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Coalesced& g) {
      return g.members[0].scalar_type() == t.scalar_type() && g.members[0].device() == t.device();
    });
    if (it == groups.end()) {
      groups.emplace_back();
      it = groups.end() - 1;
    }
    it->members.push_back(t.detach());
  }
  for (auto& g : groups) {
    if (g.members.size() == 1 && g.members[0].is_contiguous()) {
      g.buffer = g.members[0];
    } else {
      g.buffer = ::torch::utils::flatten_dense_tensors(g.members);
      g.flattened = true;
    }
  }
  return groups;
}

}  // namespace detail
}  // namespace torch
}  // namespace traintl
