// libtraintl_nccl: the NCCL communicator over raw device buffers. The GPU cases run only
// where a CUDA device is visible (they skip here, saying so); the others check that the
// library links and that its failures are messages, not crashes.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "worker/torch/nccl/nccl_communicator.h"

using traintl::nccl::Communicator;
using traintl::nccl::DataType;
using traintl::nccl::ReduceOp;

namespace {

bool HaveGpu() {
  if (traintl_nccl_device_count() > 0) return true;
  WARN("skipped: no CUDA device visible (this machine has NCCL to link, no GPU to run it)");
  return false;
}

std::unique_ptr<Communicator> SingleRank(int64_t timeout_ms = 10000) {
  unsigned char id[traintl::nccl::kUniqueIdBytes];
  char err[512] = {0};
  REQUIRE(traintl_nccl_unique_id(id, err, sizeof err) == 0);
  Communicator* comm = nullptr;
  INFO(err);
  REQUIRE(traintl_nccl_create(0, 1, id, 0, timeout_ms, &comm, err, sizeof err) == 0);
  return std::unique_ptr<Communicator>(comm);
}

}  // namespace

TEST_CASE("the library links and reports its ABI and devices") {
  CHECK(traintl_nccl_abi_version() == traintl::nccl::kAbiVersion);
  CHECK(traintl_nccl_device_count() >= 0);
}

TEST_CASE("joining on a device that is not there fails with a message") {
  const int missing = traintl_nccl_device_count() + 3;
  unsigned char id[traintl::nccl::kUniqueIdBytes] = {0};
  char err[512] = {0};
  Communicator* comm = nullptr;
  CHECK(traintl_nccl_create(0, 1, id, missing, 1000, &comm, err, sizeof err) == -1);
  CHECK(comm == nullptr);
  CHECK(std::string(err).find("cudaSetDevice") != std::string::npos);
}

TEST_CASE("single-rank allreduce and broadcast on GPU buffers") {
  if (!HaveGpu()) return;
  auto comm = SingleRank();
  const size_t n = 1 << 20;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  float* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(comm->AllReduce(dev, n, DataType::kFloat32, ReduceOp::kSum).empty());
  CHECK(comm->AllReduce(dev, n, DataType::kFloat32, ReduceOp::kAvg).empty());
  CHECK(comm->Broadcast(dev, n, DataType::kFloat32, 0).empty());
  CHECK(comm->Wait().empty());
  std::vector<float> back(n);
  REQUIRE(cudaMemcpy(back.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == host);  // one rank: sum, average and broadcast leave the values
  cudaFree(dev);
}

TEST_CASE("a communicator whose peer never comes fails within the timeout") {
  if (!HaveGpu()) return;
  unsigned char id[traintl::nccl::kUniqueIdBytes];
  char err[512] = {0};
  REQUIRE(traintl_nccl_unique_id(id, err, sizeof err) == 0);
  Communicator* comm = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(traintl_nccl_create(0, 2, id, 0, 2000, &comm, err, sizeof err) == -1);
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(comm == nullptr);
  CHECK(std::string(err).find("did not finish within 2000 ms") != std::string::npos);
  CHECK(waited < std::chrono::seconds(30));
}
