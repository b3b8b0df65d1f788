// Byte layouts of what RaftNode puts in the replicated log and in snapshots, kept apart
// from the libraft glue so that the decoders can be unit-tested and fuzzed without a
// cluster (tests/fuzz/fuzz_raft_command.cc).
//
// A log entry (little-endian), zero-padded to a multiple of 8 bytes because C-Raft 0.15's
// uv backend pads when decoding batches but not when sending them (unpadded entries
// silently corrupt followers):
//   u32 magic "TRC1" | u32 command length | u64 proposal tag | command | zero padding
// The tag routes Apply's result to the proposal waiting for it on the leader.
// A snapshot: u32 magic "TRS1" | u32 zero | u64 state length | state | zero padding.
//
// Thread-safety: free functions with no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace traintl::raft_codec {

inline constexpr uint32_t kCommandMagic = 0x31435254;  // "TRC1"
inline constexpr size_t kCommandHeaderBytes = 16;
inline constexpr uint32_t kSnapshotMagic = 0x31535254;  // "TRS1"
inline constexpr size_t kSnapshotHeaderBytes = 16;

inline size_t PadTo8(size_t n) { return (n + 7) & ~size_t{7}; }

void PutU32(char* p, uint32_t v);
void PutU64(char* p, uint64_t v);
uint32_t GetU32(const char* p);
uint64_t GetU64(const char* p);

// Size of the entry that carries a command of `command_bytes` (header + padded command).
inline size_t CommandEntryBytes(size_t command_bytes) {
  return kCommandHeaderBytes + PadTo8(command_bytes);
}
// Writes the entry into `out`, which holds CommandEntryBytes(command.size()) bytes and is
// already zeroed (the padding is not written). `command` must be shorter than 4 GiB.
void EncodeCommandEntry(std::string_view command, uint64_t tag, char* out);

struct DecodedCommand {
  std::string_view command;  // points into the decoded buffer
  uint64_t tag = 0;
};
// Decodes an entry; nullopt (with a reason in *error when non-null) when the buffer is too
// short, has the wrong magic, or claims more command bytes than it holds. Padding is not
// checked: entries written by older versions may carry anything there.
std::optional<DecodedCommand> DecodeCommandEntry(const void* data, size_t len,
                                                 std::string* error = nullptr);

inline size_t SnapshotImageBytes(size_t state_bytes) {
  return kSnapshotHeaderBytes + PadTo8(state_bytes);
}
// As EncodeCommandEntry, for a snapshot of `state`.
void EncodeSnapshotImage(std::string_view state, char* out);
// The state inside a snapshot image, or nullopt when it is malformed.
std::optional<std::string_view> DecodeSnapshotImage(const void* data, size_t len);

}  // namespace traintl::raft_codec
