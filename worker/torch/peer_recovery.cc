// run_steps (traintl/torch_recovery.h): the loop, the regroup after a peer's death, and the
// state handover from the most advanced survivor.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "traintl/host.h"
#include "traintl/torch_recovery.h"
#include "traintl/train.h"
#include "worker/torch/runtime.h"

namespace traintl {
namespace torch {
namespace {

const traintl_host_api* RecoveryHost() {
  const traintl_host_api* api = traintl::internal::current_host_api;
  if (api == nullptr || !TRAINTL_HOST_API_HAS(api, skip_report_seq) ||
      api->regroup_wait == nullptr || api->next_report_seq == nullptr ||
      api->skip_report_seq == nullptr) {
    return nullptr;
  }
  return api;
}

// The latest regroup the head announced if >= min_generation (waiting up to `limit`), 0
// when none, -1 when the job is stopping.
int WaitRegroup(const traintl_host_api* api, int min_generation, std::chrono::milliseconds limit) {
  return static_cast<int>(api->regroup_wait(api->host, min_generation, limit.count()));
}

// Every rank of the current group agrees on the state: the rank that completed the most
// steps sends its state to the others (those behind it, and replacements, load it), and
// every rank continues that rank's report sequence. Returns the step to run next.
int64_t Resync(const traintl_host_api* api, const StepState& state, int64_t next_step,
               bool have_state) {
  ProcessGroup& group = process_group();
  const at::Tensor mine = at::tensor(
      {have_state ? next_step : int64_t{-1}, api->next_report_seq(api->host)}, at::kLong);
  const std::vector<at::Tensor> all = group.allgather(mine);
  int source = -1;
  int64_t best = -1;
  int64_t seq = 0;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const int64_t step = all[static_cast<size_t>(r)][0].item<int64_t>();
    if (step > best) {
      best = step;
      source = r;
      seq = all[static_cast<size_t>(r)][1].item<int64_t>();
    }
  }
  if (source < 0) {
    throw CollectiveError(
        "peer recovery: no rank holds the training state any more (every replica died)");
  }
  std::string bytes;
  if (group.rank() == source) {
    ::torch::serialize::OutputArchive archive;
    state.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  at::Tensor size = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
  group.broadcast(size, source);
  const int64_t n = size.item<int64_t>();
  at::Tensor data = group.rank() == source ? at::from_blob(bytes.data(), {n}, at::kByte).clone()
                                           : at::empty({n}, at::kByte);
  group.broadcast(data, source);
  if (group.rank() != source && (!have_state || next_step < best)) {
    std::istringstream in(
        std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n)));
    ::torch::serialize::InputArchive archive;
    archive.load_from(in);
    state.load(archive);
  }
  char err[1024] = {0};
  if (api->skip_report_seq(api->host, seq, err, sizeof err) != 0)
    throw std::runtime_error(std::string("peer recovery: ") + err);
  LOG_INFO << "peer recovery: rank " << group.rank() << " continues at step " << best
           << " with the state of rank " << source << " (" << n << " bytes)";
  return best;
}

}  // namespace

int64_t run_steps(int64_t first_step, int64_t end_step, const StepState& state,
                  const std::function<void(int64_t step)>& step) {
  const detail::RuntimeOptions o = detail::CurrentOptions();
  const traintl_host_api* api = o.peer_recovery && o.world_size > 1 ? RecoveryHost() : nullptr;
  int64_t next = first_step;
  if (api == nullptr) {
    for (; next < end_step && !traintl::should_stop(); ++next) step(next);
    return next;
  }
  if (detail::Joining()) {
    next = Resync(api, state, next, /*have_state=*/false);
    detail::MarkJoined();
  }
  const auto regroup = [&](int generation) {
    detail::RegroupProcessGroup(generation);
    next = Resync(api, state, next, /*have_state=*/true);
  };
  while (next < end_step && !traintl::should_stop()) {
    // A death announced while this rank computed: regroup before the next collective
    // rather than find out in it.
    const int announced =
        WaitRegroup(api, detail::CurrentGeneration() + 1, std::chrono::milliseconds(0));
    if (announced > 0) {
      regroup(announced);
      continue;
    }
    try {
      step(next);
      ++next;
    } catch (const std::exception& e) {
      // A peer's death fails the step in a collective, and the head announces the regroup
      // as soon as its agent reaped the peer. Without that word the error is the step's own.
      const int generation =
          WaitRegroup(api, detail::CurrentGeneration() + 1, o.collective_timeout);
      if (generation <= 0) throw;
      LOG_WARN << "peer recovery: step " << next << " failed (" << e.what()
               << "); regrouping as generation " << generation;
      regroup(generation);
    }
  }
  // A rank that joins as the last step ends (an elastic group growing) waits for the
  // others in its rendezvous: meet it there and hand it the final state, rather than leave
  // it waiting until the rendezvous times out.
  if (next >= end_step) {
    const int announced =
        WaitRegroup(api, detail::CurrentGeneration() + 1, std::chrono::milliseconds(0));
    if (announced > 0) regroup(announced);
  }
  return next;
}

}  // namespace torch
}  // namespace traintl
