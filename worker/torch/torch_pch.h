// The LibTorch headers every traintl::torch translation unit includes, compiled once into a
// precompiled header (CMake target_precompile_headers; TRAINTL_TORCH_PCH, default ON).
// Parsing them is about half of each such TU's compile time (~12 s of ~22 s on the
// reference VM), paid again by every TU without it: the quickstart builds seven of them on
// its critical path. Only the build uses this file; no source includes it.
#pragma once

#include <torch/torch.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/tensor_flatten.h>
